"""Helpers every organization page uses."""

from __future__ import annotations

from typing import Any, NoReturn

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.selectors import organizations_for_user
from dashboard.permissions import OrgContext


def render_org(
    request: HttpRequest,
    ctx: OrgContext,
    template: str,
    context: dict[str, Any] | None = None,
    *,
    status: int = 200,
) -> HttpResponse:
    """Render an organization page with the organization switcher and the role flags."""
    full = {
        "ctx": ctx,
        "org": ctx.organization,
        "organizations": organizations_for_user(user=ctx.user),
        **(context or {}),
    }
    return render(request, template, full, status=status)


def no_store(response: HttpResponse) -> HttpResponse:
    """Keep a page with a secret out of browser and proxy caches."""
    response["Cache-Control"] = "no-store"
    return response


def raise_404() -> NoReturn:
    """Another tenant's id and a missing id look the same."""
    raise Http404("Not found.")
