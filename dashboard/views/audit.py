"""The audit log page: who changed keys, members, limits, budgets and billing settings.

Owners only (``OWNERS``): a member, admin or billing member gets 403, a non-member 404. Newest
first, 50 a page by keyset (``?before=<id>``). Rows come from :mod:`accounts.audit`, written by
the services in the transaction of each change, whichever way in (dashboard, API, admin).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from accounts.audit import AuditEvent, audit_events
from accounts.roles import Role
from dashboard.permissions import OrgContext, org_view
from dashboard.views.common import render_org
from infra.querystring import query_id
from money.usd import nanos_to_usd_str

OWNERS = frozenset({Role.OWNER})
PAGE_SIZE = 50


def _shown(field: str, value: Any) -> str:
    """One value as the page writes it: money in USD, no value as "none"."""
    if value is None or value == "":
        return "none"
    if field.endswith("_nanos") and isinstance(value, int):
        return f"${nanos_to_usd_str(value)}"
    return str(value)


def changes_shown(event: AuditEvent) -> list[tuple[str, str]]:
    """``(field, "old → new")`` (or the value set) for each change of ``event``; fields named
    ``…_nanos`` are shown in USD without the suffix."""
    out = []
    for field, value in event.changes.items():
        label = field.removesuffix("_nanos").replace("_", " ")
        if isinstance(value, list) and len(value) == 2:
            out.append((label, f"{_shown(field, value[0])} → {_shown(field, value[1])}"))
        else:
            out.append((label, _shown(field, value)))
    return out


@org_view(OWNERS)
def audit_log(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    before = query_id(request.GET.get("before", ""))
    events = audit_events(
        organization_id=ctx.organization.pk, before_id=before, limit=PAGE_SIZE + 1
    )
    has_more = len(events) > PAGE_SIZE
    events = events[:PAGE_SIZE]
    return render_org(
        request,
        ctx,
        "dashboard/audit_log.html",
        {
            "events": [(e, changes_shown(e)) for e in events],
            "next_before": events[-1].pk if has_more else None,
            "paged": before is not None,
        },
    )
