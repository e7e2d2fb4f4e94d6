"""Money of the vector store: per-call fees through the request pipeline, and storage.

**Calls.** A search costs the catalog's ``per_query_nanos``; a write costs nothing itself but
must be covered by one GB-day of the bytes it writes (a wallet that cannot pay for storing them
gets a 402 and nothing is written). Both go through :class:`inference.call.Call` like any
metered call: counted against the key's limits, a hold before the work, the request-log row and
the settlement written together exactly once on every exit path. The platform is the "vendor"
(``infrai/vector-store``); its fee is one priced unit.

**Storage.** :func:`storage_meter` (Celery beat, hourly) accrues each collection's bytes ×
seconds since its last metering at the price in force, as an exact integer (nano-USD × 86 400 ×
10^9), and charges the whole nano-USD of it through the wallet's hold → settle (one ``usage``
ledger entry per collection and run, with the project; request id ``vst_…``, with a request-log
row ``vector.storage`` written in the same transaction). What is below one nano-USD carries over
to the next run, so nothing is rounded away or charged twice. A wallet that cannot cover a
charge pays what it has available; the rest is recorded on the
:class:`~vectors.models.StorageCharge` row (never an overdraft).

Stored files (``/v1/files``) are charged the same way and at the same price, per project: each
project's :class:`~vectors.models.FileStorage` row is accrued and charged like a collection
(request id ``fst_…``, request-log endpoint ``files.storage``, description ``file storage
<period>``). Its bytes change only on upload and delete, which first :func:`accrue` the row up
to that moment at the old size (:mod:`vectors.files`), so a file is charged for exactly the
seconds it was stored, also when it is deleted between two runs.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import secrets
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Protocol, TypeVar

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from billing.errors import InsufficientFunds
from billing.services import HoldExists, hold_open, hold_settle
from catalog.routing import Candidate, RoutingDecision
from catalog.types import CircuitState
from inference import render, settlement, stages
from inference.call import Call
from inference.http import ApiRequest, Response, StreamingResponse
from inference.models import RequestLog, RequestStatus
from money.pricing import PriceSnapshot, Usage
from vectors.models import Collection, FileStorage, StorageCharge

log = logging.getLogger(__name__)
T = TypeVar("T")

VENDOR = "infrai"
MODEL = "vector-store"
GB = 1_000_000_000
DAY_S = 86_400
# The accrual's unit: nano-USD × GB × seconds-per-day (exact: bytes × seconds × nanos/GB-day).
ACCRUAL_UNIT = GB * DAY_S
_FEE = "fee"


def storage_day_nanos(*, size_bytes: int, per_gb_day_nanos: int) -> int:
    """One day of storing ``size_bytes`` at ``per_gb_day_nanos``, rounded up (at least 1 when
    anything is stored at a non-zero price)."""
    return -(-size_bytes * per_gb_day_nanos // GB)


def _platform(fee_nanos: int) -> Candidate:
    return Candidate(
        offering_id=0,
        vendor=VENDOR,
        adapter_kind="",
        base_url="",
        credentials_env="",
        region="",
        api_version="",
        upstream_model=MODEL,
        model=MODEL,
        price=PriceSnapshot(per_image_nanos={_FEE: fee_nanos}),
        rules={},
        ignored_params=(),
        health=CircuitState.CLOSED,
        expected_cost_nanos=fee_nanos,
        quality_tier=0,
        score=0,
    )


async def metered_call(
    request: ApiRequest,
    *,
    endpoint: str,
    hold_nanos: int,
    charge: bool,
    work: Callable[[], Awaitable[T]],
) -> tuple[Call, T]:
    """Run ``work`` as one metered call of the platform.

    Counts the call against the key's limits (429), holds ``hold_nanos`` (402 with nothing
    done), runs ``work``, then settles: ``hold_nanos`` when ``charge``, else nothing. Any
    failure in ``work`` settles with nothing charged and re-raises. The returned call is
    finished (render with ``render.infrai(call)`` / ``render.headers(call)``).
    """
    call = Call.open(request, endpoint=endpoint, requested_model=MODEL)
    await stages.admit(call, tokens=0)
    platform = _platform(hold_nanos)
    call.decision = RoutingDecision(
        mode="pinned",
        prefer=None,
        task=None,
        why="the platform's vector store",
        candidates=(platform,),
    )
    await stages.hold(call, lambda _c: Usage(images={_FEE: 1}))
    async with stages.closed_on_failure(call):
        result = await work()
    call.served_by = platform
    call.charge(Usage(images={_FEE: 1}) if charge else Usage())
    await settlement.finish(call, status=RequestStatus.OK, http_status=200)
    return call, result


Handler = Callable[[ApiRequest], Awaitable[Response | StreamingResponse]]


def free_call(endpoint: str) -> Callable[[Handler], Handler]:
    """Run a handler that charges nothing (list, create, delete …) as a call of the platform
    all the same, so it has its request-log row like every call of a key: counted against the
    key's limits, a zero hold, logged with the handler's outcome. Not for handlers that make
    metered calls of their own (one hold per request)."""

    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def run(request: ApiRequest) -> Response | StreamingResponse:
            call, response = await metered_call(
                request,
                endpoint=endpoint,
                hold_nanos=0,
                charge=False,
                work=lambda: handler(request),
            )
            response.headers = {**render.headers(call), **response.headers}
            return response

        return run

    return wrap


# --- storage ----------------------------------------------------------------------------------


class Metered(Protocol):
    """What storage is accrued on: a collection, or a project's stored files."""

    size_bytes: int
    metered_at: dt.datetime
    accrued_storage: Decimal


