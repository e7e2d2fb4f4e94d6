"""Writes to the catalog. Each one bumps the catalog version (after commit) so every process
rebuilds its routing snapshot (see :mod:`catalog.selectors`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from catalog import health
from catalog.models import Model, ParameterRule, Vendor
from catalog.probes import served_models
from catalog.selectors import (
    VERSION_KEY,
    VERSION_TTL_S,
    catalog_snapshot_forget,
    credentials_configured,
)
from catalog.types import Support
from infra import fastcache

_PROBE_TIMEOUT_S = 10.0


def catalog_changed() -> None:
    """Tell every process the catalog changed (after the current transaction commits)."""

    def bump() -> None:

        fastcache.set_sync(VERSION_KEY, uuid.uuid4().hex, VERSION_TTL_S)
        catalog_snapshot_forget()

    transaction.on_commit(bump)


# --- the parameter matrix -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cell:
    """One matrix cell as the editor submits it."""

    support: Support
    accepted_values: tuple[Any, ...] = ()


def matrix_cells() -> dict[tuple[str, str], Cell]:
    """Every stored cell, keyed ``(model_id, parameter)`` (absent: honoured)."""
    return {
        (r.model.model_id, r.parameter): Cell(Support(r.support), tuple(r.accepted_values or ()))
        for r in ParameterRule.objects.select_related("model")
    }


@transaction.atomic
def matrix_update(
    *, user: AbstractBaseUser, cells: Mapping[tuple[str, str], Cell]
) -> dict[str, list[str]]:
    """Save the matrix cells that differ from what is stored, in one transaction.

    ``cells`` is keyed ``(model_id, parameter)``. Writes one admin ``LogEntry`` (who, when,
    what: ``param: old → new``) per changed model. Returns the changes by model id.
    """
    current = matrix_cells()
    models = {m.model_id: m for m in Model.objects.filter(model_id__in={k[0] for k in cells})}
    changes: dict[str, list[str]] = {}
    for (model_id, parameter), cell in sorted(cells.items()):
        before = current.get((model_id, parameter), Cell(Support.HONOURED))
        if before == cell or model_id not in models:
            continue
        ParameterRule.objects.update_or_create(
            model=models[model_id],
            parameter=parameter,
            defaults={"support": cell.support, "accepted_values": list(cell.accepted_values)},
        )
        changes.setdefault(model_id, []).append(
            f"{parameter}: {_cell_text(before)} → {_cell_text(cell)}"
        )
    for model_id, lines in changes.items():
        LogEntry.objects.log_actions(
            user_id=user.pk,
            queryset=[models[model_id]],
            action_flag=CHANGE,
            change_message="Parameter matrix: " + "; ".join(lines),
            single_object=True,
        )
    if changes:
        catalog_changed()
    return changes


def _cell_text(cell: Cell) -> str:
    if cell.accepted_values:
        return f"{cell.support.value} (accepts {list(cell.accepted_values)})"
    return cell.support.value


# --- vendor probe ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What one probe found: the upstream model ids, or an error sentence."""

    vendor: str
    models: tuple[str, ...] | None
    error: str = ""
    unreachable: bool = False  # the call itself failed (worth retrying), not configuration


def vendor_probe(*, vendor: Vendor, timeout_s: float = _PROBE_TIMEOUT_S) -> ProbeResult:
    """GET the vendor's ``/models``; record the verified model list and feed its health.

    A vendor that is disabled or lacks credentials is not called. On success the verified list
    is replaced; on failure the last verified list is kept and the circuit records a failure.
    """
    if not vendor.enabled:
        return ProbeResult(vendor.name, None, "vendor disabled")
    if not credentials_configured(vendor.credentials_env):
        error = f"credentials not configured (set {vendor.credentials_env})"
        _record_probe(vendor=vendor, models=None, error=error)
        return ProbeResult(vendor.name, None, error)
    started = time.monotonic()
    try:
        models = served_models(vendor, timeout_s=timeout_s)
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        health.record_failure(vendor.name)
        error = f"{type(exc).__name__}: {exc}"[:500]
        _record_probe(vendor=vendor, models=None, error=error)
        return ProbeResult(vendor.name, None, error, unreachable=True)
    health.record_success(vendor.name, int((time.monotonic() - started) * 1000))
    _record_probe(vendor=vendor, models=models, error="")
    return ProbeResult(vendor.name, models)


def _record_probe(*, vendor: Vendor, models: Sequence[str] | None, error: str) -> None:
    changed = vendor.last_probe_error != error
    update: dict[str, Any] = {"last_probe_error": error}
    if models is not None:
        changed = changed or vendor.verified_at is None or list(models) != vendor.verified_models
        update.update(verified_models=list(models), verified_at=timezone.now())
    Vendor.objects.filter(pk=vendor.pk).update(**update)
    for name, value in update.items():
        setattr(vendor, name, value)
    if changed:
        catalog_changed()


def vendors_probe_all(*, names: Sequence[str] | None = None) -> list[ProbeResult]:
    """Probe every enabled vendor (or those named), one after another."""
    vendors = Vendor.objects.filter(enabled=True)
    if names:
        vendors = Vendor.objects.filter(name__in=names)
    return [vendor_probe(vendor=v) for v in vendors.order_by("name")]


def vendor_verify(*, vendor: Vendor, models: Sequence[str]) -> None:
    """Mark ``models`` as served by ``vendor`` without probing (catalog files, tests)."""
    _record_probe(vendor=vendor, models=sorted(models), error="")
