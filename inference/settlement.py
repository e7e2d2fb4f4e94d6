"""Money of a call, in one module: the hold, its renewal and checkpoints, the settlement with
its request-log row, and what a stopping server bills.

- A hold is opened before any vendor call, and the opening cannot be half-cancelled: a client
  that leaves while it is being opened gets it released (:func:`open_hold`).
- Every exit path after it ends in :func:`finish`, which writes the request-log row and
  settles the hold **in one statement** on the event loop, in a task shielded from the
  request's cancellation (a client leaving cannot stop it). Text PostgreSQL cannot store is
  cleaned first; if the row still cannot be written, the hold is settled anyway and a minimal
  row written — a failed log write never leaves a hold open or a call free. When PostgreSQL is
  out of reach the settlement goes to this process's journal (:mod:`billing.journal`).
- While a call holds money its server renews its hold (:func:`renew_due`, on the
  :class:`~inference.floor.Floor`'s renewer), so only holds of dead processes expire.
- :func:`drain` (server shutdown) refuses new calls, lets calls in flight finish for a grace
  period, then ends the rest and bills what each delivered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import asyncpg
from django.conf import settings
from django.db import models

from billing import journal
from billing.services import (
    ahold_carve,
    ahold_open,
    aholds_renew,
    aprocess_seen,
    arequest_low_balance,
    arequest_recharge,
    asettle,
)
from config.errors import ApiError, ServiceUnavailable
from inference.call import Call
from inference.floor import Floor
from inference.http import ApiRequest
from inference.models import RequestLog, RequestStatus, created_at_of
from inference.vendors import fetch as image_fetch
from inference.vendors import http as vendor_http
from infra import adb, live, observability, outages
from infra.background import keep, pending, spawn
from money.pricing import Usage

log = logging.getLogger(__name__)


# --- the hold ---------------------------------------------------------------------------------
@observability.traced("infrai.hold")
async def open_hold(call: Call, amount: int, *, within: str | None = None) -> None:
    """Hold ``amount`` nano-USD for ``call`` on its wallet (and budgets) — or, with
    ``within``, carve it out of the open hold of request ``within`` (a batch's reservation:
    :func:`billing.services.ahold_carve`; refused when that hold has less left).

    A limit that cannot cover it raises :class:`billing.errors.InsufficientFunds` as it is
    (nothing held). Refused with a 503 ``server_shutting_down`` while the server drains. The
    opening runs in its own task: if the request is cancelled meanwhile, the hold is released
    as soon as it is open (logged as a 499), so a cancellation leaves nothing behind. Once
    open, the call is carried by its floor (renewed, billed at shutdown) until settled.
    """
    call.floor.refuse_if_draining()
    key = call.key
    opening = asyncio.ensure_future(
        ahold_open(
            organization_id=key.organization_id,
            project_id=key.project_id,
            api_key_id=key.key_id,
            request_id=call.request_id,
            amount_nanos=amount,
            budget_nanos=key.monthly_budget_nanos,
            key_budget_nanos=key.key_budget_nanos,
            ttl_s=settings.INFRAI_HOLD_TTL_S,
        )
        if within is None
        else ahold_carve(
            parent_request_id=within,
            request_id=call.request_id,
            amount_nanos=amount,
            ttl_s=settings.INFRAI_HOLD_TTL_S,
        )
    )
    call.hold_nanos = amount
    try:
        await asyncio.shield(opening)
    except asyncio.CancelledError:
        spawn(_release_when_open(call, opening))
        raise
    except Exception as exc:
        if not adb.lost(exc):
            raise
        # The connection died with the opening's answer: the hold may be open. Settle it to
        # nothing (a settlement finds no hold if none was opened) and answer the 503.
        call.held = True
        unavailable = outages.unavailable(exc)
        assert unavailable is not None
        await fail(call, unavailable)
        raise unavailable from None
    call.held = True
    call.task = asyncio.current_task()
    call.floor.carry(call)
    _ensure_renewer(call.floor)
    # Open wallet pages show the money held by running calls (no round trip unwatched).
    _announce(key.organization_id, lambda: {"kind": "wallet_changed"})


async def _release_when_open(call: Call, opening: asyncio.Future[None]) -> None:
    """The request was cancelled while its hold was opening: release it once open."""
    try:
        await opening
    except Exception:
        return  # refused or failed: nothing is held
    call.held = True
    call.charge(Usage())
    await finish(call, status=RequestStatus.CANCELLED, http_status=499)


# --- settlement -------------------------------------------------------------------------------
async def finish(
    call: Call,
    *,
    status: RequestStatus,
    http_status: int,
    error_code: str = "",
    error_message: str = "",
) -> None:
    """Write the call's request-log row and settle its hold together (exactly once; safe to
    call again). Runs on every exit path.

    The work runs in its own task, started before this coroutine first yields: cancelling the
    caller (the client left, even twice) cannot stop it; the caller still waits for it so that
    a client that reads the answer's end sees its ledger entry.

    When PostgreSQL cannot take the settlement (:func:`_record_and_settle` journals it
    instead), a non-streamed answer that costs something is not given away: the call is
    recorded as refused, nothing charged, and this raises the retryable 503 to answer instead.
    A stream's answer is already out: its charge waits in the journal.
    """
    if call.finished:
        return
    call.finished = True
    call.request.logged = True
    code = error_code or (call.note if status is RequestStatus.OK else "")
    row = log_row(call, status=status, http_status=http_status, error_code=code)
    row.error_message = error_message[:500]
    refusal = instead = None
    if status is RequestStatus.OK and not call.stream and call.cost_nanos > 0:
        refusal = ServiceUnavailable(
            "infrai could not record the charge of this request, so its answer was not "
            "released; nothing was charged. Retry the request.",
            code=outages.OUTAGE_CODE,
            headers={"retry-after": "1"},
        )
        instead = log_row(
            call, status=RequestStatus.UNAVAILABLE, http_status=503, error_code=refusal.code
        )
        instead.cost_nanos = 0
        instead.error_message = refusal.message
    observability.call_finished(row, call.request)
    job = asyncio.ensure_future(
        _record_and_settle(row, call.held, call.cost_nanos, instead=instead)
    )
    keep(job)
    job.add_done_callback(lambda _job: call.floor.release(call))
    durable = await asyncio.shield(job)
    if not durable and refusal is not None:
        call.cost_nanos = 0
        raise refusal
    _push_live(row)


async def fail(call: Call, exc: ApiError) -> None:
    """:func:`finish` a call that ends in ``exc`` (nothing delivered, nothing charged)."""
    call.charge(Usage())
    await finish(
        call,
        status=RequestStatus.of_error(exc),
        http_status=exc.status,
        error_code=exc.code,
        error_message=exc.message,
    )


def log_row(call: Call, *, status: RequestStatus, http_status: int, error_code: str) -> RequestLog:
    """The request-log row of ``call`` as it stands."""
    served, key = call.answer, call.key
    return RequestLog(
        request_id=call.request_id,
        created_at=created_at_of(call.request_id),
        organization_id=key.organization_id,
        project_id=key.project_id,
        api_key_id=key.key_id,
        endpoint=call.ctx.endpoint,
        requested_model=call.ctx.requested_model[:120],
        model=served.model,
        vendor=served.vendor,
        region=served.region,
        status=status,
        http_status=http_status,
        error_code=error_code[:64],
        input_tokens=call.usage.input_tokens,
        cached_input_tokens=call.usage.cached_input_tokens,
        cache_write_tokens=call.usage.cache_write_5m_tokens + call.usage.cache_write_1h_tokens,
        output_tokens=call.usage.output_tokens,
        reasoning_tokens=call.usage.reasoning_tokens,
        usage_estimated=call.usage_estimated,
        usage_source=call.usage_source,
        cost_nanos=call.cost_nanos,
        latency_ms=(time.perf_counter_ns() - call.ctx.started_ns) // 1_000_000,
        ttft_ms=call.ttft_ms,
        stream=call.stream,
        cache_hit=call.cache_hit,
        failovers=call.failovers,
        routing=served.routing,
        ignored_params=list(served.ignored_params),
        prompt=call.prompt()[:20000] if key.log_prompts else "",
    )


def log_unheld_failure(request: ApiRequest, exc: ApiError) -> None:
    """The request-log row of an authenticated call that failed before it held money (a 400,
    404, 429, 402 …): written off the response path, nothing to settle (what
    :class:`inference.http.V1App` calls for a failure no call recorded)."""
    key = request.caller
    row = RequestLog(
        request_id=request.request_id,
        created_at=created_at_of(request.request_id),
        organization_id=key.organization_id,
        project_id=key.project_id,
        api_key_id=key.key_id,
        endpoint=request.path.removeprefix("/v1/").replace("/", ".")[:40],
        requested_model=request.requested_model[:120],
        status=RequestStatus.of_error(exc),
        http_status=exc.status,
        error_code=exc.code[:64],
        error_message=exc.message[:500],
        latency_ms=(time.perf_counter_ns() - request.started_ns) // 1_000_000,
    )
    observability.call_finished(row, request)
    spawn(_record_and_settle(row, False, 0))
    _push_live(row)


# --- a stopping server ------------------------------------------------------------------------
def _stop_streams(floor: Floor[Call]) -> list[tuple[RequestLog, bool, int]]:
    """Finish every stream still relayed on ``floor`` for what it delivered so far: the log
    row, whether it holds money, and its cost, to record and settle."""
    stopped = []
    for call in floor.unfinished():
        if call.usage_so_far is None:
            continue
        call.finished = True
        floor.release(call)
        call.charge(call.usage_so_far(), estimated=True)
        row = log_row(
            call, status=RequestStatus.CANCELLED, http_status=499, error_code="server_shutdown"
        )
        stopped.append((row, call.held, call.cost_nanos))
    return stopped


async def _record_stopped(stopped: list[tuple[RequestLog, bool, int]]) -> int:
    """Settle each stopped stream (journaled where the database cannot take it); returns how
    many are in PostgreSQL."""
    settled = 0
    for row, held, cost in stopped:
        settled += await _record_and_settle(row, held, cost)
    return settled


def settle_now(floor: Floor[Call]) -> int:
    """Bill every stream ``floor`` still carries for what it delivered so far.

    The last resort at process exit (registered with :mod:`atexit` by whoever made the floor)
    for calls that :func:`drain` did not end — a server without the drain (daphne drops open
    streams on SIGTERM without running their ``finally`` blocks). Synchronous: it runs the
    statements on an event loop of its own (call it where no loop is running); returns how
    many calls it settled.
    """
    stopped = _stop_streams(floor)
    if not stopped:
        return 0

    async def run() -> int:
        try:
            return await _record_stopped(stopped)
        finally:
            await adb.close()

    return asyncio.run(run())


async def drain(floor: Floor[Call], *, grace_s: float) -> int:
    """Stop ``floor``'s calls for shutdown; returns how many had to be ended.

    New holds are refused at once (503 ``server_shutting_down``, which the SDKs retry). Calls
    in flight get ``grace_s`` seconds to finish; the rest are cancelled with
    ``shutting_down`` set — a stream then ends with an error event and ``[DONE]`` and is billed
    for what it delivered, a non-streamed call answers 503 and is charged nothing — and their
    settlement is awaited (bounded). A stream still open after that is billed for what it
    delivered, as :func:`settle_now` bills it.
    """
    loop = asyncio.get_running_loop()
    floor.draining = True
    running = {c.task for c in floor.calls if c.task is not None and not c.task.done()}
    if running:
        await asyncio.wait(running, timeout=grace_s)
    ended = floor.unfinished()
    for call in ended:
        call.shutting_down = True
        if call.task is not None:
            call.task.cancel()
    waiting = {c.task for c in ended if c.task is not None} | pending(loop)
    if waiting:
        await asyncio.wait(waiting, timeout=10.0)
    if pending(loop):
        await asyncio.wait(pending(loop), timeout=5.0)
    if floor.calls:
        await _record_stopped(_stop_streams(floor))
    return len(ended)


async def close_clients() -> None:
    """Close this loop's vendor HTTP sessions and database pool (after :func:`drain`)."""
    await vendor_http.close()
    await image_fetch.close()
    await adb.close()


