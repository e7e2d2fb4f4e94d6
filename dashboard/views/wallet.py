"""The wallet: balance, open holds, ledger, top-ups, auto-recharge, monthly statements.

Only owners, admins and billing members get here (``SEE_BILLING``).
"""

from __future__ import annotations

from decimal import Decimal

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from billing import receipts
from billing import selectors as billing_selectors
from billing.services.notify import low_balance_threshold_set
from dashboard import selectors, statements, topups
from dashboard.forms import AutoRechargeForm, LowBalanceForm, StatementForm, TopUpForm
from dashboard.permissions import SEE_BILLING, OrgContext, org_view
from dashboard.views.common import render_org
from infra.querystring import query_id
from money.usd import NANOS_PER_USD, usd_to_nanos

TOPUP_NOTICES = {
    "success": "Thank you — Stripe is confirming the payment. The balance updates here as soon as "
    "it does (usually within seconds).",
    "cancelled": "The payment was cancelled; nothing was charged.",
}


def _usd(nanos: int) -> Decimal:
    return Decimal(nanos) / NANOS_PER_USD


def _int_param(request: HttpRequest, name: str) -> int | None:
    return query_id(request.GET.get(name, ""))


def _to_checkout(
    request: HttpRequest, ctx: OrgContext, started: topups.CheckoutStart, *, back: str
) -> HttpResponse:
    """A redirect to Stripe's Checkout page when it started; otherwise back to the page named
    ``back`` (a dashboard URL name) with the error as a message."""
    if started.error:
        messages.error(request, started.error)
        return redirect(back, slug=ctx.organization.slug)
    return redirect(started.url)


def _wallet_page(
    request: HttpRequest,
    ctx: OrgContext,
    *,
    topup_form: TopUpForm | None = None,
    recharge_form: AutoRechargeForm | None = None,
    low_balance_form: LowBalanceForm | None = None,
    status: int = 200,
) -> HttpResponse:
    org = ctx.organization
    alert = billing_selectors.low_balance_alert(organization_id=org.pk)
    summary = selectors.wallet_summary(organization=org)
    before = _int_param(request, "before")
    page_size = 25
    entries = selectors.ledger_page(organization=org, before_id=before, limit=page_size + 1)
    has_more = len(entries) > page_size
    entries = entries[:page_size]
    today = timezone.now().date()
    return render_org(
        request,
        ctx,
        "dashboard/wallet.html",
        {
            "summary": summary,
            "holds": selectors.open_holds(organization=org),
            "entries": entries,
            "next_before": entries[-1].pk if has_more else None,
            "topup_form": topup_form or TopUpForm(),
            "topups_available": topups.available(),
            "recharge_form": recharge_form
            or AutoRechargeForm(
                initial={
                    "enabled": summary.auto_recharge_enabled,
                    "threshold_usd": _usd(summary.auto_recharge_threshold_nanos) or 10,
                    "amount_usd": _usd(summary.auto_recharge_amount_nanos) or 25,
                }
            ),
            "recharge_blocked": "" if summary.has_payment_method else topups.NO_CARD,
            "statement_form": StatementForm(initial={"month": today.replace(day=1)}),
            "low_balance_form": low_balance_form
            or LowBalanceForm(initial={"threshold_usd": _usd(alert.threshold_nanos)}),
            "receipts": receipts.receipts_for_organization(organization_id=org.pk, limit=20),
            "topup_notice": TOPUP_NOTICES.get(request.GET.get("topup", ""), ""),
        },
        status=status,
    )


