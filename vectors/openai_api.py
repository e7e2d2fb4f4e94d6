"""OpenAI's own surface over the same store: ``/v1/files`` and ``/v1/vector_stores``.

So that ``client.files.create(purpose="assistants")``, ``client.vector_stores.create()``,
``client.vector_stores.files.create()`` and ``client.vector_stores.search()`` of the official
SDKs work, with OpenAI's response shapes. A vector store is a collection named by its id
(``vs_…``). Attaching a file chunks its text (:mod:`vectors.chunking`: paragraphs packed whole
up to the chunk size, longer ones cut with OpenAI's static strategy: default 800 tokens, 400
overlap, in cl100k tokens), embeds the chunks through ``/v1/embeddings`` (billed there) and
writes them as vectors ``<file id>#<n>`` whose metadata are the file's ``attributes`` plus
``_file_id`` / ``_filename``. The work is done before the answer, so the file comes back
``completed`` (or ``failed`` with ``last_error`` for a file that is not UTF-8 text). A search
is a billed query (:func:`vectors.flows.search`). Uploads are metered writes (a wallet that
cannot pay a GB-day of the file gets a 402) within the organization's storage quota; files'
bytes, quota and listing are :mod:`vectors.files`.

This module is the surface only: it parses requests, renders OpenAI's shapes and registers
the routes. Writes are :mod:`vectors.services`' (the links of files to stores included),
reads of the links :mod:`vectors.selectors`'.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from config.errors import InvalidRequest, invalid_type, missing_param
from inference import multipart, render
from inference.endpoints import metered
from inference.http import ApiRequest, Response, StreamingResponse, json_response, route
from infra.db import db_async
from vectors import chunking, files, metering, selectors, services, validation
from vectors.embedding import embed_texts
from vectors.flows import deposit_for, deposit_for_bytes, embedding_model_for, search
from vectors.models import Collection, StoredFile, VectorStoreFile
from vectors.services import FILE_ID, FILENAME
from vectors.store import Item

PURPOSES = ("assistants", "user_data", "batch", "fine-tune", "vision", "evals")
MAX_CHUNKS = validation.MAX_BATCH
MAX_SEARCH_RESULTS = 50


def chunking_strategy(value: Any) -> tuple[int, int]:
    """``chunking_strategy`` as ``(max_chunk_size_tokens, chunk_overlap_tokens)``: ``auto``
    (or absent) is 800/400; ``static`` takes a size of 100-4096 and an overlap of at most half
    of it, else a 400 naming the field."""
    if value is None or (isinstance(value, dict) and value.get("type") == "auto"):
        return chunking.DEFAULT_CHUNK_TOKENS, chunking.DEFAULT_OVERLAP_TOKENS
    if not isinstance(value, dict) or value.get("type") != "static":
        raise invalid_type("chunking_strategy", "{'type': 'auto'} or {'type': 'static', …}")
    static = value.get("static")
    if not isinstance(static, dict):
        raise missing_param("chunking_strategy.static")
    size = static.get("max_chunk_size_tokens")
    overlap = static.get("chunk_overlap_tokens", 0)
    if not isinstance(size, int) or not 100 <= size <= 4096:
        raise InvalidRequest(
            "'max_chunk_size_tokens' must be an integer from 100 to 4096.",
            code="invalid_value",
            param="chunking_strategy.static.max_chunk_size_tokens",
        )
    if not isinstance(overlap, int) or not 0 <= overlap <= size // 2:
        raise InvalidRequest(
            "'chunk_overlap_tokens' must be an integer from 0 to half the chunk size.",
            code="invalid_value",
            param="chunking_strategy.static.chunk_overlap_tokens",
        )
    return size, overlap


# --- shapes -----------------------------------------------------------------------------------


def file_json(f: StoredFile) -> dict[str, Any]:
    return {
        "id": f.public_id,
        "object": "file",
        "bytes": f.bytes,
        "created_at": int(f.created_at.timestamp()),
        "filename": f.filename,
        "purpose": f.purpose,
        "status": "processed",
        "status_details": None,
    }


def store_json(c: Collection) -> dict[str, Any]:
    """A collection as OpenAI's ``vector_store`` object (reads its file counts)."""
    created = int(c.created_at.timestamp())
    return {
        "id": c.public_id,
        "object": "vector_store",
        "created_at": created,
        "name": c.title or c.name,
        "usage_bytes": c.size_bytes,
        "file_counts": selectors.store_file_counts(collection=c),
        "status": "completed",
        "expires_after": None,
        "expires_at": None,
        "last_active_at": created,
        "metadata": c.metadata,
    }


