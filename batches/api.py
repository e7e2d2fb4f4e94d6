"""OpenAI's Batch API: ``POST /v1/batches``, ``GET /v1/batches``, ``GET /v1/batches/{id}``,
``POST /v1/batches/{id}/cancel``, with OpenAI's batch object.

Input and output files are ``/v1/files`` (purpose ``batch`` in; ``batch_output`` out, read
with ``GET /v1/files/{id}/content``). Submission validates every line and reserves the whole
batch's worst case before anything is stored (:mod:`batches.submission`); the lines run in a
Celery worker (:mod:`batches.runner`). Each handler is a call of the key like any other
(counted against its limits, logged), charging nothing itself.
"""

from __future__ import annotations

from typing import Any

from batches import lines as kinds
from batches import selectors, services, submission
from batches.models import Batch
from config.errors import InvalidRequest, invalid_type, missing_param
from inference.endpoints import metered
from inference.http import ApiRequest, Response, json_response, route
from infra.db import db_async
from money.usd import nanos_to_usd_str
from vectors import files
from vectors.metering import free_call

MAX_PAGE = 100
_FIELDS = {"input_file_id", "endpoint", "completion_window", "metadata", "output_expires_after"}


def _ts(value: Any) -> int | None:
    return int(value.timestamp()) if value is not None else None


def batch_json(batch: Batch) -> dict[str, Any]:
    """OpenAI's batch object (``usage``: what the lines recorded so far consumed, in OpenAI's
    semantics), plus ``infrai``: what the batch reserved and what its lines have cost so far
    (exact USD strings)."""
    return {
        "id": batch.public_id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": batch.errors,
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": batch.status,
        "output_file_id": batch.output_file_id or None,
        "error_file_id": batch.error_file_id or None,
        "created_at": _ts(batch.created_at),
        "in_progress_at": _ts(batch.in_progress_at),
        "expires_at": _ts(batch.expires_at),
        "finalizing_at": _ts(batch.finalizing_at),
        "completed_at": _ts(batch.completed_at),
        "failed_at": _ts(batch.failed_at),
        "expired_at": _ts(batch.expired_at),
        "cancelling_at": _ts(batch.cancelling_at),
        "cancelled_at": _ts(batch.cancelled_at),
        "request_counts": {
            "total": batch.total,
            "completed": batch.completed,
            "failed": batch.failed,
        },
        "metadata": batch.metadata,
        "usage": {
            "input_tokens": batch.input_tokens,
            "input_tokens_details": {"cached_tokens": batch.cached_input_tokens},
            "output_tokens": batch.output_tokens,
            "output_tokens_details": {"reasoning_tokens": batch.reasoning_tokens},
            "total_tokens": batch.input_tokens + batch.output_tokens,
        },
        "infrai": {
            "reserved_usd": nanos_to_usd_str(batch.reserved_nanos),
            "cost_usd": nanos_to_usd_str(batch.spent_nanos),
        },
    }


