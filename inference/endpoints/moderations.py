"""``POST /v1/moderations``: validate → limit → route (``moderation``) → hold → call → settle.

``input`` is a string, an array of strings, or an array of multimodal parts (``text`` and
``image_url``, as OpenAI's omni models take them). Billed per input token at the offering's
input price — free where the catalog prices it at 0. Moderation APIs report no usage, so the
tokens are counted with our tokenizer (flagged ``usage_estimated``). The answer keeps OpenAI's
shape: ``id``, ``model``, ``results[]`` with ``flagged``, ``categories`` and
``category_scores``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config.errors import InvalidRequest, UpstreamError, invalid_type, missing_param
from inference import render, tokens
from inference.endpoints import metered
from inference.http import ApiRequest, Response, json_response, route
from inference.usage import Billed
from inference.vendors.base import JSON
from money.pricing import Usage

ENDPOINT = "moderations"
MAX_INPUTS = 1024
_FIELDS = {"model", "input"}


@dataclass(frozen=True, slots=True)
class ModerationRequest:
    """A validated moderation request: the payload to forward and its text for counting."""

    payload: JSON
    routing: metered.Routing
    texts: list[str]
    images: int

    @property
    def tokens_upper(self) -> int:
        """Input tokens of any tokenizer at most (a token covers at least one byte)."""
        return sum(len(t.encode()) + 4 for t in self.texts) + tokens.IMAGE_TOKENS * self.images


def _parts(items: list[Any]) -> tuple[list[str], int]:
    """Texts and image count of multimodal input parts; 400 names a bad part."""
    texts, images = [], 0
    for i, part in enumerate(items):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise invalid_type(f"input[{i}].text", "a string")
            texts.append(part["text"])
        elif kind == "image_url":
            url = (part.get("image_url") or {}).get("url")
            if not isinstance(url, str) or not url:
                raise invalid_type(f"input[{i}].image_url.url", "a URL string")
            images += 1
        else:
            raise InvalidRequest(
                "Each input part must be {'type': 'text', ...} or {'type': 'image_url', ...}.",
                param=f"input[{i}].type",
            )
    return texts, images


def parse_moderation_request(data: dict[str, Any]) -> ModerationRequest:
    """Validate a moderation body; 400 with ``param`` naming the field."""
    metered.reject_unknown(data, _FIELDS)
    routing = metered.routing_fields(data)
    raw = data.get("input")
    if raw is None:
        raise missing_param("input")
    if isinstance(raw, str):
        texts, images = [raw], 0
    elif isinstance(raw, list) and raw and len(raw) <= MAX_INPUTS:
        if all(isinstance(item, str) for item in raw):
            texts, images = list(raw), 0
        else:
            texts, images = _parts(raw)
    else:
        raise invalid_type(
            "input", f"a string, or an array of 1 to {MAX_INPUTS} strings or input parts"
        )
    return ModerationRequest(payload={"input": raw}, routing=routing, texts=texts, images=images)


def usage_of(request: ModerationRequest, body: Any) -> Billed:
    """Input tokens by our count (moderation APIs report none); 502 for a malformed answer."""
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list) or not all(
        isinstance(r, dict) and "flagged" in r and isinstance(r.get("category_scores"), dict)
        for r in results
    ):
        raise UpstreamError("The vendor answered something that is not a moderation result.")
    counted = sum(tokens.count_text(t) for t in request.texts)
    return Billed(
        Usage(input_tokens=counted + tokens.IMAGE_TOKENS * request.images), estimated=True
    )


async def moderations(request: ApiRequest) -> Response:
    """The endpoint. See the module docstring."""
    data = request.json()
    parsed = parse_moderation_request(data)
    call, body = await metered.call_cached(
        request,
        endpoint=ENDPOINT,
        capability="moderation",
        routing=parsed.routing,
        cache_data=data,
        texts=parsed.texts,
        likely_tokens=parsed.tokens_upper // 4,
        worst_tokens=parsed.tokens_upper,
        fn=lambda adapter, target, _c: adapter.moderate(target, parsed.payload),
        usage_of=lambda answer: usage_of(parsed, answer),
    )
    out: JSON = {
        "id": body.get("id") or "modr-" + request.request_id.removeprefix("req_"),
        "model": call.answer.model,
        "results": body["results"],
        "infrai": render.infrai(call),
    }
    return json_response(out, headers=render.headers(call))


# The routes of this module, for the app's table (config.asgi).
ROUTES = (route("/v1/moderations", methods={"POST": moderations}, confirms_key=True),)
