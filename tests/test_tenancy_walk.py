"""Tenancy walk (issue 12, Proof): one organization's session and key against every route, with
the other organization's slug and ids.

Two organizations, Alpha and Bravo, each with a member, a project, a key, a request-log row, a
ledger entry, an invitation and a wallet. Alpha's owner then walks

- every dashboard URL pattern (read from ``dashboard/urls.py``, so a new page is walked without
  editing this test — a new kind of URL parameter fails loudly until it is given a value here)
  and the billing pages, GET and POST: under Bravo's slug, and under Alpha's own slug with
  Bravo's ids. Every one answers 403 or 404, and nothing of Bravo changes;
- the dashboard's pages that take no ids under its own slug: 200 with its own data only;
- the live websocket of Bravo: refused;
- every management API pattern (``/v1/organization/…``) with Alpha's admin key and Bravo's ids;
- every ``/v1`` route with Alpha's key, Bravo's ids wherever a route or header takes one, and a
  deterministic request Bravo made first (the exact cache is per organization).

No body Alpha receives contains any of Bravo's distinctive names or ids.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.tokens import default_token_generator
from django.test import Client
from django.urls import URLPattern, URLResolver
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

import billing.urls
import dashboard.urls
import management.pages
from accounts.models import ApiKey, Invitation, Membership, Organization, Project, Role, User
from accounts.services import (
    api_key_create,
    invitation_create,
    membership_set,
    organization_create,
    project_create,
)
from batches.models import Batch, BatchStatus
from billing.models import EntryKind, LedgerEntry
from billing.services import wallet_credit
from config.asgi import inference_app
from inference.models import RequestLog, StoredResponse
from tests.dashboard.factories import request_log_row
from tests.dashboard.test_live import _connect
from tests.fakes.vendors import FakeVendor
from tests.inference.conftest import _fake_servers, fake_catalog, fakes  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery"


@dataclass
class Tenant:
    """One organization and everything of it the walk resolves ids from."""

    org: Organization
    owner: User
    member: User
    owner_membership: Membership
    member_membership: Membership
    project: Project
    key: ApiKey
    raw_key: str
    request_id: str
    invitation: Invitation
    invitation_token: str
    ledger_entry: LedgerEntry

    def markers(self) -> list[str]:
        """Strings that only this tenant's data contains (none of them is in the other's)."""
        return [
            self.org.name,
            self.org.slug,
            self.owner.email,
            self.member.email,
            self.project.name,
            self.key.name,
            self.key.prefix,
            self.raw_key,
            self.request_id,
            self.invitation.email,
            self.ledger_entry.description,
            "model-of-" + self.org.slug,
        ]


def tenant(tag: str) -> Tenant:
    """An organization whose every name carries ``tag`` (so a leak is easy to see)."""
    owner = User.objects.create_user(
        email=f"owner-{tag}@{tag}.example", password=PASSWORD, email_verified=True
    )
    member = User.objects.create_user(
        email=f"member-{tag}@{tag}.example", password=PASSWORD, email_verified=True
    )
    org = organization_create(name=f"{tag.title()} Quasar Holdings", owner=owner)
    member_membership = membership_set(organization=org, user=member, role=Role.MEMBER)
    project = project_create(organization=org, name=f"{tag}-orbital-project")
    key, raw = api_key_create(project=project, name=f"{tag}-launch-key")
    row = request_log_row(
        organization_id=org.pk,
        request_id=f"req_{tag}{'0' * (24 - len(tag))}",
        model="model-of-" + org.slug,
        api_key_id=key.pk,
        project_id=project.pk,
    )
    entry = wallet_credit(
        organization=org,
        amount_nanos=50 * 10**9,
        kind=EntryKind.CREDIT,
        idempotency_key=f"tenancy-walk:{tag}",
        description=f"{tag} ledger memo",
    )
    invitation, token = invitation_create(
        organization=org, email=f"invitee-{tag}@{tag}.example", role=Role.MEMBER, invited_by=owner
    )
    return Tenant(
        org=org,
        owner=owner,
        member=member,
        owner_membership=Membership.objects.get(organization=org, user=owner),
        member_membership=member_membership,
        project=project,
        key=key,
        raw_key=raw,
        request_id=row.request_id,
        invitation=invitation,
        invitation_token=token,
        ledger_entry=entry,
    )


@pytest.fixture
def tenants() -> tuple[Tenant, Tenant]:
    return tenant("alpha"), tenant("bravo")


def snapshot(t: Tenant) -> dict[str, Any]:
    """What the walk must not change of a tenant."""
    return {
        "org": Organization.objects.filter(pk=t.org.pk).values().get(),
        "memberships": sorted(
            Membership.objects.filter(organization=t.org).values_list("user_id", "role")
        ),
        "projects": sorted(Project.objects.filter(organization=t.org).values_list("pk", "name")),
        "keys": sorted(
            ApiKey.objects.filter(organization_id=t.org.pk).values_list("pk", "name", "revoked_at")
        ),
        "invitations": sorted(
            Invitation.objects.filter(organization=t.org).values_list(
                "pk", "email", "accepted_at", "revoked_at"
            )
        ),
        "ledger": sorted(
            LedgerEntry.objects.filter(wallet__organization=t.org).values_list("pk", "amount_nanos")
        ),
        "request_log": RequestLog.objects.filter(organization_id=t.org.pk).count(),
    }


# --- the URL patterns -------------------------------------------------------------------------
_PARAM = re.compile(r"<(?:(?P<converter>\w+):)?(?P<name>\w+)>")


@dataclass(frozen=True)
class Page:
    """One URL pattern of a URLconf, flattened (``route`` has Django's ``<conv:name>``)."""

    name: str
    route: str

    @property
    def params(self) -> list[str]:
        return [m["name"] for m in _PARAM.finditer(self.route)]

    def url(self, values: dict[str, str]) -> str:
        missing = [p for p in self.params if p not in values]
        assert not missing, f"{self.route}: give the walk a value for {missing}"
        return "/" + _PARAM.sub(lambda m: values[m["name"]], self.route)


def flatten(patterns: list[Any], prefix: str = "") -> Iterator[Page]:
    for entry in patterns:
        route = str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from flatten(entry.url_patterns, prefix + route)
        else:
            assert isinstance(entry, URLPattern)
            assert not route.startswith("^"), f"a regex URL pattern: {route}"
            yield Page(entry.name or route, prefix + route)


def dashboard_pages() -> list[Page]:
    """Every page under the ``dashboard`` namespace, the management app's admin-key page
    included (config.urls serves both lists there)."""
    return list(flatten([*dashboard.urls.urlpatterns, *management.pages.urlpatterns]))


def billing_pages() -> list[Page]:
    return [Page(p.name, "billing/" + p.route) for p in flatten(billing.urls.urlpatterns)]


def other_ids(victim: Tenant, *, slug: str) -> dict[str, str]:
    """Every URL parameter the dashboard and billing take, resolved to ``victim``'s ids."""
    return {
        "slug": slug,
        "org_slug": victim.org.slug,
        "membership_id": str(victim.member_membership.pk),
        "invitation_id": str(victim.invitation.pk),
        "project_id": str(victim.project.pk),
        "key_id": str(victim.key.pk),
        "request_id": victim.request_id,
        "entry_id": str(victim.ledger_entry.pk),
        # A token is a secret, not an id: the victim's invitation token is used below only to
        # prove that holding it does not let the wrong user in; the others are forged.
        "token": "forged-token",
        "uidb64": urlsafe_base64_encode(force_bytes(victim.owner.pk)),
    }


# Fields a POST to any of the pages might read; values that would change the victim's data.
FORM = {
    "name": "hijacked",
    "role": Role.OWNER.value,
    "email": "attacker@alpha.example",
    "amount_usd": "10",
    "enabled": "on",
    "threshold_usd": "5",
    "amount": "10",
    "monthly_budget_usd": "1",
    "project": "",
    "new_password1": "hijacked-password-123",
    "new_password2": "hijacked-password-123",
}


def assert_no_leak(response: Any, victim: Tenant, where: str, *, sent: str = "") -> None:
    """No marker of ``victim`` in the body, except one the caller ``sent`` (an echo of the
    request, e.g. an unknown model's name in a 404, is not the victim's data)."""
    streaming = getattr(response, "streaming", False)  # Django streams a CSV export
    raw = b"".join(response.streaming_content) if streaming else response.content
    body = raw.decode("utf-8", "replace")
    leaked = [m for m in victim.markers() if m and m in body and m not in sent]
    assert not leaked, f"{where} shows the other tenant's {leaked}"


def test_the_walk_covers_every_dashboard_and_billing_pattern() -> None:
    """Every pattern has a value for each of its parameters (new ones fail here first)."""
    pages = dashboard_pages() + billing_pages()
    assert len(pages) >= 30
    victim_values = {
        "slug",
        "org_slug",
        "membership_id",
        "invitation_id",
        "project_id",
        "key_id",
        "request_id",
        "entry_id",
        "token",
        "uidb64",
    }
    for page in pages:
        assert set(page.params) <= victim_values, page


@pytest.fixture
def alpha_client(tenants: tuple[Tenant, Tenant]) -> Client:
    """A browser signed in as the owner of ``alpha``, the organization that walks."""
    client = Client()
    client.force_login(tenants[0].owner)
    return client


def test_another_organizations_pages_and_ids_are_404_or_403(
    tenants: tuple[Tenant, Tenant], alpha_client: Client
) -> None:
    alpha, bravo = tenants
    before = snapshot(bravo)
    walked = 0
    for page in dashboard_pages() + billing_pages():
        if (
            "slug" not in page.params
            and "org_slug" not in page.params
            and not any(
                p in page.params for p in ("membership_id", "invitation_id", "project_id", "key_id")
            )
        ):
            continue  # not an organization's page: walked in the test below
        slugs = [bravo.org.slug]
        if any(p.endswith("_id") for p in page.params) and "slug" in page.params:
            slugs.append(alpha.org.slug)  # our own organization, the other's ids
        for slug in slugs:
            url = page.url(other_ids(bravo, slug=slug))
            for method in ("get", "post"):
                response = getattr(alpha_client, method)(url, FORM if method == "post" else None)
                walked += 1
                where = f"{method.upper()} {url} ({page.name})"
                # A POST-only action answers a GET with 405 before looking at any id.
                allowed = (403, 404, 405) if method == "get" else (403, 404)
                assert response.status_code in allowed, f"{where} answered {response.status_code}"
                assert_no_leak(response, bravo, where)
    print(f"tenancy walk: {walked} requests with the other organization's slug or ids")
    assert walked >= 40
    assert snapshot(bravo) == before


def test_pages_without_an_organization_show_only_the_callers_data(
    tenants: tuple[Tenant, Tenant], alpha_client: Client
) -> None:
    alpha, bravo = tenants
    before = snapshot(bravo)
    values = other_ids(bravo, slug=alpha.org.slug)
    for page in dashboard_pages():
        if any(p.endswith("_id") for p in page.params):
            continue  # walked with the other's ids above
        url = page.url(values)
        if page.name == "logout":
            continue  # would end the walk's session
        response = alpha_client.get(url)
        where = f"GET {url} ({page.name})"
        assert response.status_code < 500, f"{where} answered {response.status_code}"
        if page.name == "invitation_accept":
            assert response.status_code == 404  # a forged token
        assert_no_leak(response, bravo, where)
        if "slug" in page.params:
            # Our own organization's pages work (405: a POST-only action).
            assert response.status_code in (200, 302, 405), (
                f"{where} answered {response.status_code}"
            )
    # The switcher never switches into an organization the user is not a member of.
    response = alpha_client.get("/orgs/switch/", {"org": bravo.org.slug}, follow=True)
    assert response.status_code == 404
    assert_no_leak(response, bravo, "the organization switcher")
    # Holding another organization's invitation link does not let the wrong user in.
    response = alpha_client.post(f"/invite/{bravo.invitation_token}/")
    assert response.status_code < 500
    assert not Membership.objects.filter(organization=bravo.org, user=alpha.owner).exists()
    # A password-reset link for the other tenant's owner with a forged token changes nothing.
    response = alpha_client.post(
        f"/password-reset/{values['uidb64']}/forged-token/",
        {"new_password1": "hijacked-password-123", "new_password2": "hijacked-password-123"},
    )
    assert response.status_code < 500
    bravo.owner.refresh_from_db()
    assert bravo.owner.check_password(PASSWORD)
    assert default_token_generator.check_token(bravo.owner, "forged-token") is False
    assert snapshot(bravo) == before


def test_the_live_websocket_of_another_organization_is_refused(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, bravo = tenants

    async def connect(slug: str) -> bool:
        ws, connected = await _connect(alpha.owner, slug)
        await ws.disconnect()
        return connected

    assert async_to_sync(connect)(alpha.org.slug) is True
    assert async_to_sync(connect)(bravo.org.slug) is False


# --- /v1 ------------------------------------------------------------------------------------
def v1_routes() -> list[tuple[str, str]]:
    """(method, path template) of every registered ``/v1`` route."""
    out = []
    for route in inference_app.routes:
        template = route.pattern.pattern.removeprefix("^").removesuffix("$")
        template = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", template)
        out.extend((method, template) for method in route.methods)
    return sorted(out)


def test_every_v1_route_with_the_other_organizations_ids_shows_none_of_its_data(
    live_url: str,
    tenants: tuple[Tenant, Tenant],
    fake_catalog: dict[str, FakeVendor],  # noqa: F811
) -> None:
    alpha, bravo = tenants
    base = live_url
    # Bravo asks a deterministic question first: an exact-cache entry of Bravo's.
    question = {
        "model": "test-small",
        "temperature": 0,
        "messages": [{"role": "user", "content": "tenancy walk question"}],
    }
    first = httpx.post(
        base + "/v1/chat/completions",
        json=question,
        headers={"authorization": f"Bearer {bravo.raw_key}"},
        timeout=30,
    )
    assert first.status_code == 200, first.text
    bravo_answer = first.json()
    before = snapshot(bravo)
    vector_ids = bravo_vectors(bravo)
    # Ids of Bravo wherever a /v1 route or the OpenAI SDKs' headers take one.
    values = {
        "model": f"{bravo.org.slug}/{bravo.project.pk}",
        "token": bravo.request_id,
        "response_id": bravo_response(bravo),
        "batch_id": bravo_batch(bravo),
        **vector_ids,
    }
    headers = {
        "authorization": f"Bearer {alpha.raw_key}",
        "openai-organization": bravo.org.slug,
        "openai-project": str(bravo.project.pk),
    }
    body = {
        "model": "test-small",
        "messages": [{"role": "user", "content": bravo.request_id}],
        "input": bravo.request_id,
        "prompt": bravo.request_id,
        "voice": "alloy",
        "user": bravo.request_id,
    }
    routes = v1_routes()
    assert len(routes) >= 12
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        for method, template in routes:
            path = re.sub(r"\{(\w+)\}", lambda m: values[m[1]], template)
            if method == "POST":
                # Each endpoint's own fields only (an unknown field is a 400 before any work).
                response = client.post(path, json=body)
                response_own = client.post(path, json=_own_fields(path, body))
                responses = [response, response_own]
            else:
                responses = [client.request(method, path)]
            for response in responses:
                where = f"{method} {path}"
                assert response.status_code < 500 or response.status_code == 503, (
                    f"{where} answered {response.status_code}: {response.text[:300]}"
                )
                request = response.request
                sent = f"{request.url} {request.headers} {request.content.decode()}"
                assert_no_leak(response, bravo, where, sent=sent)
        # Alpha asks Bravo's deterministic question: answered for Alpha, never from Bravo's
        # cache entry.
        second = client.post("/v1/chat/completions", json=question)
    assert second.status_code == 200, second.text
    answer = second.json()
    assert answer["infrai"]["cache"] is False
    assert answer["id"] != bravo_answer["id"]
    assert answer["infrai"]["request_id"] != bravo_answer["infrai"]["request_id"]
    assert logged_soon(answer["infrai"]["request_id"], alpha.org.pk)
    assert snapshot(bravo) == before
    assert bravo_vectors_intact(vector_ids)
    assert StoredResponse.objects.get(response_id=values["response_id"]).status == "completed"
    assert Batch.objects.get(public_id=values["batch_id"]).status == BatchStatus.VALIDATING
    # Alpha's key never reads or writes Bravo's rows: Bravo's request log holds only its own.
    assert set(
        RequestLog.objects.filter(organization_id=bravo.org.pk).values_list("api_key_id", flat=True)
    ) == {bravo.key.pk}


def bravo_vectors(t: Tenant) -> dict[str, str]:
    """A collection (with a vector), a vector store and a file of ``t``: the values of the
    vector store's path parameters."""
    from tests.vectors.conftest import reseed_vector_price
    from vectors.files import file_create
    from vectors.models import VectorPrice
    from vectors.services import collection_create, vectors_write
    from vectors.store import Item

    if not VectorPrice.objects.exists():
        reseed_vector_price()  # a stored file is metered from its upload on
    ids = {"organization_id": t.org.pk, "project_id": t.project.pk}
    collection = collection_create(**ids, name=f"vectors-of-{t.org.slug}")
    vectors_write(collection=collection, items=[Item(id=f"vec-of-{t.org.slug}", vector=[1.0])])
    store = collection_create(**ids, name=None, title=f"store-of-{t.org.slug}")
    stored = file_create(**ids, filename="f.txt", purpose="assistants", content=b"x")
    return {
        "name": collection.name,
        "vector_store_id": store.public_id,
        "file_id": stored.public_id,
    }


def bravo_response(t: Tenant) -> str:
    """A stored Responses API response of ``t`` (its id: the ``response_id`` path value)."""
    response_id = "resp_" + t.request_id.removeprefix("req_")
    output = [{"type": "message", "role": "assistant", "content": [{"text": t.request_id}]}]
    StoredResponse.objects.create(
        response_id=response_id,
        request_id=t.request_id,
        organization_id=t.org.pk,
        project_id=t.project.pk,
        api_key_id=t.key.pk,
        status="completed",
        input_items=[{"type": "message", "id": "msg_1", "role": "user", "content": t.org.slug}],
        body={"id": response_id, "object": "response", "status": "completed", "output": output},
    )
    return response_id


def bravo_batch(t: Tenant) -> str:
    """A batch of ``t`` (its id: the ``batch_id`` path value), never run."""
    from batches.services import NewLine, batch_create, new_batch_id

    body = {"model": "test-small", "messages": [{"role": "user", "content": t.request_id}]}
    line = NewLine(number=1, custom_id=t.request_id, body=body, reserved_nanos=0)
    return batch_create(
        public_id=new_batch_id(),
        organization_id=t.org.pk,
        project_id=t.project.pk,
        api_key_id=t.key.pk,
        endpoint="/v1/chat/completions",
        input_file_id="file-" + t.request_id,
        metadata=None,
        lines=[line],
    ).public_id


def bravo_vectors_intact(values: dict[str, str]) -> bool:
    """Whether :func:`bravo_vectors`' rows are all still there, unchanged."""
    from vectors.models import Collection, StoredFile, VectorItem

    return (
        VectorItem.objects.filter(collection__name=values["name"]).count() == 1
        and Collection.objects.filter(public_id=values["vector_store_id"]).exists()
        and StoredFile.objects.filter(public_id=values["file_id"]).exists()
    )


_OWN_FIELDS = {
    "/v1/chat/completions": {"model", "messages", "user"},
    "/v1/responses": {"model", "input", "user"},
    "/v1/embeddings": {"model", "input", "user"},
    "/v1/moderations": {"model", "input"},
    "/v1/images/generations": {"model", "prompt", "user"},
    "/v1/audio/speech": {"model", "input", "voice"},
    "/v1/audio/transcriptions": {"model"},
}


def _own_fields(path: str, body: dict[str, Any]) -> dict[str, Any]:
    fields = _OWN_FIELDS.get(path, set())
    return {k: v for k, v in body.items() if k in fields}


def logged_soon(request_id: str, organization_id: int, seconds: float = 10.0) -> bool:
    """Whether the request-log row (written off the response path) appears in time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if RequestLog.objects.filter(
            request_id=request_id, organization_id=organization_id
        ).exists():
            return True
        time.sleep(0.05)
    return False


# --- the management API (/v1/organization/…) --------------------------------------------------
def test_the_management_api_with_the_other_organizations_ids_is_404_or_403(
    tenants: tuple[Tenant, Tenant],
) -> None:
    """Alpha's admin key against every management URL pattern with Bravo's (prefixed) ids,
    GET, POST and DELETE: 403/404 (405 where the method does not exist), nothing of Bravo in
    any body, nothing of Bravo changed; the patterns without ids show Alpha's data only."""
    import management.resource_urls
    from management.services import admin_key_create

    alpha, bravo = tenants
    _, alpha_admin = admin_key_create(organization=alpha.org, created_by=alpha.owner)
    bravo_admin, _ = admin_key_create(organization=bravo.org, created_by=bravo.owner)
    before = snapshot(bravo)
    values = {
        "project_id": f"proj_{bravo.project.pk}",
        "key_id": f"key_{bravo.key.pk}",
        "user_id": f"user_{bravo.member.pk}",
        "invite_id": f"invite_{bravo.invitation.pk}",
        "request_id": bravo.request_id,
    }
    client = Client(HTTP_AUTHORIZATION=f"Bearer {alpha_admin}")
    walked = 0
    for page in flatten(management.resource_urls.urlpatterns):
        page_values = dict(values)
        if page.route.startswith("admin_api_keys/"):
            page_values["key_id"] = f"admin_key_{bravo_admin.pk}"
        url = "/v1/organization" + page.url(page_values)
        if not page.params:
            # 400: a report that needs its query (start_time); 405: a POST-only action.
            response = client.get(url)
            assert response.status_code in (200, 400, 405), (
                f"GET {url} answered {response.status_code}"
            )
            assert_no_leak(response, bravo, f"GET {url}")
            continue
        for method in ("get", "post", "delete"):
            response = getattr(client, method)(
                url, {"name": "hijacked", "role": "owner"}, content_type="application/json"
            )
            walked += 1
            where = f"{method.upper()} {url}"
            assert response.status_code in (403, 404, 405), (
                f"{where} answered {response.status_code}"
            )
            assert_no_leak(response, bravo, where, sent=url)
    print(f"management walk: {walked} requests with the other organization's ids")
    assert walked >= 20
    assert snapshot(bravo) == before
    bravo_admin.refresh_from_db()
    assert bravo_admin.revoked_at is None
