"""``POST /v1/embeddings``: validate → limit → route (``embeddings``) → hold → call → settle.

Billed per input token at the offering's input price (the vendor's ``usage.prompt_tokens``;
counted with our tokenizer, and flagged, when the vendor reports none). ``encoding_format``
``base64`` is OpenAI's little-endian float32 packing; the answer is converted to the requested
format whatever the vendor sent. ``dimensions`` is forwarded to models that accept it and is
a matrix parameter for routing (a model whose matrix says it *fails*, or whose largest size is
smaller, is never chosen for it).

Token-id input (a list of ints, or lists of them — what LangChain's ``OpenAIEmbeddings``
sends) is OpenAI's: cl100k_base ids. A model that reads cl100k_base ids
(``Model.tokenizer``) gets them as they are; any other model gets the text they decode to,
never ids it would read as its own vocabulary. Ids that are not cl100k_base tokens are a 400.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Any

from catalog.routing import Candidate
from config.errors import InvalidRequest, UpstreamError, invalid_type, missing_param
from inference import render, tokens
from inference.endpoints import metered
from inference.http import ApiRequest, Response, json_response, route
from inference.usage import Billed
from inference.validation import positive_int
from inference.vendors.base import JSON
from money.pricing import Usage

ENDPOINT = "embeddings"
MAX_INPUTS = 2048
MAX_DIMENSIONS = 65536
_FIELDS = {"model", "input", "encoding_format", "dimensions", "user"}
# Per input: the special tokens a tokenizer may add ([CLS]/[SEP], BOS/EOS) with room to spare.
_SPECIAL_TOKENS = 4


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    """A validated embeddings request.

    ``texts`` are the string inputs (for our own token count); ``tokens_upper`` bounds the
    input tokens of any tokenizer (a token covers at least one UTF-8 byte). ``text_payload``:
    the payload with token-id inputs decoded to text (``None`` when there are none); see
    :meth:`payload_for`.
    """

    payload: JSON
    routing: metered.Routing
    encoding_format: str
    dimensions: int | None
    texts: list[str]
    token_ids: int
    tokens_upper: int
    text_payload: JSON | None = None

    def payload_for(self, candidate: Candidate) -> JSON:
        """What to send ``candidate``: token ids only to a model that reads cl100k_base ids."""
        if self.text_payload is None or candidate.tokenizer == tokens.CL100K:
            return self.payload
        return self.text_payload


def _is_token_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    )


def _inputs(raw: Any) -> list[str | list[int]]:
    """OpenAI's ``input``: a string, strings, token ids, or lists of token ids."""
    if raw is None:
        raise missing_param("input")
    if isinstance(raw, str) or _is_token_list(raw):
        items: list[Any] = [raw]
    elif isinstance(raw, list) and raw:
        items = raw
    else:
        raise invalid_type("input", "a non-empty string, array of strings or array of token ids")
    if len(items) > MAX_INPUTS:
        raise InvalidRequest(f"'input' may hold at most {MAX_INPUTS} items.", param="input")
    for i, item in enumerate(items):
        if isinstance(item, str):
            if not item:
                raise InvalidRequest(f"'input[{i}]' must not be empty.", param=f"input[{i}]")
        elif not _is_token_list(item):
            raise invalid_type(f"input[{i}]", "a string or an array of token ids")
    return items


def _decoded(items: list[str | list[int]], single: bool) -> str | list[str]:
    """The inputs with every token-id list replaced by its cl100k_base text (400 on bad ids)."""
    texts = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            texts.append(item)
            continue
        try:
            texts.append(tokens.decode_cl100k(item))
        except ValueError as exc:
            param = "input" if single else f"input[{i}]"
            raise InvalidRequest(
                f"Invalid token ids in '{param}': {exc}. Token-id input is read as OpenAI's "
                "cl100k_base ids.",
                param=param,
            ) from None
    return texts[0] if single else texts