# --- renewal and checkpoints ------------------------------------------------------------------
def _ensure_renewer(floor: Floor[Call]) -> None:
    """Start ``floor``'s hold renewer once."""
    if floor.renewer is None or floor.renewer.done():
        floor.renewer = asyncio.get_running_loop().create_task(_renew_holds(floor))


def tick_s() -> float:
    """How often the renewer runs: often enough to renew within a third of the hold TTL and
    to checkpoint streams every ``INFRAI_CHECKPOINT_S``; at least every 5 s (the process's
    liveness), at most every 0.5 s."""
    ttl = float(settings.INFRAI_HOLD_TTL_S)
    return min(max(min(ttl / 3, float(settings.INFRAI_CHECKPOINT_S)), 0.5), 5.0)


async def _renew_holds(floor: Floor[Call]) -> None:
    """On every tick (:func:`tick_s`), each step on its own: say this process is alive
    (:func:`billing.services.aprocess_seen`, what the audit tells a dead process's expired
    holds by), renew and checkpoint holds (:func:`renew_due`), replay the journal."""
    steps: tuple[tuple[str, Callable[[], Any]], ...] = (
        ("heartbeat", aprocess_seen),
        ("renew holds", lambda: renew_due(floor)),
        ("replay", replay_journal),
    )
    while True:
        await asyncio.sleep(tick_s())  # first: a call's own round trips stay its own
        for name, step in steps:
            try:
                await step()
            except Exception as exc:
                if not outages.noted(exc):
                    log.warning("could not %s", name, exc_info=True)


