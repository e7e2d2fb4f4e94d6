"""A batch's lines, run by a worker through the normal call path.

Each line is one metered call of the batch's key, like the same body posted to the endpoint
(:mod:`batches.lines`): routed, its hold carved out of the batch's reservation
(:func:`inference.settlement.open_hold` ``within`` the batch's hold — the money is already
reserved, so a line never meets an empty wallet), the vendors called with failover, billed at
the offering's batch price and settled once with its request-log row
(:func:`inference.stages.settle_leg`), each under its own request id. What the line's answer
was — or the OpenAI error it ended in — is recorded on its row; the batch ends when no line
is left, it is cancelled or its window passes (:func:`batches.services.batch_finalize`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from accounts.auth import KeyContext, key_context
from batches import lines as kinds
from batches import services
from batches.models import Batch, BatchLine, LineStatus
from catalog.selectors import batch_discount_percents
from config.errors import ApiError, AuthenticationFailed, internal_error
from inference import settlement, stages
from inference.call import Call
from inference.errors import api_error
from inference.floor import Floor
from inference.http import ApiRequest
from infra.background import pending
from infra.db import db_async
from money.pricing import Usage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A line's end: the HTTP status and body its call answered (an error's OpenAI body for
    any status but 200), and what it was charged."""

    http_status: int
    body: dict[str, Any]
    cost_nanos: int
    usage: Usage = field(default_factory=Usage)

    @property
    def status(self) -> LineStatus:
        return LineStatus.COMPLETED if self.http_status == 200 else LineStatus.FAILED


def _failed(exc: ApiError, call: Call | None = None) -> Outcome:
    if call is None:
        return Outcome(http_status=exc.status, body=exc.body(), cost_nanos=0)
    return Outcome(exc.status, exc.body(), call.cost_nanos, call.usage)


async def run_line(
    key: KeyContext, floor: Floor[Call], *, batch: Batch, line: BatchLine
) -> Outcome:
    """One line as one call (see the module docstring); never raises for the line's own
    failure — that is its outcome, settled and logged like any call's."""
    kind = kinds.KINDS[batch.endpoint]
    request = ApiRequest(
        method="POST",
        path=kind.url,
        headers={},
        body=b"",
        query={},
        request_id=line.request_id,
        started_ns=time.perf_counter_ns(),
        key=key,
        key_confirmed=True,
        floor=floor,
    )
    try:
        parsed = kind.parse(line.body)
    except ApiError as exc:  # validated at submission; a validator that changed since
        settlement.log_unheld_failure(request, exc)
        return _failed(exc)
    call = Call.open(request, endpoint=kind.endpoint, requested_model=kind.model(parsed))
    call.prompt = lambda: kind.prompt(parsed)
    try:
        decision = await stages.route(call, kind.routing(parsed))
        ids = [c.offering_id for c in decision.candidates]
        discounts = await db_async(batch_discount_percents)(offering_ids=ids)
        call.decision = dataclasses.replace(
            decision,
            candidates=tuple(kinds.at_batch_price(c, discounts) for c in decision.candidates),
        )
        await settlement.open_hold(call, line.reserved_nanos, within=batch.public_id)
    except Exception as exc:
        refused = exc if isinstance(exc, ApiError) else api_error(exc)
        if refused is None:
            log.exception("batch %s line %s failed before its hold", batch.public_id, line.number)
            refused = internal_error()
        settlement.log_unheld_failure(request, refused)
        return _failed(refused)
    try:
        answer = await stages.settle_leg(call, kind.leg, parsed)
    except ApiError as exc:  # settled (nothing charged) and logged by the call path
        return _failed(exc, call)
    except Exception:
        log.exception("batch %s line %s failed", batch.public_id, line.number)
        return _failed(internal_error(), call)
    return Outcome(
        http_status=200,
        body=kind.render(call, parsed, answer),
        cost_nanos=call.cost_nanos,
        usage=call.usage,
    )


async def run(public_id: str, *, limit: int | None = None) -> int:
    """Claim the batch and run its lines, ``INFRAI_BATCH_CONCURRENCY`` at a time (at most
    ``limit`` of them), ending it when it should end (:func:`batches.services.batch_finalize`);
    returns how many lines ran. A batch another worker holds, or one that is final, runs
    nothing here."""
    batch = await db_async(services.batch_claim)(public_id=public_id)
    if batch is None:
        return 0
    floor = Floor[Call]()
    key = await db_async(key_context)(key_id=batch.api_key_id)
    started = ran = 0

    async def lane() -> None:
        nonlocal started, ran
        while limit is None or started < limit:
            started += 1
            line = await db_async(services.line_next)(batch_id=batch.pk)
            if line is None:
                return
            if key is None or key.revoked:
                revoked = AuthenticationFailed(
                    "The batch's API key has been revoked.", code="revoked_api_key"
                )
                outcome = _failed(revoked)
            else:
                outcome = await run_line(key, floor, batch=batch, line=line)
            await db_async(services.line_record)(
                line_id=line.pk,
                status=outcome.status,
                http_status=outcome.http_status,
                body=outcome.body,
                error=None,
                cost_nanos=outcome.cost_nanos,
                usage=outcome.usage,
            )
            ran += 1

    try:
        lanes = max(int(settings.INFRAI_BATCH_CONCURRENCY), 1)
        await asyncio.gather(*(lane() for _ in range(lanes)))
        await db_async(services.batch_finalize)(batch_id=batch.pk)
    finally:
        await db_async(services.lease_release)(batch_id=batch.pk)
        if floor.renewer is not None:
            floor.renewer.cancel()
    return ran


def run_sync(public_id: str, *, limit: int | None = None) -> int:
    """:func:`run` on an event loop of its own (a Celery task, a test): waits for the work
    its calls started after their answers, then closes the loop's clients."""

    async def go() -> int:
        try:
            return await run(public_id, limit=limit)
        finally:
            loop = asyncio.get_running_loop()
            if pending(loop):
                await asyncio.wait(pending(loop), timeout=10.0)
            await settlement.close_clients()

    return asyncio.run(go())