def parse_embedding_request(data: dict[str, Any]) -> EmbeddingRequest:
    """Validate an embeddings body; 400 with ``param`` naming the field."""
    metered.reject_unknown(data, _FIELDS)
    routing = metered.routing_fields(data)
    items = _inputs(data.get("input"))
    fmt = metered.choice(data, "encoding_format", ("float", "base64"), "float")
    dimensions = positive_int(data, "dimensions", MAX_DIMENSIONS)
    metered.optional_string(data, "user")
    texts = [i for i in items if isinstance(i, str)]
    token_ids = sum(len(i) for i in items if isinstance(i, list))
    payload: JSON = {"input": data["input"], "encoding_format": fmt}
    for name in ("dimensions", "user"):
        if data.get(name) is not None:
            payload[name] = data[name]
    upper = sum(len(t.encode()) for t in texts) + token_ids + _SPECIAL_TOKENS * len(items)
    text_payload = None
    if token_ids:
        single = not isinstance(data["input"], list) or _is_token_list(data["input"])
        decoded = _decoded(items, single)
        text_payload = {**payload, "input": decoded}
        # Decoded text may hold more tokens of another tokenizer than there were ids.
        all_text = [decoded] if isinstance(decoded, str) else decoded
        upper = sum(len(t.encode()) for t in all_text) + _SPECIAL_TOKENS * len(items) + token_ids
    return EmbeddingRequest(
        payload=payload,
        routing=routing,
        encoding_format=fmt,
        dimensions=dimensions,
        texts=texts,
        token_ids=token_ids,
        tokens_upper=upper,
        text_payload=text_payload,
    )


def pack_float32(vector: list[float]) -> str:
    """OpenAI's ``base64`` embedding: little-endian float32 values, base64-encoded."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def unpack_float32(packed: str) -> list[float]:
    """The inverse of :func:`pack_float32`."""
    raw = base64.b64decode(packed)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def _embedding_in(value: list[float] | str, encoding_format: str) -> list[float] | str:
    if isinstance(value, str):
        return value if encoding_format == "base64" else unpack_float32(value)
    return pack_float32(value) if encoding_format == "base64" else value


def check_answer(body: Any) -> None:
    """502 unless ``body`` is an embeddings list (each embedding floats or base64)."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not all(
        isinstance(d, dict) and isinstance(d.get("embedding"), list | str) for d in data
    ):
        raise UpstreamError("The vendor answered something that is not an embeddings list.")


def embedding_list(body: JSON, request: EmbeddingRequest, model: str, usage: Usage) -> JSON:
    """OpenAI's embeddings list for a checked vendor ``body`` (format, model, usage ours)."""
    items = sorted(body["data"], key=lambda d: int(d.get("index", 0)))
    return {
        "object": "list",
        "data": [
            {
                "object": "embedding",
                "index": i,
                "embedding": _embedding_in(d.get("embedding"), request.encoding_format),
            }
            for i, d in enumerate(items)
        ],
        "model": model,
        "usage": {"prompt_tokens": usage.input_tokens, "total_tokens": usage.input_tokens},
    }


def usage_of(request: EmbeddingRequest, body: JSON) -> Billed:
    """The vendor's prompt tokens, else our own count (then ``estimated`` is True).

    Raises 502 for an answer that is not an embeddings list (nothing is charged then).
    """
    check_answer(body)
    usage = body.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
        return Billed(Usage(input_tokens=usage["prompt_tokens"]))
    counted = sum(tokens.count_text(t) for t in request.texts) + request.token_ids
    return Billed(Usage(input_tokens=counted), estimated=True)


async def embeddings(request: ApiRequest) -> Response:
    """The endpoint. See the module docstring."""
    data = request.json()
    parsed = parse_embedding_request(data)
    call, body = await metered.call_cached(
        request,
        endpoint=ENDPOINT,
        capability="embeddings",
        routing=parsed.routing,
        cache_data=data,
        texts=parsed.texts,
        likely_tokens=parsed.tokens_upper // 4 + parsed.token_ids,
        worst_tokens=parsed.tokens_upper,
        fn=lambda adapter, target, candidate: adapter.embed(target, parsed.payload_for(candidate)),
        usage_of=lambda answer: usage_of(parsed, answer),
        params={"dimensions": parsed.dimensions} if parsed.dimensions is not None else None,
    )
    out = embedding_list(body, parsed, call.answer.model, call.usage)
    out["infrai"] = render.infrai(call)
    return json_response(out, headers=render.headers(call))


# The routes of this module, for the app's table (config.asgi).
ROUTES = (route("/v1/embeddings", methods={"POST": embeddings}, confirms_key=True),)