def store_file_json(sf: VectorStoreFile, store_id: str, file_id: str) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "vector_store.file",
        "usage_bytes": sf.usage_bytes,
        "created_at": int(sf.created_at.timestamp()),
        "vector_store_id": store_id,
        "status": sf.status,
        "last_error": sf.last_error,
        "attributes": sf.attributes,
        "chunking_strategy": {"type": "static", "static": sf.chunking} if sf.chunking else None,
    }


def _page(data: list[dict[str, Any]], *, has_more: bool = False) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


# --- files ------------------------------------------------------------------------------------


def _one(request: ApiRequest, name: str) -> str | None:
    values = request.query.get(name)
    return values[-1] if values else None


def _list_params(request: ApiRequest) -> tuple[int, str, str | None, str | None]:
    """``GET /v1/files``'s query: ``limit`` (1-10,000, default 10,000), ``order`` (``desc``,
    the default, or ``asc``), ``after`` (a file id) and ``purpose``."""
    raw = _one(request, "limit")
    try:
        limit = files.MAX_PAGE if raw is None else int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= files.MAX_PAGE:
        raise InvalidRequest(
            f"'limit' must be an integer from 1 to {files.MAX_PAGE}.", param="limit"
        )
    order = _one(request, "order") or "desc"
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order")
    return limit, order, _one(request, "after"), _one(request, "purpose")


async def files_create(request: ApiRequest) -> Response:
    """Store an upload: a metered call that must be able to pay one GB-day of the file's
    bytes (402 ``insufficient_quota``, nothing stored) and fit the organization's quota (400
    ``storage_quota_exceeded``, ``param: file``). The write itself is free; storage is
    charged per GB-day by :func:`vectors.metering.storage_meter`."""
    fields, uploads = await multipart.aparse(request.headers.get("content-type", ""), request.body)
    if fields.get("purpose") is None:
        raise missing_param("purpose")
    purpose = metered.choice(fields, "purpose", PURPOSES, default="")
    upload = uploads.get("file")
    if upload is None:
        raise missing_param("file")
    key = request.caller
    deposit = await deposit_for_bytes(len(upload.content))
    store = db_async(files.file_create)

    call, stored = await metering.metered_call(
        request,
        endpoint="files",
        hold_nanos=deposit,
        charge=False,
        work=lambda: store(
            organization_id=key.organization_id,
            project_id=key.project_id,
            filename=(upload.filename or "upload").replace("\x00", "")[:256] or "upload",
            purpose=purpose,
            content=upload.content,
        ),
    )
    return json_response(file_json(stored), headers=render.headers(call))


@metering.free_call("files")
async def files_list(request: ApiRequest) -> Response:
    """OpenAI's cursor page of the project's files (metadata only, never their bytes)."""
    limit, order, after, purpose = _list_params(request)
    page = await db_async(files.files_page)(
        project_id=request.caller.project_id,
        limit=limit,
        order=order,
        after=after,
        purpose=purpose,
    )
    return json_response(_page([file_json(f) for f in page.files], has_more=page.has_more))


@metering.free_call("files")
async def file_get(request: ApiRequest) -> Response:
    found = await db_async(files.file_find)(
        project_id=request.caller.project_id, file_id=request.path_params["file_id"]
    )
    return json_response(file_json(found))


@metering.free_call("files")
async def file_content(request: ApiRequest) -> StreamingResponse:
    """The file's bytes, streamed one chunk (1 MiB) at a time: memory bounded by a chunk
    whatever the file's size. A file deleted while it streams ends early."""
    found = await db_async(files.file_find)(
        project_id=request.caller.project_id, file_id=request.path_params["file_id"]
    )
    chunk = db_async(files.file_chunk)

    async def chunks() -> AsyncIterator[bytes]:
        seq = 0
        while (data := await chunk(stored=found, seq=seq)) is not None:
            yield data
            seq += 1

    return StreamingResponse(
        chunks(),
        content_type=b"application/octet-stream",
        headers={"content-disposition": f'attachment; filename="{found.public_id}"'},
    )


@metering.free_call("files")
async def file_delete(request: ApiRequest) -> Response:
    file_id = request.path_params["file_id"]
    found = await db_async(files.file_find)(project_id=request.caller.project_id, file_id=file_id)
    await db_async(files.file_delete)(stored=found)
    return json_response({"id": file_id, "object": "file", "deleted": True})


# --- vector stores ----------------------------------------------------------------------------


def _store(request: ApiRequest) -> Collection:
    return services.collection_find(
        project_id=request.caller.project_id,
        name=request.path_params["vector_store_id"],
        param="vector_store_id",
    )


