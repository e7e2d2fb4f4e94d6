"""Staff views of billing. Every money field is read-only: balances change only through the
"Adjust balance" action, which adds a ledger entry with a reason."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from billing.models import Hold, LedgerEntry, ProjectSpend, StripeEvent, TopUp, Wallet
from billing.services.wallet import wallet_adjust
from money.usd import nanos_to_usd_str, usd_to_nanos


class AdjustForm(forms.Form):
    amount_usd = forms.DecimalField(
        max_digits=18, decimal_places=9, help_text="Positive credits, negative debits."
    )
    reason = forms.CharField(max_length=255, help_text="Shown in the ledger history.")
    token = forms.CharField(widget=forms.HiddenInput)


def _in_usd(column: str, description: str) -> Callable[[Any, Any], str]:
    """An admin column showing the nano-USD field ``column`` as exact USD ("-" when null),
    sorted by it."""

    @admin.display(description=description, ordering=column)
    def show(self: Any, obj: Any) -> str:
        nanos = getattr(obj, column)
        return "-" if nanos is None else nanos_to_usd_str(nanos)

    return show


@admin.display(description="organization", ordering="wallet__organization__name")
def _organization(self: Any, obj: Any) -> str:
    """The wallet of ``obj`` named by its organization (a link to the wallet's page)."""
    organization = obj.wallet.organization
    return format_html(
        '<a href="{}">{}</a> ({})',
        reverse("admin:billing_wallet_change", args=[obj.wallet_id]),
        organization.name,
        organization.slug,
    )


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Wallet)
class WalletAdmin(admin.ModelAdmin):
    list_display = ("organization", "balance_usd", "held_usd", "auto_recharge_enabled")
    search_fields = ("organization__slug", "organization__name", "stripe_customer_id")
    list_select_related = ("organization",)
    readonly_fields = (
        "organization",
        "balance_usd",
        "held_usd",
        "stripe_customer_id",
        "auto_recharge_payment_method_id",
        "auto_recharge_armed",
        "auto_recharge_attempts",
        "auto_recharge_last_error",
        "updated_at",
    )
    exclude = ("balance_nanos", "held_nanos")  # shown in USD (readonly_fields)
    actions = ["adjust_balance"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="balance (USD)")
    def balance_usd(self, obj: Wallet) -> str:
        return nanos_to_usd_str(obj.balance_nanos)

    @admin.display(description="held (USD)")
    def held_usd(self, obj: Wallet) -> str:
        return nanos_to_usd_str(obj.held_nanos)

    @admin.action(description="Adjust balance (adds a ledger entry with a reason)")
    def adjust_balance(
        self, request: HttpRequest, queryset: QuerySet[Wallet]
    ) -> HttpResponse | None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one wallet.", messages.ERROR)
            return None
        wallet = queryset.select_related("organization").get()
        form = AdjustForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            try:
                entry = wallet_adjust(
                    organization=wallet.organization,
                    amount_nanos=usd_to_nanos(form.cleaned_data["amount_usd"]),
                    reason=form.cleaned_data["reason"],
                    staff_user=request.user,  # type: ignore[arg-type]
                    idempotency_key=form.cleaned_data["token"],
                )
            except (ValueError, PermissionError) as exc:
                self.message_user(request, str(exc), messages.ERROR)
                return None
            self.message_user(
                request,
                f"Adjusted by ${nanos_to_usd_str(entry.amount_nanos)}; "
                f"balance ${nanos_to_usd_str(entry.balance_after_nanos)}.",
            )
            return None
        if form.is_bound is False:
            form = AdjustForm(initial={"token": secrets.token_hex(16)})
        return TemplateResponse(
            request,
            "billing/admin/adjust.html",
            {
                **self.admin_site.each_context(request),
                "wallet": wallet,
                "form": form,
                "balance_usd": nanos_to_usd_str(wallet.balance_nanos),
            },
        )


@admin.register(LedgerEntry)
class LedgerEntryAdmin(_ReadOnly):
    """The ledger in USD, each entry's wallet named by its organization."""

    list_display = (
        "created_at",
        "organization",
        "kind",
        "amount_usd",
        "balance_after_usd",
        "request_id",
        "description",
    )
    list_filter = ("kind",)
    list_select_related = ("wallet__organization",)
    search_fields = ("idempotency_key", "request_id", "external_ref", "wallet__organization__slug")
    fields = (
        "created_at",
        "organization",
        "kind",
        "amount_usd",
        "balance_after_usd",
        "description",
        "request_id",
        "external_ref",
        "idempotency_key",
        "project",
        "api_key",
        "created_by",
    )
    readonly_fields = fields

    organization = _organization
    amount_usd = _in_usd("amount_nanos", "amount (USD)")
    balance_after_usd = _in_usd("balance_after_nanos", "balance after (USD)")


@admin.register(Hold)
class HoldAdmin(_ReadOnly):
    list_display = (
        "request_id",
        "organization",
        "amount_usd",
        "captured_usd",
        "status",
        "expires_at",
    )
    list_filter = ("status",)
    list_select_related = ("wallet__organization",)
    search_fields = ("request_id",)
    fields = (
        "request_id",
        "organization",
        "amount_usd",
        "captured_usd",
        "delivered_usd",
        "status",
        "month",
        "created_at",
        "expires_at",
        "closed_at",
        "process",
        "project",
        "api_key",
    )
    readonly_fields = fields

    organization = _organization
    amount_usd = _in_usd("amount_nanos", "amount (USD)")
    captured_usd = _in_usd("captured_nanos", "captured (USD)")
    delivered_usd = _in_usd("delivered_nanos", "delivered (USD)")


@admin.register(ProjectSpend)
class ProjectSpendAdmin(_ReadOnly):
    list_display = ("project", "month", "used_usd", "held_usd")
    list_select_related = ("project__organization",)
    fields = ("project", "month", "used_usd", "held_usd")
    readonly_fields = fields

    used_usd = _in_usd("used_nanos", "used (USD)")
    held_usd = _in_usd("held_nanos", "held (USD)")


@admin.register(TopUp)
class TopUpAdmin(_ReadOnly):
    list_display = ("checkout_session_id", "organization", "amount_usd", "status", "created_at")
    list_filter = ("status",)
    list_select_related = ("wallet__organization",)
    fields = (
        "checkout_session_id",
        "organization",
        "amount_usd",
        "status",
        "payment_intent_id",
        "created_by",
        "created_at",
        "paid_at",
    )
    readonly_fields = fields

    organization = _organization
    amount_usd = _in_usd("amount_nanos", "amount (USD)")


@admin.register(StripeEvent)
class StripeEventAdmin(_ReadOnly):
    list_display = ("event_id", "type", "status", "detail", "received_at")
    list_filter = ("status", "type")
    search_fields = ("event_id",)
