"""Billing HTTP: the Stripe webhook and the Checkout pages (thin: parse, call, render)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from accounts.roles import Role
from accounts.selectors import organization_get_by_slug, user_has_role
from billing.services.topups import topup_checkout_start
from billing.services.webhooks import webhook_receive
from billing.stripe_gateway import StripeFailure
from money.usd import usd_to_nanos

_PAYER_ROLES = {Role.OWNER, Role.ADMIN, Role.BILLING}


@csrf_exempt
@require_POST
def stripe_webhook(request: HttpRequest) -> HttpResponse:
    """``POST /billing/stripe/webhook``: the raw body goes to the verifier untouched."""
    result = webhook_receive(
        payload=request.body, signature_header=request.headers.get("Stripe-Signature", "")
    )
    return JsonResponse({"detail": result.detail}, status=result.http_status)


@login_required
@require_POST
def topup_start(request: HttpRequest, org_slug: str) -> HttpResponse:
    """Start a Checkout top-up of ``amount_usd`` for an organization the user may pay for."""
    org = organization_get_by_slug(slug=org_slug)
    if org is None:
        raise Http404("No such organization.")
    if not user_has_role(user=request.user, organization=org, roles=_PAYER_ROLES):  # type: ignore[arg-type]
        return HttpResponse("You may not add credit to this organization.", status=403)
    try:
        amount_nanos = usd_to_nanos(Decimal(request.POST.get("amount_usd", "").strip()))
    except (InvalidOperation, ValueError):
        return HttpResponseBadRequest("Enter an amount in USD, e.g. 20 or 12.50.")
    base = request.build_absolute_uri("/")[:-1]
    try:
        started = topup_checkout_start(
            organization=org,
            amount_nanos=amount_nanos,
            success_url=base
            + reverse("billing:topup_success")
            + "?session_id={CHECKOUT_SESSION_ID}",
            cancel_url=base + reverse("billing:topup_cancel"),
            created_by=request.user,  # type: ignore[arg-type]
        )
    except ValueError as exc:
        return HttpResponseBadRequest(str(exc))
    except StripeFailure:
        return HttpResponse("Payments are unavailable right now; try again later.", status=503)
    return redirect(started.checkout_url)


def topup_success(request: HttpRequest) -> HttpResponse:
    """After Checkout: says the credit arrives with Stripe's confirmation (never credits here)."""
    return render(request, "billing/topup_success.html")


def topup_cancel(request: HttpRequest) -> HttpResponse:
    """Checkout was abandoned: nothing was charged."""
    return render(request, "billing/topup_cancel.html")
