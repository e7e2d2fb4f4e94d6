"""What a batch line may ask for: one :class:`Kind` per endpoint a batch can target, each made
of the live endpoint's own parts — its validator, its routing request, its vendor leg
(:class:`inference.stages.Leg`: the hold's worst case, the send, the bill) and its renderer —
so a line is validated, routed, held, billed and answered exactly as the same body posted to
the endpoint would be (without streaming or the exact cache)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from catalog.routing import Candidate, RoutingRequest
from config.errors import InvalidRequest
from inference import render
from inference.call import Call
from inference.chat import leg as chat_leg
from inference.chat.validation import ChatRequest, parse_chat_request
from inference.endpoints import chat, embeddings
from inference.endpoints.embeddings import EmbeddingRequest
from inference.stages import Leg
from inference.vendors.base import JSON
from money.pricing import Usage, cost_nanos, discounted

CHAT_URL = "/v1/chat/completions"
EMBEDDINGS_URL = "/v1/embeddings"


@dataclass(frozen=True, slots=True)
class Kind:
    """One endpoint as batch lines use it, over its parsed request type (``Any`` here: each
    kind's functions agree among themselves)."""

    url: str
    endpoint: str  # the request log's endpoint name
    parse: Callable[[dict[str, Any]], Any]
    model: Callable[[Any], str]
    routing: Callable[[Any], RoutingRequest]
    leg: Leg[Any, JSON]
    render: Callable[[Call, Any, JSON], JSON]
    prompt: Callable[[Any], str]


def _parse_chat(body: dict[str, Any]) -> ChatRequest:
    """A chat body as the live endpoint validates it; streaming is not for batches."""
    if body.get("stream") is True:
        raise InvalidRequest("Batch requests cannot be streamed: remove 'stream'.", param="stream")
    return parse_chat_request(body)


def _render_chat(call: Call, parsed: ChatRequest, answer: JSON) -> JSON:
    body = chat.completion_body(call, parsed, answer)
    body["infrai"] = render.infrai(call)
    return body


def _routing_embeddings(parsed: EmbeddingRequest) -> RoutingRequest:
    """What :func:`inference.endpoints.metered.open_call` routes an embeddings request by."""
    likely = parsed.tokens_upper // 4 + parsed.token_ids
    return RoutingRequest(
        model=parsed.routing.model,
        capabilities=frozenset({"embeddings"}),
        params={"dimensions": parsed.dimensions} if parsed.dimensions is not None else {},
        task=parsed.routing.task,
        prefer=parsed.routing.prefer,
        expected_usage=Usage(input_tokens=likely),
    )


async def _send_embeddings(adapter: Any, target: Any, candidate: Candidate, p: Any) -> JSON:
    return await adapter.embed(target, p.payload_for(candidate))


def _render_embeddings(call: Call, parsed: EmbeddingRequest, answer: JSON) -> JSON:
    body = embeddings.embedding_list(answer, parsed, call.answer.model, call.usage)
    body["infrai"] = render.infrai(call)
    return body


EMBEDDINGS_LEG: Leg[EmbeddingRequest, JSON] = Leg(
    worst_case=lambda parsed, _candidate: Usage(input_tokens=parsed.tokens_upper),
    send=_send_embeddings,
    bill=lambda _call, parsed, answer: embeddings.usage_of(parsed, answer),
)

KINDS: dict[str, Kind] = {
    CHAT_URL: Kind(
        url=CHAT_URL,
        endpoint=chat.ENDPOINT,
        parse=_parse_chat,
        model=lambda parsed: parsed.model,
        routing=chat_leg.routing_request,
        leg=chat_leg.CHAT_LEG,
        render=_render_chat,
        prompt=lambda parsed: str(parsed.payload["messages"]),
    ),
    EMBEDDINGS_URL: Kind(
        url=EMBEDDINGS_URL,
        endpoint=embeddings.ENDPOINT,
        parse=embeddings.parse_embedding_request,
        model=lambda parsed: parsed.routing.model,
        routing=_routing_embeddings,
        leg=EMBEDDINGS_LEG,
        render=_render_embeddings,
        prompt=lambda parsed: "\n".join(parsed.texts),
    ),
}


def at_batch_price(candidate: Candidate, discounts: dict[int, int]) -> Candidate:
    """``candidate`` at its offering's batch price (``discounts``: percent by offering id;
    an offering not listed keeps its price)."""
    percent = discounts.get(candidate.offering_id, 0)
    if not percent:
        return candidate
    return replace(candidate, price=discounted(candidate.price, percent=percent))


def worst_case_nanos(kind: Kind, parsed: Any, candidates: tuple[Candidate, ...]) -> int:
    """The most one line can cost over ``candidates`` (already at their batch price): what
    its part of the batch's reservation is, as :func:`inference.stages.hold` sizes a hold."""
    return max(cost_nanos(price=c.price, usage=kind.leg.worst_case(parsed, c)) for c in candidates)
