"""The JSON objects of the management API (OpenAI's Admin API names where it has one).

Ids are prefixed strings (``proj_12``, ``key_7``, ``user_3``, ``invite_5``, ``ledger_9``,
``admin_key_2``); times are unix seconds; money is a string of USD (the exact decimal of the
integer nano-USD, as ``infrai.cost_usd`` on ``/v1``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from management.models import AdminKey
from money.usd import nanos_to_usd_str

if TYPE_CHECKING:
    from accounts.models import ApiKey, Invitation, Membership, Project
    from billing.models import LedgerEntry
    from inference.models import RequestLog


def ts(value: datetime | None) -> int | None:
    """Unix seconds (None stays None)."""
    return int(value.timestamp()) if value is not None else None


def usd(nanos: int | None) -> str | None:
    return nanos_to_usd_str(nanos) if nanos is not None else None


def project(p: Project) -> dict[str, Any]:
    return {
        "object": "organization.project",
        "id": f"proj_{p.pk}",
        "name": p.name,
        "created_at": ts(p.created_at),
        "archived_at": ts(p.archived_at),
        "status": "archived" if p.archived_at else "active",
        "monthly_budget_usd": usd(p.monthly_budget_nanos),
    }


def api_key(k: ApiKey, *, secret: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "object": "organization.project.api_key",
        "id": f"key_{k.pk}",
        "name": k.name,
        "redacted_value": k.display,
        "project_id": f"proj_{k.project_id}",
        "created_at": ts(k.created_at),
        "expires_at": ts(k.expires_at),
        "revoked_at": ts(k.revoked_at),
        "last_used_at": ts(k.last_used_at),
        "requests_per_minute": k.requests_per_minute,
        "tokens_per_minute": k.tokens_per_minute,
        "monthly_budget_usd": usd(k.monthly_budget_nanos),
        "owner": {"type": "user", "user_id": f"user_{k.created_by_id}"}
        if k.created_by_id
        else None,
    }
    if secret is not None:
        out["value"] = secret
    return out


def member(m: Membership) -> dict[str, Any]:
    return {
        "object": "organization.user",
        "id": f"user_{m.user_id}",
        "name": m.user.name,
        "email": m.user.email,
        "role": m.role,
        "added_at": ts(m.created_at),
    }


def invitation(i: Invitation) -> dict[str, Any]:
    if i.accepted_at:
        status = "accepted"
    elif i.revoked_at:
        status = "revoked"
    elif not i.is_pending:
        status = "expired"
    else:
        status = "pending"
    return {
        "object": "organization.invite",
        "id": f"invite_{i.pk}",
        "email": i.email,
        "role": i.role,
        "status": status,
        "invited_at": ts(i.created_at),
        "expires_at": ts(i.expires_at),
        "accepted_at": ts(i.accepted_at),
    }


def request_row(r: RequestLog) -> dict[str, Any]:
    return {
        "object": "organization.request",
        "id": r.request_id,
        "created_at": ts(r.created_at),
        "endpoint": r.endpoint,
        "project_id": f"proj_{r.project_id}" if r.project_id else None,
        "api_key_id": f"key_{r.api_key_id}" if r.api_key_id else None,
        "requested_model": r.requested_model,
        "model": r.model,
        "vendor": r.vendor,
        "status": r.status,
        "http_status": r.http_status,
        "error_code": r.error_code or None,
        "input_tokens": r.input_tokens,
        "cached_input_tokens": r.cached_input_tokens,
        "cache_write_tokens": r.cache_write_tokens,
        "output_tokens": r.output_tokens,
        "reasoning_tokens": r.reasoning_tokens,
        "cost_usd": usd(r.cost_nanos),
        "latency_ms": r.latency_ms,
        "stream": r.stream,
        "cache_hit": r.cache_hit,
        "failovers": r.failovers,
    }


def ledger_entry(e: LedgerEntry) -> dict[str, Any]:
    return {
        "object": "organization.wallet.ledger_entry",
        "id": f"ledger_{e.pk}",
        "created_at": ts(e.created_at),
        "kind": e.kind,
        "amount_usd": usd(e.amount_nanos),
        "balance_after_usd": usd(e.balance_after_nanos),
        "project_id": f"proj_{e.project_id}" if e.project_id else None,
        "api_key_id": f"key_{e.api_key_id}" if e.api_key_id else None,
        "request_id": e.request_id or None,
        "description": e.description,
    }


def admin_key(k: AdminKey) -> dict[str, Any]:
    return {
        "object": "organization.admin_api_key",
        "id": f"admin_key_{k.pk}",
        "name": k.name,
        "redacted_value": k.display,
        "role": k.role,
        "created_at": ts(k.created_at),
        "created_by": f"user_{k.created_by_id}" if k.created_by_id else None,
        "revoked_at": ts(k.revoked_at),
        "revoked_by": f"user_{k.revoked_by_id}" if k.revoked_by_id else None,
        "last_used_at": ts(k.last_used_at),
    }
