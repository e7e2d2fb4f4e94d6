"""What the spec's endpoints and OpenAI's share: the texts' embedding model, a billed search,
and the storage deposit of a write."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from catalog.routing import ROUTING_MODES
from config.errors import InvalidRequest
from inference import render
from inference.http import ApiRequest
from infra.db import db_async
from vectors import metering, services
from vectors.embedding import embed_texts
from vectors.models import Collection
from vectors.store import Item, Match, item_bytes

_price = db_async(services.price_now)


async def deposit_for_bytes(written: int) -> int:
    """What a write of ``written`` bytes (vectors or a file) must be able to pay: one GB-day of
    them (at least 1 nano-USD, so an empty wallet stores nothing)."""
    price = await _price()
    return max(
        metering.storage_day_nanos(size_bytes=written, per_gb_day_nanos=price.per_gb_day_nanos), 1
    )


async def deposit_for(items: Sequence[Item]) -> int:
    """:func:`deposit_for_bytes` of the bytes ``items`` are billed as."""
    return await deposit_for_bytes(sum(item_bytes(item) for item in items))


def embedding_model_for(collection: Collection | None, requested: str | None) -> str:
    """The model texts of ``collection`` are embedded with: the collection's own once it has
    one (a request naming another model is a 400), else the request's, else ``auto``."""
    fixed = collection.embedding_model if collection is not None else ""
    if not fixed:
        return requested or "auto"
    if requested and requested not in ROUTING_MODES and requested != fixed:
        raise InvalidRequest(
            f"The collection's texts are embedded with '{fixed}'; it cannot mix in vectors of "
            f"'{requested}'. Omit 'model' or use '{fixed}'.",
            code="invalid_value",
            param="model",
        )
    return fixed


async def search(
    request: ApiRequest,
    collection: Collection,
    *,
    vector: list[float] | None,
    text: str | None,
    top_k: int,
    where: dict[str, Any],
    model: str | None,
    text_param: str,
) -> tuple[list[Match], dict[str, Any], dict[str, str]]:
    """One billed search of ``collection`` by ``vector`` or by ``text`` (embedded first, with
    the collection's embedding model): ``(matches, infrai, headers)``."""
    if vector is None:
        assert text is not None
        chosen = embedding_model_for(collection, model)
        result = await embed_texts(request, texts=[text], model=chosen)
        vector = result.vectors[0]
        services.check_dimensions(collection, len(vector), text_param)
    price = await _price()
    fee = price.per_query_nanos
    query_vector = vector

    def run() -> list[Match]:
        matches = services.vectors_query(
            collection=collection, vector=query_vector, top_k=top_k, where=where
        )
        services.query_counted(collection_id=collection.pk, charged_nanos=fee)
        return matches

    call, matches = await metering.metered_call(
        request, endpoint="vector.query", hold_nanos=fee, charge=True, work=db_async(run)
    )
    return matches, render.infrai(call), render.headers(call)
