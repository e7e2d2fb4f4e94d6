"""The wallet, its ledger and top-ups; the public model catalog; admin keys."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from billing import selectors as billing_selectors
from billing.models import LedgerEntry
from billing.money import nanos_to_usd_str
from config.errors import InvalidRequest, NotFound, ServiceUnavailable
from dashboard import topups
from dashboard.catalog_reads import model_prices
from dashboard.permissions import MANAGE_ORG, SEE_BILLING
from management import render
from management.api import ManagementView, list_response, page, parse_id
from management.models import AdminKey
from management.serializers import TopUpCreate
from management.services import admin_key_revoke


class Wallet(ManagementView):
    roles = {"GET": SEE_BILLING}

    def get(self, request: Request) -> Response:
        money = billing_selectors.wallet_summary(organization_id=self.ctx.organization.pk)
        return Response(
            {
                "object": "organization.wallet",
                "balance_usd": nanos_to_usd_str(money.balance_nanos),
                "held_usd": nanos_to_usd_str(money.held_nanos),
                "available_usd": nanos_to_usd_str(money.available_nanos),
                "open_holds": money.open_holds,
            }
        )


class Ledger(ManagementView):
    roles = {"GET": SEE_BILLING}

    def get(self, request: Request) -> Response:
        """Ledger entries, newest first (``after``: the last ``ledger_…`` id seen)."""
        qs = LedgerEntry.objects.filter(wallet__organization=self.ctx.organization)
        return page(request, qs, prefix="ledger_", render=render.ledger_entry, newest_first=True)


class TopUps(ManagementView):
    roles = {"POST": SEE_BILLING}
    bodies = {"POST": TopUpCreate}

    def post(self, request: Request) -> Response:
        """Start a Stripe Checkout top-up; the wallet is credited when Stripe says it is paid."""
        body = TopUpCreate(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if not topups.available():
            raise ServiceUnavailable(topups.UNAVAILABLE, code="payments_unavailable")
        started = topups.checkout_start(
            organization=self.ctx.organization,
            amount_nanos=data["amount_usd"],
            user=self.ctx.admin_key.created_by,  # type: ignore[arg-type]
            success_url=data["success_url"],
            cancel_url=data["cancel_url"],
        )
        if started.error == topups.UNAVAILABLE:
            raise ServiceUnavailable(started.error, code="payments_unavailable")
        if started.error:
            raise InvalidRequest(started.error, param="amount_usd")
        return Response(
            {"object": "organization.wallet.topup", "checkout_url": started.url}, status=201
        )


class Models(ManagementView):
    def get(self, request: Request) -> Response:
        """The public catalog: routable models and their lowest price per 1M tokens (USD)."""
        data = [
            {
                "object": "model",
                "id": m.model_id,
                "owned_by": "infrai",
                "vendors": list(m.vendors),
                "capabilities": list(m.capabilities),
                "context_window": m.context_window,
                "pricing": {
                    "input_per_mtok_usd": render.usd(m.input_per_mtok_nanos),
                    "output_per_mtok_usd": render.usd(m.output_per_mtok_nanos),
                },
            }
            for m in model_prices()
        ]
        return list_response(data)


class AdminKeyList(ManagementView):
    roles = {"GET": MANAGE_ORG}

    def get(self, request: Request) -> Response:
        """The organization's admin keys with their audit trail (created/revoked/last used)."""
        qs = AdminKey.objects.filter(organization=self.ctx.organization)
        return page(request, qs, prefix="admin_key_", render=render.admin_key)


class AdminKeyDetail(ManagementView):
    roles = {"GET": MANAGE_ORG, "DELETE": MANAGE_ORG}

    def key(self, key_id: str) -> AdminKey:
        found = AdminKey.objects.filter(
            organization=self.ctx.organization, pk=parse_id(key_id, "admin_key_")
        ).first()
        if found is None:
            raise NotFound("No such admin key.")
        return found

    def get(self, request: Request, key_id: str) -> Response:
        return Response(render.admin_key(self.key(key_id)))

    def delete(self, request: Request, key_id: str) -> Response:
        """Revoke an admin key (this one included); effective on its next call."""
        key = admin_key_revoke(admin_key=self.key(key_id), revoked_by=self.ctx.admin_key.created_by)
        return Response(
            {
                "object": "organization.admin_api_key.deleted",
                "id": f"admin_key_{key.pk}",
                "deleted": True,
            }
        )