def accrue(row: Metered, *, now: dt.datetime, per_gb_day_nanos: int) -> None:
    """Add ``row``'s bytes × the whole seconds since its ``metered_at`` (at ``per_gb_day_nanos``)
    to its ``accrued_storage`` and move ``metered_at`` on by those seconds. The caller holds
    the row's lock and saves both fields."""
    seconds = max(int((now - row.metered_at).total_seconds()), 0)
    accrued = int(row.accrued_storage) + row.size_bytes * seconds * per_gb_day_nanos
    row.accrued_storage = Decimal(accrued)
    row.metered_at = row.metered_at + dt.timedelta(seconds=seconds)


def _split_whole(row: Metered, *, now: dt.datetime, per_gb_day_nanos: int) -> int:
    """Accrue ``row`` up to ``now`` and take the whole nano-USD out of its accrual."""
    accrue(row, now=now, per_gb_day_nanos=per_gb_day_nanos)
    whole = int(row.accrued_storage) // ACCRUAL_UNIT
    row.accrued_storage = Decimal(int(row.accrued_storage) - whole * ACCRUAL_UNIT)
    return whole


def _accrue(collection_id: int, per_gb_day_nanos: int) -> StorageCharge | None:
    """Accrue one collection up to now and split off the whole nano-USD as a pending charge
    (one transaction, the collection row locked: two runs never accrue the same seconds)."""
    now = timezone.now()
    with transaction.atomic():
        c = Collection.objects.select_for_update().filter(pk=collection_id).first()
        if c is None:
            return None
        period_start = c.metered_at
        whole = _split_whole(c, now=now, per_gb_day_nanos=per_gb_day_nanos)
        c.save(update_fields=["accrued_storage", "metered_at"])
        if whole == 0:
            return None
        return StorageCharge.objects.create(
            collection=c,
            organization_id=c.organization_id,
            project_id=c.project_id,
            request_id="vst_" + secrets.token_hex(12),
            amount_nanos=whole,
            period_start=period_start,
            period_end=c.metered_at,
        )