async def stores_create(request: ApiRequest) -> Response:
    data = request.json()
    metered.reject_unknown(
        data, {"name", "file_ids", "metadata", "chunking_strategy", "expires_after", "description"}
    )
    title = metered.optional_string(data, "name") or ""
    meta = validation.metadata_field(data.get("metadata"), "metadata")
    file_ids = data.get("file_ids") or []
    if not isinstance(file_ids, list) or not all(isinstance(f, str) for f in file_ids):
        raise invalid_type("file_ids", "an array of file ids")
    size, overlap = chunking_strategy(data.get("chunking_strategy"))
    key = request.caller
    for i, file_id in enumerate(file_ids):  # 404 before anything is created
        await db_async(files.file_find)(
            project_id=key.project_id, file_id=file_id, param=f"file_ids[{i}]"
        )
    created = await db_async(services.collection_create)(
        organization_id=key.organization_id,
        project_id=key.project_id,
        name=None,
        title=title[:256],
        metadata=meta,
    )
    for file_id in file_ids:
        await _attach(request, created, file_id, {}, size, overlap)
    return json_response(await db_async(store_json)(created))


@metering.free_call("vector_stores")
async def stores_list(request: ApiRequest) -> Response:
    def rows() -> list[dict[str, Any]]:
        return [
            store_json(c) for c in services.collections_of(project_id=request.caller.project_id)
        ]

    return json_response(_page(await db_async(rows)()))


@metering.free_call("vector_stores")
async def store_get(request: ApiRequest) -> Response:
    return json_response(await db_async(lambda: store_json(_store(request)))())


@metering.free_call("vector_stores")
async def store_update(request: ApiRequest) -> Response:
    """OpenAI's modify: ``name`` and ``metadata`` (``expires_after`` is accepted, unused)."""
    data = request.json()
    metered.reject_unknown(data, {"name", "metadata", "expires_after"})
    title = metered.optional_string(data, "name")
    meta = (
        validation.metadata_field(data.get("metadata"), "metadata") if "metadata" in data else None
    )

    def update() -> dict[str, Any]:
        store = _store(request)
        services.collection_update(collection=store, title=title, metadata=meta)
        return store_json(store)

    return json_response(await db_async(update)())


@metering.free_call("vector_stores")
async def store_delete(request: ApiRequest) -> Response:
    found = await db_async(_store)(request)
    await db_async(services.collection_delete)(collection=found)
    return json_response({"id": found.public_id, "object": "vector_store.deleted", "deleted": True})


async def _attach(
    request: ApiRequest,
    store: Collection,
    file_id: str,
    attributes: dict[str, Any],
    size: int,
    overlap: int,
) -> tuple[VectorStoreFile, str]:
    """Chunk, embed (billed) and write one file's text into ``store``: the link comes back
    ``completed``, or ``failed`` (nothing embedded or written) for a file that gives no
    chunks. 404 for a file the project does not have."""
    stored = await db_async(files.file_find)(project_id=request.caller.project_id, file_id=file_id)
    link = await db_async(services.store_file_begin)(
        collection=store, stored=stored, attributes=attributes, max_tokens=size, overlap=overlap
    )
    content = await db_async(files.file_content)(stored=stored)
    chunks, why = chunking.chunk_file(
        content, max_tokens=size, overlap=overlap, max_chunks=MAX_CHUNKS
    )
    if why is not None:
        await db_async(services.store_file_fail)(link=link, message=why)
        return link, stored.public_id
    model = embedding_model_for(store, None)
    embedded = await embed_texts(request, texts=chunks, model=model)
    services.check_dimensions(store, len(embedded.vectors[0]), "file_id")
    meta = {**attributes, FILE_ID: stored.public_id, FILENAME: stored.filename}
    items = [
        Item(id=f"{stored.public_id}#{n}", vector=v, metadata=meta, text=chunk)
        for n, (v, chunk) in enumerate(zip(embedded.vectors, chunks, strict=True))
    ]
    deposit = await deposit_for(items)

    def write() -> None:
        services.store_file_complete(
            collection=store,
            link=link,
            file_id=stored.public_id,
            items=items,
            embedding_model=embedded.model,
        )

    await metering.metered_call(
        request, endpoint="vector.upsert", hold_nanos=deposit, charge=False, work=db_async(write)
    )
    return link, stored.public_id


async def store_files_create(request: ApiRequest) -> Response:
    data = request.json()
    metered.reject_unknown(data, {"file_id", "attributes", "chunking_strategy"})
    file_id = data.get("file_id")
    if file_id is None:
        raise missing_param("file_id")
    if not isinstance(file_id, str):
        raise invalid_type("file_id", "a string")
    attributes = validation.metadata_field(data.get("attributes"), "attributes")
    size, overlap = chunking_strategy(data.get("chunking_strategy"))
    store = await db_async(_store)(request)
    link, public = await _attach(request, store, file_id, attributes, size, overlap)
    return json_response(store_file_json(link, store.public_id, public))