def metadata(value: Any) -> dict[str, str] | None:
    """OpenAI's ``metadata``: at most 16 string pairs, keys of at most 64 characters and
    values of at most 512; else a 400 naming it."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid_type("metadata", "an object of string values")
    if len(value) > 16:
        raise InvalidRequest("'metadata' may hold at most 16 pairs.", param="metadata")
    for k, v in value.items():
        if not isinstance(v, str) or len(k) > 64 or len(v) > 512:
            raise InvalidRequest(
                "'metadata' keys must be strings of at most 64 characters and its values "
                "strings of at most 512.",
                param=f"metadata.{k[:64]}",
            )
    return value


def _create_params(data: dict[str, Any]) -> tuple[str, str, dict[str, str] | None]:
    """``(input_file_id, endpoint, metadata)`` of a create body; 400 naming the field."""
    metered.reject_unknown(data, _FIELDS)
    for name in ("input_file_id", "endpoint", "completion_window"):
        if data.get(name) is None:
            raise missing_param(name)
    file_id = data["input_file_id"]
    if not isinstance(file_id, str):
        raise invalid_type("input_file_id", "a string")
    endpoint = data["endpoint"]
    if endpoint not in kinds.KINDS:
        raise InvalidRequest(
            f"'endpoint' must be one of {', '.join(repr(k) for k in kinds.KINDS)}; "
            f"infrai does not run batches of {endpoint!r}.",
            code="invalid_value",
            param="endpoint",
        )
    if data["completion_window"] != "24h":
        raise InvalidRequest("'completion_window' must be '24h'.", param="completion_window")
    return file_id, endpoint, metadata(data.get("metadata"))


async def _input_lines(request: ApiRequest, file_id: str) -> bytes:
    """The bytes of the project's file ``file_id`` (404; 400 unless its purpose is
    ``batch``)."""
    project_id = request.caller.project_id
    found = await db_async(files.file_find)(
        project_id=project_id, file_id=file_id, param="input_file_id"
    )
    if found.purpose != "batch":
        raise InvalidRequest(
            f"File {file_id} has purpose '{found.purpose}'; a batch's input file must be "
            "uploaded with purpose 'batch'.",
            param="input_file_id",
        )
    return await db_async(files.file_content)(stored=found)


@free_call("batches")
async def batches_create(request: ApiRequest) -> Response:
    """Validate the batch and every line, reserve its worst case, store it, queue its worker.
    A bad line is a 400 naming it, a wallet that cannot cover the reservation a 402 saying how
    many lines it would cover; either way nothing is stored and nothing held."""
    file_id, endpoint, meta = _create_params(request.json())
    parsed = submission.parse_lines(await _input_lines(request, file_id), endpoint=endpoint)
    lines = await submission.price_lines(parsed, endpoint=endpoint)
    key = request.caller
    batch_id = services.new_batch_id()
    await submission.reserve(key, batch_id=batch_id, lines=lines)
    try:
        batch = await db_async(services.batch_create)(
            public_id=batch_id,
            organization_id=key.organization_id,
            project_id=key.project_id,
            api_key_id=key.key_id,
            endpoint=endpoint,
            input_file_id=file_id,
            metadata=meta,
            lines=lines,
        )
    except BaseException:
        await db_async(services.release_reservation)(public_id=batch_id)
        raise
    return json_response(batch_json(batch))


def _limit(request: ApiRequest) -> int:
    values = request.query.get("limit")
    raw = values[-1] if values else None
    try:
        limit = 20 if raw is None else int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"'limit' must be an integer from 1 to {MAX_PAGE}.", param="limit")
    return limit


@free_call("batches")
async def batches_list(request: ApiRequest) -> Response:
    """OpenAI's cursor page of the project's batches, newest first (``after``, ``limit``
    1-100, default 20)."""
    after = request.query.get("after")
    page = await db_async(selectors.batches_page)(
        project_id=request.caller.project_id,
        limit=_limit(request),
        after=after[-1] if after else None,
    )
    data = [batch_json(b) for b in page.batches]
    return json_response(
        {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": page.has_more,
        }
    )


@free_call("batches")
async def batch_get(request: ApiRequest) -> Response:
    found = await db_async(selectors.batch_find)(
        project_id=request.caller.project_id, batch_id=request.path_params["batch_id"]
    )
    return json_response(batch_json(found))


@free_call("batches")
async def batch_cancel(request: ApiRequest) -> Response:
    """``cancelling``, then ``cancelled`` once no line runs: lines not run are not charged and
    their part of the reservation is released (at once when no worker runs the batch)."""
    found = await db_async(selectors.batch_find)(
        project_id=request.caller.project_id, batch_id=request.path_params["batch_id"]
    )
    return json_response(batch_json(await db_async(services.batch_cancel)(batch=found)))


# The routes of this module, for the app's table (config.asgi).
ROUTES = (
    route("/v1/batches", methods={"POST": batches_create, "GET": batches_list}),
    route("/v1/batches/{batch_id}", methods={"GET": batch_get}),
    route("/v1/batches/{batch_id}/cancel", methods={"POST": batch_cancel}),
)
