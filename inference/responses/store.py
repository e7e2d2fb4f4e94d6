"""Stored responses (:class:`inference.models.StoredResponse`) on the hot path's asyncpg pool
(:mod:`infra.adb`): one statement per function, every read and write scoped to the caller's
project, so another project's id is as unknown as a made-up one.

A response is visible only while younger than its organization's retention
(:func:`retention_days`: ``Organization.response_retention_days``, else
``INFRAI_RESPONSES_RETENTION_DAYS``; the beat task :func:`inference.tasks.expire_stored_responses`
deletes it after). An organization with zero retention keeps none: :func:`keeps_responses` says
so and the endpoint stores nothing for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from accounts.auth import KeyContext
from inference.models import ResponseStatus, StoredResponse
from infra import adb, fastcache

TABLE = StoredResponse._meta.db_table
# The statuses a background response can still be cancelled in.
RUNNING = (ResponseStatus.QUEUED.value, ResponseStatus.IN_PROGRESS.value)


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored response as its readers need it."""

    response_id: str
    status: str
    background: bool
    cancel_requested: bool
    context: list[dict[str, Any]]
    input_items: list[dict[str, Any]]
    body: dict[str, Any]

    def conversation(self) -> list[dict[str, Any]]:
        """The items a call continuing this one (``previous_response_id``) starts from: the
        conversation before it, its input, its output."""
        return [*self.context, *self.input_items, *(self.body.get("output") or [])]


def retention_days(key: KeyContext) -> int:
    """How many days ``key``'s organization keeps stored responses (0: none)."""
    if key.response_retention_days is not None:
        return int(key.response_retention_days)
    return int(settings.INFRAI_RESPONSES_RETENTION_DAYS)


def keeps_responses(key: KeyContext) -> bool:
    """Whether ``key``'s organization keeps responses (not zero retention)."""
    return retention_days(key) > 0


def _json(value: Any) -> Any:
    """A JSON column as asyncpg returns it (text: no per-connection codec) parsed."""
    return orjson.loads(value) if isinstance(value, str | bytes) else value


_INSERT = adb.Statement.compile(
    f"""INSERT INTO {TABLE} (response_id, request_id, organization_id, project_id, api_key_id,
    created_at, status, background, cancel_requested, model, context, input_items, body)
    VALUES (%(response_id)s, %(request_id)s, %(organization_id)s, %(project_id)s,
    %(api_key_id)s, now(), %(status)s, %(background)s, false, %(model)s, %(context)s::jsonb,
    %(input_items)s::jsonb, %(body)s::jsonb)
    ON CONFLICT (response_id) DO NOTHING"""
)


async def create(
    *,
    key: KeyContext,
    request_id: str,
    body: dict[str, Any],
    context: list[dict[str, Any]],
    input_items: list[dict[str, Any]],
    background: bool = False,
) -> None:
    """Store ``body`` (a ``response`` object: its ``id``, ``status`` and ``model`` are read
    from it) for ``key``'s project; committed when this returns. Writing the same id again
    changes nothing."""
    async with adb.connection() as conn:
        await adb.execute(
            conn,
            _INSERT,
            {
                "response_id": body["id"],
                "request_id": request_id,
                "organization_id": key.organization_id,
                "project_id": key.project_id,
                "api_key_id": key.key_id,
                "status": body["status"],
                "background": background,
                "model": str(body.get("model") or "")[:120],
                "context": adb.json_text(context),
                "input_items": adb.json_text(input_items),
                "body": adb.json_text(body),
            },
        )


_UPDATE = adb.Statement.compile(
    f"""UPDATE {TABLE} SET status = %(status)s, model = %(model)s, body = %(body)s::jsonb
    WHERE response_id = %(response_id)s"""
)


async def update(body: dict[str, Any]) -> None:
    """Replace the stored ``body`` (and its status) of the response ``body["id"]``: a
    background response's progress. A response deleted meanwhile stays deleted."""
    async with adb.connection() as conn:
        await adb.execute(
            conn,
            _UPDATE,
            {
                "response_id": body["id"],
                "status": body["status"],
                "model": str(body.get("model") or "")[:120],
                "body": adb.json_text(body),
            },
        )


