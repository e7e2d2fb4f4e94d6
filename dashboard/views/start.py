"""Getting started: base URL, snippets in three languages, the model list with prices."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from dashboard import selectors
from dashboard.permissions import OrgContext, org_view
from dashboard.templatetags.dashboard import usd
from dashboard.views.common import render_org
from money.usd import NANOS_PER_CENT

# Below this available balance a call cannot be paid for (its hold is refused with 402):
# getting-started and the overview then show "add credit" as a step.
LOW_BALANCE_NANOS = NANOS_PER_CENT


def needs_credit(*, ctx: OrgContext) -> bool:
    """Whether the organization's available balance cannot cover a call."""
    summary = selectors.wallet_summary(organization=ctx.organization)
    return summary.available_nanos < LOW_BALANCE_NANOS


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One line of the model table: the model and its price in the unit it is billed in."""

    model: selectors.ModelPrice
    price: str


def price_text(model: selectors.ModelPrice) -> str:
    """The lowest price in force of ``model`` in the units it is billed in, e.g.
    ``"$0.15 input, $0.60 output per 1M tokens"``, ``"$1.00 per 1M characters"``,
    ``"$0.00002 per second of audio"``, ``"$0.04 to $0.12 per image"``; ``"Free"`` when every
    price in force is zero and ``"—"`` when no routable offering has a price in force."""
    if model.input_per_mtok_nanos is None:
        return "—"
    parts: list[str] = []
    tokens_in = model.input_per_mtok_nanos
    tokens_out = model.output_per_mtok_nanos or 0
    if tokens_in and tokens_out:
        parts.append(f"{usd(tokens_in)} input, {usd(tokens_out)} output per 1M tokens")
    elif tokens_in or tokens_out:
        side = "input" if tokens_in else "output"
        parts.append(f"{usd(tokens_in or tokens_out)} per 1M {side} tokens")
    if model.per_mchar_nanos:
        parts.append(f"{usd(model.per_mchar_nanos)} per 1M characters")
    if model.per_audio_second_nanos:
        parts.append(f"{usd(model.per_audio_second_nanos)} per second of audio")
    if model.per_image_range_nanos:
        low, high = model.per_image_range_nanos
        span = usd(low) if low == high else f"{usd(low)} to {usd(high)}"
        parts.append(f"{span} per image")
    return "; ".join(parts) or "Free"


@org_view()
def getting_started(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    overview = selectors.overview_summary(organization=ctx.organization)
    return render_org(
        request,
        ctx,
        "dashboard/getting_started.html",
        {
            "base_url": settings.INFRAI_PUBLIC_BASE_URL,
            "models": [ModelRow(m, price_text(m)) for m in selectors.model_prices()],
            "needs_credit": needs_credit(ctx=ctx),
            "has_key": overview.active_key_count > 0,
            "has_project": overview.project_count > 0,
        },
    )


#: Where the API reference page reads the OpenAPI document (the app's own /v1 surface, the
#: same origin as the dashboard: no key needed, see inference/endpoints/openapi.py).
OPENAPI_URL = "/v1/openapi.json"


@org_view()
def api_reference(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """The API reference: ``/v1/openapi.json`` rendered in the page by Redoc, whose files come
    from the drf-spectacular-sidecar package (static files of our own, no CDN)."""
    response = render_org(
        request,
        ctx,
        "dashboard/api_reference.html",
        {"openapi_url": OPENAPI_URL, "base_url": settings.INFRAI_PUBLIC_BASE_URL},
    )
    response["Content-Security-Policy"] = API_REFERENCE_CSP
    return response


#: The page loads nothing from elsewhere: Redoc's bundle would fetch its vendor's logo from a
#: CDN (the image then fails and Redoc leaves it out). Redoc styles itself with inline
#: <style> elements and runs its search in a blob: worker.
API_REFERENCE_CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "script-src 'self'; worker-src 'self' blob:; connect-src 'self'; frame-ancestors 'none'"
)
