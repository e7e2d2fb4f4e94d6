"""``/v1/vector/*``: the spec's vector store endpoints (docs/vector_store.md).

- ``POST /v1/vector/upsert`` — ``ids`` with ``vectors`` and/or ``texts`` (+ ``metadata``);
  texts without vectors are embedded through ``/v1/embeddings`` (billed there). Creates the
  collection on first use. A metered platform call: holds one GB-day of the written bytes
  (402, nothing written, when the wallet cannot), charges nothing itself (storage is metered).
- ``POST /v1/vector/query`` — a ``vector`` or a ``text``, ``top_k``, ``filter``: ids, scores,
  metadata and texts, best first; charged the catalog's per-query price.
- ``POST /v1/vector/delete`` — by ``ids``, ``filter`` or ``delete_all``.
- ``GET/POST /v1/vector/collections``, ``GET/DELETE /v1/vector/collections/{name}``.

Order in every handler: validate (400) → find the caller's collection (404) → embed texts
(the embeddings call's own hold and bill) → hold → work → settle.
"""

from __future__ import annotations

from typing import Any

from config.errors import NotFound
from inference import render
from inference.endpoints import metered
from inference.http import ApiRequest, Response, json_response, route
from infra.db import db_async
from vectors import metering, openai_api, services, validation
from vectors.embedding import embed_texts
from vectors.flows import deposit_for, embedding_model_for, search
from vectors.models import Collection
from vectors.store import Item, Match

_find = db_async(services.collection_find)
_find_or_create = db_async(services.collection_find_or_create)


def collection_json(c: Collection) -> dict[str, Any]:
    """A collection as the API shows it."""
    return {
        "object": "vector.collection",
        "name": c.name,
        "id": c.public_id,
        "dimensions": c.dimensions,
        "embedding_model": c.embedding_model or None,
        "vector_count": c.vector_count,
        "size_bytes": c.size_bytes,
        "engine": c.engine,
        "metadata": c.metadata,
        "created_at": int(c.created_at.timestamp()),
    }


def match_json(m: Match) -> dict[str, Any]:
    return {"id": m.id, "score": round(m.score, 6), "metadata": m.metadata, "text": m.text or None}


async def _maybe_find(request: ApiRequest, name: str) -> Collection | None:
    try:
        return await _find(project_id=request.caller.project_id, name=name)
    except NotFound:  # the upsert creates it
        return None


async def upsert(request: ApiRequest) -> Response:
    data = request.json()
    name = validation.collection_name(data)
    existing = await _maybe_find(request, name)
    parsed = validation.parse_upsert(data, existing.dimensions if existing else None)
    vectors, model = parsed.vectors, ""
    embedded_infrai = None
    if vectors is None:
        assert parsed.texts is not None
        chosen = embedding_model_for(existing, parsed.model)
        result = await embed_texts(request, texts=parsed.texts, model=chosen)
        vectors, model, embedded_infrai = result.vectors, result.model, result.infrai
        if existing is not None:
            services.check_dimensions(existing, len(vectors[0]), "model")
    items = [
        Item(id=i, vector=v, metadata=m, text=t)
        for i, v, m, t in zip(
            parsed.ids,
            vectors,
            parsed.metadata,
            parsed.texts or [""] * len(parsed.ids),
            strict=True,
        )
    ]
    deposit = await deposit_for(items)
    key = request.caller

    def write() -> Collection:
        collection = services.collection_find_or_create(
            organization_id=key.organization_id, project_id=key.project_id, name=name
        )
        services.embedding_model_pin(collection=collection, model=model)
        param = "model" if model else "vectors[0]"
        services.vectors_write(collection=collection, items=items, param=param)
        return collection

    call, collection = await metering.metered_call(
        request, endpoint="vector.upsert", hold_nanos=deposit, charge=False, work=db_async(write)
    )
    out = {
        "object": "vector.upsert",
        "collection": collection.name,
        "upserted": len(items),
        "dimensions": collection.dimensions,
        "vector_count": collection.vector_count,
        "size_bytes": collection.size_bytes,
        "infrai": render.infrai(call),
    }
    if embedded_infrai is not None:
        out["embedding"] = {"model": model, "infrai": embedded_infrai}
    return json_response(out, headers=render.headers(call))


async def query(request: ApiRequest) -> Response:
    data = request.json()
    name = validation.collection_name(data)
    collection = await _find(project_id=request.caller.project_id, name=name)
    parsed = validation.parse_query(data, collection.dimensions)
    matches, infrai, headers = await search(
        request,
        collection,
        vector=parsed.vector,
        text=parsed.text,
        top_k=parsed.top_k,
        where=parsed.where,
        model=parsed.model,
        text_param="text",
    )
    out = {
        "object": "list",
        "collection": collection.name,
        "data": [match_json(m) for m in matches],
        "infrai": infrai,
    }
    return json_response(out, headers=headers)


@metering.free_call("vector.delete")
async def delete(request: ApiRequest) -> Response:
    data = request.json()
    parsed = validation.parse_delete(data)
    collection = await _find(project_id=request.caller.project_id, name=parsed.collection)
    deleted = await db_async(services.vectors_delete)(
        collection=collection, ids=parsed.ids, where=parsed.where
    )
    return json_response(
        {"object": "vector.delete", "collection": collection.name, "deleted": deleted}
    )


@metering.free_call("vector.collections")
async def collections_list(request: ApiRequest) -> Response:
    rows = await db_async(services.collections_of)(project_id=request.caller.project_id)
    return json_response({"object": "list", "data": [collection_json(c) for c in rows]})


@metering.free_call("vector.collections")
async def collections_create(request: ApiRequest) -> Response:
    data = request.json()
    metered.reject_unknown(data, {"name", "dimensions", "metadata"})
    name = validation.collection_name(data, "name")
    dimensions = validation.dimensions_field(data)
    meta = validation.metadata_field(data.get("metadata"), "metadata")
    key = request.caller
    created = await db_async(services.collection_create)(
        organization_id=key.organization_id,
        project_id=key.project_id,
        name=name,
        dimensions=dimensions,
        metadata=meta,
    )
    return json_response(collection_json(created))


@metering.free_call("vector.collections")
async def collection_get(request: ApiRequest) -> Response:
    name = request.path_params["name"]
    found = await _find(project_id=request.caller.project_id, name=name, param="name")
    return json_response(collection_json(found))


@metering.free_call("vector.collections")
async def collection_delete(request: ApiRequest) -> Response:
    name = request.path_params["name"]
    found = await _find(project_id=request.caller.project_id, name=name, param="name")
    await db_async(services.collection_delete)(collection=found)
    return json_response({"object": "vector.collection.deleted", "name": name, "deleted": True})


# The routes of this module, for the app's table (config.asgi).
ROUTES = (
    route("/v1/vector/upsert", methods={"POST": upsert}),
    route("/v1/vector/query", methods={"POST": query}),
    route("/v1/vector/delete", methods={"POST": delete}),
    route("/v1/vector/collections", methods={"GET": collections_list, "POST": collections_create}),
    route(
        "/v1/vector/collections/{name}",
        methods={"GET": collection_get, "DELETE": collection_delete},
    ),
    *openai_api.ROUTES,
)