_FIND = adb.Statement.compile(
    f"""SELECT response_id, status, background, cancel_requested, context, input_items, body
    FROM {TABLE} WHERE response_id = %(response_id)s AND project_id = %(project_id)s
    AND created_at > now() - make_interval(days => %(days)s::int)"""
)


async def find(*, key: KeyContext, response_id: str) -> Stored | None:
    """The response ``response_id`` of ``key``'s project, or None (unknown, another project's,
    deleted or past retention)."""
    async with adb.connection() as conn:
        row = await adb.fetchrow(
            conn,
            _FIND,
            {"response_id": response_id, "project_id": key.project_id, "days": retention_days(key)},
        )
    if row is None:
        return None
    return Stored(
        response_id=row["response_id"],
        status=row["status"],
        background=row["background"],
        cancel_requested=row["cancel_requested"],
        context=_json(row["context"]),
        input_items=_json(row["input_items"]),
        body=_json(row["body"]),
    )


_DELETE = adb.Statement.compile(
    f"""DELETE FROM {TABLE} WHERE response_id = %(response_id)s AND project_id = %(project_id)s
    RETURNING status"""
)


async def delete(*, key: KeyContext, response_id: str) -> str | None:
    """Delete the response ``response_id`` of ``key``'s project; its status, or None when it
    was not there."""
    async with adb.connection() as conn:
        row = await adb.fetchrow(
            conn, _DELETE, {"response_id": response_id, "project_id": key.project_id}
        )
    return None if row is None else str(row["status"])


_REQUEST_CANCEL = adb.Statement.compile(
    f"""UPDATE {TABLE} SET cancel_requested = true
    WHERE response_id = %(response_id)s AND project_id = %(project_id)s AND background
    AND status = ANY(%(running)s::text[]) RETURNING response_id"""
)


async def request_cancel(*, key: KeyContext, response_id: str) -> bool:
    """Ask for the running background response ``response_id`` of ``key``'s project to be
    cancelled (whichever process generates it sees the flag: :func:`cancel_requested`); False
    when there is no such running background response."""
    async with adb.connection() as conn:
        row = await adb.fetchrow(
            conn,
            _REQUEST_CANCEL,
            {"response_id": response_id, "project_id": key.project_id, "running": list(RUNNING)},
        )
    return row is not None


_CANCEL_REQUESTED = adb.Statement.compile(
    f"SELECT cancel_requested FROM {TABLE} WHERE response_id = %(response_id)s"
)


async def cancel_requested(response_id: str) -> bool:
    """Whether the background response ``response_id`` should stop: cancelled, or deleted."""
    async with adb.connection() as conn:
        row = await adb.fetchrow(conn, _CANCEL_REQUESTED, {"response_id": response_id})
    return row is None or bool(row["cancel_requested"])


# --- a background response's events -----------------------------------------------------------
# Kept in Redis, so that any web process can replay them (GET …?stream=true): a list per
# response whose index is the event's sequence number, kept INFRAI_MAX_STREAM_S plus an hour.
_FINAL_EVENTS = (
    b"event: response.completed\n",
    b"event: response.incomplete\n",
    b"event: response.failed\n",
)


def _events_key(response_id: str) -> str:
    return f"response-events:{response_id}"


async def events_append(response_id: str, events: list[bytes]) -> None:
    """Append the Server-Sent Events ``events`` (in sequence order) to ``response_id``'s."""
    ttl = float(settings.INFRAI_MAX_STREAM_S) + 3600.0
    await fastcache.append(_events_key(response_id), [e.decode() for e in events], ttl)


async def events_after(response_id: str, sequence_number: int) -> list[bytes]:
    """The events of ``response_id`` after ``sequence_number`` (-1: all), as appended."""
    values = await fastcache.tail(_events_key(response_id), max(sequence_number + 1, 0))
    return [v.encode() for v in values]


def is_final_event(event: bytes) -> bool:
    """Whether ``event`` ends a response's stream (``response.completed`` …)."""
    return event.startswith(_FINAL_EVENTS)


def response_id_of(request_id: str) -> str:
    """The id of the response a call makes (``resp_…``: its request id's random part)."""
    return "resp_" + request_id.removeprefix("req_")


def request_id_of(response_id: str) -> str:
    """The request id of the call that made ``response_id`` (:func:`response_id_of`)."""
    return "req_" + response_id.removeprefix("resp_")