async def renew_due(floor: Floor[Call], *, now: float | None = None) -> int:
    """Renew the holds of ``floor``'s unfinished calls that were last renewed a third of the
    hold TTL ago, so the sweeper only ever expires holds of dead processes, and checkpoint
    every stream last checkpointed ``INFRAI_CHECKPOINT_S`` ago: its hold records what it has
    delivered (:meth:`Call.delivered_nanos`), which an expiry charges. So a process killed
    mid-stream loses at most the last ``INFRAI_CHECKPOINT_S`` + one tick of each stream. One
    statement for all. Returns how many holds were renewed."""
    ttl = int(settings.INFRAI_HOLD_TTL_S)
    checkpoint = float(settings.INFRAI_CHECKPOINT_S)
    at = time.monotonic() if now is None else now
    due = [
        call
        for call in floor.unfinished()
        if call.held
        and (
            at - call.renewed_at >= ttl / 3
            or (call.usage_so_far is not None and at - call.checkpointed_at >= checkpoint)
        )
    ]
    if not due:
        return 0
    renewed = await aholds_renew(
        request_ids=[c.request_id for c in due],
        ttl_s=ttl,
        delivered=[c.delivered_nanos() for c in due],
    )
    for call in due:
        call.renewed_at = call.checkpointed_at = at
    return int(renewed)


