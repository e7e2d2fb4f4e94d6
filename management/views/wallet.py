"""The wallet, its ledger and Checkout top-ups: ``/v1/organization/wallet[/…]``."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from billing import selectors as billing_selectors
from config.errors import InvalidRequest, ServiceUnavailable
from dashboard import topups
from dashboard.permissions import SEE_BILLING
from management import render
from management.api import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    ManagementView,
    int_param,
    list_response,
    parse_id,
)
from management.serializers import TopUpCreate
from money.usd import nanos_to_usd_str


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
        limit = int_param(request, "limit", default=DEFAULT_LIMIT, lo=1, hi=MAX_LIMIT)
        assert limit is not None
        after = request.query_params.get("after")
        rows = billing_selectors.ledger_page(
            organization_id=self.ctx.organization.pk,
            before_id=parse_id(after, "ledger_", param="after") if after else None,
            limit=limit + 1,
        )
        return list_response(
            [render.ledger_entry(e) for e in rows[:limit]], has_more=len(rows) > limit
        )


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
