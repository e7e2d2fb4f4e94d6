"""Billing fixtures: organizations with funded wallets, Stripe offline."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import stripe

from accounts.models import ApiKey, Organization, Project
from accounts.services import api_key_create, organization_create, project_create
from billing.services import hold_open
from billing.services.recharge import auto_recharge_configure
from billing.services.wallet import wallet_fund
from inference.models import RequestLog
from tests.live import free_port, wait_http

USD = 1_000_000_000


@dataclass
class Tenant:
    org: Organization
    project: Project
    key: ApiKey

    def hold_owner(self) -> dict[str, int]:
        """``hold_open``'s owner arguments for a call with this tenant's key."""
        return {
            "organization_id": self.org.pk,
            "project_id": self.project.pk,
            "api_key_id": self.key.pk,
        }


def open_hold(tenant: Tenant, request_id: str, amount_nanos: int, **options: Any) -> None:
    """``hold_open`` of ``amount_nanos`` for ``tenant``'s key; ``options`` go to ``hold_open`` as
    they are (``budget_nanos``, ``key_budget_nanos``, ``ttl_s``, another ``api_key_id``)."""
    owner: dict[str, Any] = {**tenant.hold_owner(), **options}
    hold_open(request_id=request_id, amount_nanos=amount_nanos, **owner)


def request_log(tenant: Tenant, request_id: str, cost_nanos: int) -> RequestLog:
    """An unsaved successful chat ``RequestLog`` of ``tenant``'s key that cost ``cost_nanos``."""
    return RequestLog(
        request_id=request_id,
        organization_id=tenant.org.pk,
        project_id=tenant.project.pk,
        api_key_id=tenant.key.pk,
        endpoint="chat",
        status="ok",
        http_status=200,
        cost_nanos=cost_nanos,
    )


@pytest.fixture
def make_tenant() -> Callable[..., Tenant]:
    """``make_tenant(balance_nanos=…, budget_nanos=…)``: org + project + key + funded wallet."""

    def make(*, balance_nanos: int = 0, budget_nanos: int | None = None) -> Tenant:
        org = organization_create(name=f"org-{secrets.token_hex(4)}")
        project = project_create(
            organization=org, name="default", monthly_budget_nanos=budget_nanos
        )
        key, _ = api_key_create(project=project)
        wallet_fund(
            organization=org,
            amount_nanos=balance_nanos,
            idempotency_key=f"test-credit:{secrets.token_hex(8)}",
        )
        return Tenant(org=org, project=project, key=key)

    return make


def arm_auto_recharge(tenant: Tenant, *, payment_method_id: str = "pm_card_visa") -> None:
    """Auto-recharge of $10 on ``payment_method_id`` whenever ``tenant``'s balance falls below
    $5 (localstripe's ``pm_card_chargeCustomerFail`` declines)."""
    auto_recharge_configure(
        organization=tenant.org,
        payment_method_id=payment_method_id,
        threshold_nanos=5 * USD,
        amount_nanos=10 * USD,
    )


# --- Stripe: localstripe in-process, hand-made signed events ----------------------------------

WEBHOOK_SECRET = "whsec_test_infrai_billing"


@pytest.fixture(scope="session")
def localstripe_url() -> Iterator[str]:
    """A ``localstripe`` server on 127.0.0.1, state in memory (its disk dump patched out)."""
    import asyncio

    import localstripe.resources
    import localstripe.server
    from aiohttp import web

    localstripe.resources.Store.dump_to_disk = lambda self: None  # type: ignore[method-assign]
    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(localstripe.server.app, access_log=None)

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        loop.run_forever()

    thread = threading.Thread(target=serve, name="localstripe", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/v1/customers")
    yield url
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)


@pytest.fixture
def stripe_settings(settings: Any, localstripe_url: str) -> Any:
    """Point the one Stripe module at localstripe and set the webhook secret."""
    settings.STRIPE_SECRET_KEY = "sk_test_infrai"
    settings.STRIPE_API_BASE = localstripe_url
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    return settings


def stripe_event(type_: str, obj: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
    """A hand-made Stripe event around ``obj``."""
    return {
        "id": event_id or f"evt_{secrets.token_hex(12)}",
        "object": "event",
        "type": type_,
        "created": int(time.time()),
        "livemode": False,
        "data": {"object": obj},
    }


def signed(
    event: dict[str, Any], *, secret: str = WEBHOOK_SECRET, age_s: int = 0
) -> tuple[bytes, str]:
    """The exact bytes and ``Stripe-Signature`` header Stripe would send (real scheme)."""
    payload = json.dumps(event)
    header = stripe.WebhookSignature.generate_signature_header(
        payload, secret, timestamp=int(time.time()) - age_s
    )
    return payload.encode(), header