@metering.free_call("vector_stores.files")
async def store_files_list(request: ApiRequest) -> Response:
    def rows() -> list[dict[str, Any]]:
        store = _store(request)
        links = selectors.store_files_of(collection=store)
        return [store_file_json(sf, store.public_id, sf.file.public_id) for sf in links]

    return json_response(_page(await db_async(rows)()))


def _link(request: ApiRequest) -> tuple[Collection, VectorStoreFile]:
    store = _store(request)
    link = selectors.store_file_find(collection=store, file_id=request.path_params["file_id"])
    return store, link


@metering.free_call("vector_stores.files")
async def store_file_get(request: ApiRequest) -> Response:
    store, link = await db_async(_link)(request)
    return json_response(store_file_json(link, store.public_id, link.file.public_id))


@metering.free_call("vector_stores.files")
async def store_file_delete(request: ApiRequest) -> Response:
    def remove() -> str:
        store, link = _link(request)
        services.store_file_delete(collection=store, link=link)
        return link.file.public_id

    file_id = await db_async(remove)()
    return json_response({"id": file_id, "object": "vector_store.file.deleted", "deleted": True})


def _filters(value: Any) -> dict[str, Any]:
    """OpenAI's ``filters`` (``eq`` comparisons, alone or under ``and``) as an equality map."""
    if value is None:
        return {}
    if isinstance(value, dict) and value.get("type") == "eq":
        key, v = value.get("key"), value.get("value")
        if isinstance(key, str) and isinstance(v, str | int | float | bool):
            return {key: v}
    if (
        isinstance(value, dict)
        and value.get("type") == "and"
        and isinstance(value.get("filters"), list)
    ):
        out: dict[str, Any] = {}
        for part in value["filters"]:
            out.update(_filters(part))
        return out
    raise InvalidRequest(
        "'filters' supports 'eq' comparisons, alone or combined with 'and'.",
        code="invalid_value",
        param="filters",
    )


async def store_search(request: ApiRequest) -> Response:
    data = request.json()
    metered.reject_unknown(
        data, {"query", "max_num_results", "filters", "ranking_options", "rewrite_query"}
    )
    raw = data.get("query")
    if raw is None:
        raise missing_param("query")
    queries = [raw] if isinstance(raw, str) else raw
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
        raise invalid_type("query", "a string or an array of strings")
    text = validation.text_field("\n".join(queries), "query")
    top_k = validation.top_k_field(data, "max_num_results", 10, MAX_SEARCH_RESULTS)
    where = _filters(data.get("filters"))
    store = await db_async(_store)(request)
    matches, infrai, headers = await search(
        request, store, vector=None, text=text, top_k=top_k, where=where, model=None,
        text_param="query",
    )  # fmt: skip
    rows = [
        {
            "file_id": m.metadata.get(FILE_ID),
            "filename": m.metadata.get(FILENAME),
            "score": round(m.score, 6),
            "attributes": {k: v for k, v in m.metadata.items() if not k.startswith("_")},
            "content": [{"type": "text", "text": m.text}],
        }
        for m in matches
    ]
    out = {
        "object": "vector_store.search_results.page",
        "search_query": queries,
        "data": rows,
        "has_more": False,
        "next_page": None,
        "infrai": infrai,
    }
    return json_response(out, headers=headers)


_UPLOAD = "INFRAI_MAX_UPLOAD_BYTES"
# The routes of the OpenAI-shaped surface, for the app's table (through vectors.api.ROUTES).
ROUTES = (
    route(
        "/v1/files", methods={"POST": files_create, "GET": files_list}, body_limit_setting=_UPLOAD
    ),
    route("/v1/files/{file_id}", methods={"GET": file_get, "DELETE": file_delete}),
    route("/v1/files/{file_id}/content", methods={"GET": file_content}),
    route("/v1/vector_stores", methods={"POST": stores_create, "GET": stores_list}),
    route(
        "/v1/vector_stores/{vector_store_id}",
        methods={"GET": store_get, "POST": store_update, "DELETE": store_delete},
    ),
    route(
        "/v1/vector_stores/{vector_store_id}/files",
        methods={"POST": store_files_create, "GET": store_files_list},
    ),
    route(
        "/v1/vector_stores/{vector_store_id}/files/{file_id}",
        methods={"GET": store_file_get, "DELETE": store_file_delete},
    ),
    route("/v1/vector_stores/{vector_store_id}/search", methods={"POST": store_search}),
)