# --- writing the row and the settlement -------------------------------------------------------
def _clean_text(value: Any) -> Any:
    """``value`` with every string made storable by PostgreSQL (no NUL, no lone surrogates),
    recursively through lists and dicts."""
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "replace").decode("utf-8")
        return value
    if isinstance(value, list):
        return [_clean_text(v) for v in value]
    if isinstance(value, dict):
        return {_clean_text(k): _clean_text(v) for k, v in value.items()}
    return value


_TEXT_FIELDS = (
    "requested_model",
    "model",
    "vendor",
    "region",
    "error_code",
    "error_message",
    "prompt",
)


def _clean_row(row: RequestLog) -> None:
    for name in _TEXT_FIELDS:
        setattr(row, name, _clean_text(getattr(row, name)))
    row.routing = _clean_text(row.routing)
    row.ignored_params = _clean_text(row.ignored_params)


def _settle_description(row: RequestLog) -> str:
    return f"{row.endpoint} {row.model}".strip()


_LOG_FIELDS = tuple(f for f in RequestLog._meta.concrete_fields if not f.primary_key)
# The row of a call. A row already there is kept — the same row committed by an attempt whose
# answer was lost — unless it is the ``abandoned`` row the sweeper wrote for a call whose
# settlement was still in this process's journal: the real row replaces it. The key includes
# the partition key; every writer derives ``created_at`` from the request id
# (:func:`inference.models.created_at_of`), so both rows of a call have the same. The rollup
# trigger queues the row (or, replacing the abandoned row, the difference) for the daily usage
# rollups in this statement (inference.rollups).
_LOG_INSERT = """INSERT INTO {table} ({columns}) VALUES ({values})
ON CONFLICT (request_id, created_at) DO UPDATE SET ({columns}) = ROW({excluded})
WHERE {table}.status = '{abandoned}'""".format(
    table=RequestLog._meta.db_table,
    columns=", ".join(str(f.column) for f in _LOG_FIELDS),
    values=", ".join(f"%(log_{f.attname})s" for f in _LOG_FIELDS),
    excluded=", ".join(f"EXCLUDED.{f.column}" for f in _LOG_FIELDS),
    abandoned=RequestStatus.ABANDONED.value,
)
_LOG_INSERT_ASYNC = adb.Statement.compile(_LOG_INSERT)
_LOG_ATTNAMES = tuple(
    (f"log_{f.attname}", f.attname, isinstance(f, models.JSONField)) for f in _LOG_FIELDS
)