@org_view(SEE_BILLING)
def wallet(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    return _wallet_page(request, ctx)


@org_view(SEE_BILLING)
@require_POST
def topup(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """Start a Stripe Checkout for the chosen amount; the webhook credits, never the redirect."""
    form = TopUpForm(request.POST)
    if not form.is_valid():
        return _wallet_page(request, ctx, topup_form=form, status=400)
    wallet_url = request.build_absolute_uri(f"/o/{ctx.organization.slug}/wallet/")
    result = topups.checkout_start(
        organization=ctx.organization,
        amount_nanos=form.cleaned_data["amount_nanos"],
        user=ctx.user,
        success_url=wallet_url + "?topup=success",
        cancel_url=wallet_url + "?topup=cancelled",
    )
    return _to_checkout(request, ctx, result, back="dashboard:wallet")


@org_view(SEE_BILLING)
@require_POST
def auto_recharge(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """Save the settings; on any error the page comes back with what was typed (400)."""
    form = AutoRechargeForm(request.POST)
    if form.is_valid():
        error = topups.auto_recharge_save(
            organization=ctx.organization,
            enabled=form.cleaned_data["enabled"],
            threshold_usd=form.cleaned_data["threshold_usd"],
            amount_usd=form.cleaned_data["amount_usd"],
            actor=ctx.actor,
        )
        if not error:
            messages.success(request, "Saved the auto-recharge settings.")
            return redirect("dashboard:wallet", slug=ctx.organization.slug)
        form.add_error(None, error)
    return _wallet_page(request, ctx, recharge_form=form, status=400)


@org_view(SEE_BILLING)
@require_POST
def low_balance(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """Save the low-balance e-mail threshold (audited); a refused value comes back (400)."""
    form = LowBalanceForm(request.POST)
    if not form.is_valid():
        return _wallet_page(request, ctx, low_balance_form=form, status=400)
    threshold = usd_to_nanos(form.cleaned_data["threshold_usd"])
    low_balance_threshold_set(
        organization_id=ctx.organization.pk, threshold_nanos=threshold, actor=ctx.actor
    )
    messages.success(request, "Saved the low-balance alert.")
    return redirect("dashboard:wallet", slug=ctx.organization.slug)


@org_view(SEE_BILLING)
def receipt(request: HttpRequest, ctx: OrgContext, entry_id: int) -> HttpResponse:
    """One payment's receipt as a PDF download; another organization's (or no payment) 404."""
    found = receipts.receipt_get(organization_id=ctx.organization.pk, entry_id=entry_id)
    if found is None:
        raise Http404("Not found.")
    response = HttpResponse(receipts.receipt_pdf(found), content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{found.filename}.pdf"'
    return response


@org_view(SEE_BILLING)
def card(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """The saved card: what it is, replace it (Checkout in setup mode) or remove it."""
    notice = {
        "saved": "Stripe is confirming the new card; it appears here within seconds.",
        "cancelled": "Nothing was changed.",
    }.get(request.GET.get("setup", ""), "")
    return render_org(
        request,
        ctx,
        "dashboard/card.html",
        {
            "card_label": topups.card_label(organization=ctx.organization),
            "topups_available": topups.available(),
            "notice": notice,
        },
    )


@org_view(SEE_BILLING)
@require_POST
def card_replace(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    card_url = request.build_absolute_uri(f"/o/{ctx.organization.slug}/wallet/card/")
    result = topups.card_setup_start(
        organization=ctx.organization,
        success_url=card_url + "?setup=saved",
        cancel_url=card_url + "?setup=cancelled",
    )
    return _to_checkout(request, ctx, result, back="dashboard:card")


@org_view(SEE_BILLING)
@require_POST
def card_remove(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    error = topups.card_remove(organization=ctx.organization, actor=ctx.actor)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, "The card is removed; auto-recharge is off.")
    return redirect("dashboard:card", slug=ctx.organization.slug)


@org_view(SEE_BILLING)
def statement(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """``?month=YYYY-MM&format=csv|pdf`` → a download."""
    form = StatementForm(request.GET)
    if not form.is_valid():
        messages.error(request, "Pick a month for the statement.")
        return redirect("dashboard:wallet", slug=ctx.organization.slug)
    month = form.cleaned_data["month"]
    data = selectors.statement(organization=ctx.organization, month=month)
    name = f"infrai-statement-{ctx.organization.slug}-{month:%Y-%m}"
    if form.cleaned_data["format"] == "pdf":
        response = HttpResponse(statements.statement_pdf(data), content_type="application/pdf")
        response["Content-Disposition"] = f'attachment; filename="{name}.pdf"'
    else:
        response = HttpResponse(statements.statement_csv(data), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
    return response