def _accrue_files(file_storage_id: int, per_gb_day_nanos: int) -> StorageCharge | None:
    """:func:`_accrue` for one project's stored files (their row locked, as an upload or a
    delete locks it); the charge's period starts where the previous charge's ended."""
    now = timezone.now()
    with transaction.atomic():
        row = FileStorage.objects.select_for_update().filter(pk=file_storage_id).first()
        if row is None:
            return None
        whole = _split_whole(row, now=now, per_gb_day_nanos=per_gb_day_nanos)
        period_start = row.charged_until
        if whole:
            row.charged_until = row.metered_at
        row.save(update_fields=["accrued_storage", "metered_at", "charged_until"])
        if whole == 0:
            return None
        return StorageCharge.objects.create(
            file_storage=row,
            organization_id=row.organization_id,
            project_id=row.project_id,
            request_id="fst_" + secrets.token_hex(12),
            amount_nanos=whole,
            period_start=period_start,
            period_end=row.metered_at,
        )


def _hold_what_is_available(charge: StorageCharge) -> int:
    """Hold the charge's amount, or all the wallet has available when that is less; returns
    the amount held (0: nothing held)."""

    def hold(amount: int) -> None:
        hold_open(
            organization_id=charge.organization_id,
            project_id=charge.project_id,
            api_key_id=None,
            request_id=charge.request_id,
            amount_nanos=amount,
        )

    try:
        hold(charge.amount_nanos)
        return charge.amount_nanos
    except InsufficientFunds as exc:
        amount = min(exc.available_nanos, charge.amount_nanos)
    if amount > 0:
        hold(amount)
    return amount


def storage_charge(charge: StorageCharge) -> int:
    """Charge a pending storage charge through hold → settle; returns what was charged.

    Takes what the wallet has available when it cannot cover the whole amount (the shortfall
    stays on the row); 0 when it has nothing. Safe to retry: a hold already opened for the
    row is only settled.
    """
    what = "file storage" if charge.file_storage_id is not None else "vector storage"
    description = f"{what} {charge.period_start:%Y-%m-%d %H:%M}-{charge.period_end:%H:%M}"
    try:
        amount = _hold_what_is_available(charge)
    except HoldExists:
        amount = charge.amount_nanos  # held by an earlier try: the settlement caps at the hold
    charged = 0
    if amount > 0:
        with transaction.atomic():
            charged = hold_settle(
                request_id=charge.request_id, actual_nanos=amount, description=description
            )
            _log_charge(charge, charged)
    StorageCharge.objects.filter(pk=charge.pk).update(charged_nanos=charged)
    if charge.collection_id is not None:
        Collection.objects.filter(pk=charge.collection_id).update(
            storage_charged_nanos=F("storage_charged_nanos") + charged
        )
    if charge.file_storage_id is not None:
        FileStorage.objects.filter(pk=charge.file_storage_id).update(
            storage_charged_nanos=F("storage_charged_nanos") + charged
        )
    if charged < charge.amount_nanos:
        log.warning(
            "storage charge %s: wallet covered %s of %s nano-USD",
            charge.request_id,
            charged,
            charge.amount_nanos,
        )
    return charged


def _log_charge(charge: StorageCharge, charged: int) -> None:
    """The request-log row of a storage charge (written with its settlement, so every usage
    entry has its request, and the charge shows in the dashboard's usage and request log)."""
    RequestLog.objects.update_or_create(
        request_id=charge.request_id,
        defaults={
            "organization_id": charge.organization_id,
            "project_id": charge.project_id,
            "endpoint": "files.storage" if charge.file_storage_id is not None else "vector.storage",
            "requested_model": MODEL,
            "model": MODEL,
            "vendor": VENDOR,
            "status": RequestStatus.OK,
            "http_status": 200,
            "cost_nanos": charged,
        },
    )


def storage_meter() -> int:
    """Accrue every collection and every project's stored files and charge what is due (and
    retry charges left pending); returns the nano-USD charged."""
    from vectors.services import price_now

    per_gb_day = price_now().per_gb_day_nanos
    for collection_id in Collection.objects.values_list("pk", flat=True):
        _accrue(collection_id, per_gb_day)
    for file_storage_id in FileStorage.objects.values_list("pk", flat=True):
        _accrue_files(file_storage_id, per_gb_day)
    total = 0
    for charge in StorageCharge.objects.filter(charged_nanos__isnull=True).order_by("pk"):
        try:
            total += storage_charge(charge)
        except Exception:
            log.exception("could not charge storage %s; retried next run", charge.request_id)
    return total