def _log_values(row: RequestLog) -> dict[str, Any]:
    """``row``'s column values for :data:`_LOG_INSERT` (JSON columns as JSON text)."""
    return {
        param: adb.json_text(getattr(row, attname)) if is_json else getattr(row, attname)
        for param, attname, is_json in _LOG_ATTNAMES
    }


async def _settle(
    conn: asyncpg.Connection,
    row: RequestLog,
    cost: int,
    before: tuple[str, dict[str, Any]] | None = None,
) -> None:
    """Settle ``row``'s hold on ``conn`` (``before``: written by the same statement) and ask for
    an auto-recharge or a low-balance e-mail the settlement made due."""
    settled = await asettle(
        conn,
        request_id=row.request_id,
        actual_nanos=cost,
        description=_settle_description(row),
        before=before,
    )
    if settled is not None and settled.recharge_wallet_id is not None:
        spawn(arequest_recharge(settled.recharge_wallet_id))
    if settled is not None and settled.low_balance_wallet_id is not None:
        spawn(arequest_low_balance(settled.low_balance_wallet_id))


async def _write(conn: asyncpg.Connection, row: RequestLog, held: bool, cost: int) -> None:
    """The request-log row and the settlement in ONE statement on ``conn``
    (:func:`billing.services.asettle` runs the row's INSERT inside its own statement), so both
    commit together; without a hold, the row alone. A hold the sweeper already expired (a
    process stalled past the hold TTL) is settled late by the same statement. Repeating it
    changes nothing (a hold is claimed once; :data:`_LOG_INSERT` keeps a row already there).

    If the row cannot be written even after cleaning, that statement wrote nothing: the hold is
    then settled alone (money first) and a minimal row — no routing, no prompt,
    ``log_write_failed`` — is written; if even that is refused, the settlement stands and the
    audit reports its entry without a log. Raises only a lost connection (the caller retries
    elsewhere) or a settlement the database refused.
    """
    _clean_row(row)
    try:
        if held:
            await _settle(conn, row, cost, before=(_LOG_INSERT, _log_values(row)))
        else:
            await adb.execute(conn, _LOG_INSERT_ASYNC, _log_values(row))
        return
    except Exception as exc:
        if adb.lost(exc):
            raise
        log.exception("could not write the request log of %s; settling alone", row.request_id)
    row.routing, row.ignored_params, row.prompt = {}, [], ""
    row.error_code = "log_write_failed"
    row.requested_model = row.requested_model.encode("ascii", "ignore").decode()
    if held:
        await _settle(conn, row, cost)
    try:
        await adb.execute(conn, _LOG_INSERT_ASYNC, _log_values(row))
    except Exception as exc:
        if adb.lost(exc):
            raise
        log.exception("could not write even the minimal request log of %s", row.request_id)


async def _record_and_settle_on_loop(row: RequestLog, held: bool, cost: int) -> None:
    """:func:`_write` on a connection known to be alive: a lost connection is retried on a
    fresh one of its own (never the next pooled one, which a reset has usually ended too), with
    backoff, for ``INFRAI_SETTLE_RETRY_S``; then the last error is raised."""
    deadline = time.monotonic() + float(settings.INFRAI_SETTLE_RETRY_S)
    delay, fresh = 0.05, False
    while True:
        try:
            async with adb.fresh_connection() if fresh else adb.connection() as conn:
                await _write(conn, row, held, cost)
            return
        except Exception as exc:
            if not adb.lost(exc) or time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay, fresh = min(delay * 2, 0.5), True


def _intent(row: RequestLog, held: bool, cost: int) -> journal.Intent:
    return journal.Intent(
        row={attname: getattr(row, attname) for _param, attname, _json in _LOG_ATTNAMES},
        held=held,
        cost=cost,
    )


async def _replay(intent: journal.Intent) -> None:
    """Make one journaled settlement (one attempt; the journal tries again on its next tick)."""
    row = RequestLog(**intent.row)
    async with adb.connection() as conn:
        await _write(conn, row, intent.held, intent.cost)


@observability.traced("infrai.settle")
async def _record_and_settle(
    row: RequestLog,
    held: bool,
    cost: int,
    *,
    instead: RequestLog | None = None,
) -> bool:
    """Record and settle the call (:func:`_record_and_settle_on_loop`); True once that is in
    PostgreSQL. When the database cannot take it, the settlement goes to this process's journal
    (:mod:`billing.journal`, replayed until PostgreSQL accepts it) and this returns False —
    ``instead`` (the row of a call whose answer is then refused: cost 0) journaled in its place
    when given."""
    try:
        await _record_and_settle_on_loop(row, held, cost)
        return True
    except Exception as exc:
        if not adb.lost(exc):
            # Not an outage: a settlement the database refuses would be refused on every
            # replay too. The hold expires; the audit reports it (expired_alive).
            log.exception("could not settle %s", row.request_id)
            return False
        outages.noted(exc)
    if instead is not None:
        row, cost = instead, 0
    try:
        await journal.append(_intent(row, held, cost))
    except OSError:
        # Neither the database nor the disk: the hold expires, the sweeper logs the call and
        # the audit reports its hold as expired while this process was alive.
        log.exception("could not journal the settlement of %s", row.request_id)
    return False


async def replay_journal(*, orphans: bool = False) -> int:
    """Make the settlements waiting in this process's journal (and, with ``orphans``, those of
    this host's processes that are gone); returns how many are still waiting."""
    return await journal.replay(_replay, orphans=orphans)


def _announce(organization_id: int, payload: Callable[[], dict[str, Any]]) -> None:
    """Push ``payload()`` to the organization's open dashboard pages after the response (best
    effort: :func:`infra.live.asend` logs and swallows its own failures) — no task at all
    while this process knows none is open."""
    if not live.known_unwatched(organization_id):
        spawn(live.asend(organization_id, payload()))


def _push_live(row: RequestLog) -> None:
    """Announce the recorded call to the organization's open pages."""
    _announce(
        row.organization_id,
        lambda: live.usage_event(
            request_id=row.request_id,
            model=row.model,
            vendor=row.vendor,
            status=row.status,
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            cost_nanos=row.cost_nanos,
            latency_ms=row.latency_ms,
            project_id=row.project_id,
            api_key_id=row.api_key_id,
        ),
    )
