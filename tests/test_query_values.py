"""Hostile query values against every route that reads a query string: never a 500.

A NUL (``%00``) or invalid Unicode in a query value is refused where the query string is parsed
(``infra.querystring``: the middleware in front of Django, the check in ``inference.http``) with
a 400 naming the parameter; every other hostile value (undecodable bytes, an encoded surrogate,
integers past 64 bits, very long values, repeated keys) must reach the view and be answered
below 500.

The sweep finds the parameters itself: each management API route (``management/resource_urls``)
and each dashboard and billing page (their URLconfs) is first fetched once with benign values
while every read of a ``QueryDict`` is recorded — the names a view reads are the ones it takes.
A new route or a new parameter is swept without editing this file. Then, per route and per name,
one request for each hostile value (the other names keep their benign values) and one with a NUL.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from django.http import HttpResponse, QueryDict
from django.test import Client, RequestFactory
from django.utils.datastructures import MultiValueDict

import management.resource_urls
from inference.models import RequestLog
from infra.querystring import QueryValueMiddleware, unstorable, unstorable_param
from management.models import AdminKey
from management.services import admin_key_create
from tests.test_tenancy_walk import (
    Page,
    Tenant,
    billing_pages,
    dashboard_pages,
    flatten,
    other_ids,
    tenant,
)

pytestmark = pytest.mark.django_db(transaction=True)

# Already percent-encoded: what a hostile client puts after ``name=``.
HOSTILE = {
    "undecodable bytes": "%ff%fe%80",
    "an encoded surrogate": "%ed%a0%80",
    "a stray percent": "%zz%",
    "a non-ASCII digit": "%C2%B2",  # "²".isdigit() is true, int("²") raises
    "an integer past 64 bits": "9" * 20,
    "5,000 digits": "9" * 5000,
    "a 20,000-character value": "x" * 20_000,
    "a 3,000-character non-ASCII value": quote("é" * 3000),
}
# Benign values for names a view needs to get past its first check (a usage page needs a start).
BENIGN = {"start_time": str(int(time.time()) - 86_400)}
# A name given to routes that read none: the refusal is in front of every route all the same.
ANY_NAME = "q"


@dataclass
class Route:
    """One URL the sweep calls with ``GET``: where, how to authenticate, what it reads."""

    label: str
    url: str
    api: bool  # the management API (OpenAI-shaped JSON errors) rather than a page
    names: list[str]


@contextmanager
def recorded_reads() -> Iterator[set[str]]:
    """The names asked of any ``QueryDict`` with ``get`` or ``getlist`` while inside: the
    parameters a view reads (DRF's ``query_params`` and forms bound to ``request.GET`` too).
    ``[]`` and ``in`` are left out: ``items()`` and the constructor use them for every key."""
    names: set[str] = set()
    originals = {attr: getattr(MultiValueDict, attr) for attr in ("get", "getlist")}

    def recording(original: Callable[..., Any]) -> Callable[..., Any]:
        def read(self: MultiValueDict[str, str], key: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(self, QueryDict) and isinstance(key, str):
                names.add(key)
            return original(self, key, *args, **kwargs)

        return read

    for attr, original in originals.items():
        setattr(MultiValueDict, attr, recording(original))
    try:
        yield names
    finally:
        for attr, original in originals.items():
            setattr(MultiValueDict, attr, original)


def management_urls(t: Tenant, admin_key: AdminKey) -> list[tuple[str, str]]:
    """Every management API pattern with ``t``'s own ids: (label, URL)."""
    ids = {
        "project_id": f"proj_{t.project.pk}",
        "user_id": f"user_{t.member.pk}",
        "invite_id": f"invite_{t.invitation.pk}",
        "request_id": t.request_id,
    }
    out = []
    for page in flatten(management.resource_urls.urlpatterns):
        admin = "admin_api_keys" in page.route
        key_id = f"admin_key_{admin_key.pk}" if admin else f"key_{t.key.pk}"
        out.append((page.route, "/v1/organization" + page.url({**ids, "key_id": key_id})))
    return out


def query(values: Mapping[str, str | list[str]]) -> str:
    """A query string of already-encoded values (a list repeats the key)."""
    parts = []
    for name, value in values.items():
        for one in value if isinstance(value, list) else [value]:
            parts.append(f"{quote(name)}={one}")
    return "&".join(parts)


@dataclass
class Alpha:
    """The organization that sweeps: its owner's browser, its admin key and its clients."""

    tenant: Tenant
    admin_key: AdminKey
    raw_admin_key: str
    browser: Client
    api: Client


@pytest.fixture
def alpha() -> Alpha:
    t = tenant("alpha")
    # The factory's row has no routing, which request_detail.html cannot render (a 500 that has
    # nothing to do with query strings; reported separately).
    RequestLog.objects.filter(request_id=t.request_id).update(routing={"mode": "cheapest"})
    admin_key, raw = admin_key_create(organization=t.org, created_by=t.owner, name="sweep")
    AdminKey.objects.filter(pk=admin_key.pk).update(requests_per_minute=1_000_000)
    browser = Client(raise_request_exception=False)
    browser.force_login(t.owner)
    api = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {raw}")
    return Alpha(t, admin_key, raw, browser, api)


@pytest.fixture
def routes(alpha: Alpha) -> list[Route]:
    """Every management API route and dashboard or billing page, with the names it reads."""
    api_urls = management_urls(alpha.tenant, alpha.admin_key)
    candidates = [(label, url, True) for label, url in api_urls]
    values = other_ids(alpha.tenant, slug=alpha.tenant.org.slug)
    pages: list[Page] = dashboard_pages() + billing_pages()
    candidates += [(page.name, page.url(values), False) for page in pages]
    out = []
    for label, url, is_api in candidates:
        with recorded_reads() as names:
            response = (alpha.api if is_api else alpha.browser).get(f"{url}?{query(BENIGN)}")
        assert response.status_code < 500, f"GET {url} answered {response.status_code}"
        out.append(Route(label, url, is_api, sorted(names)))
    return out


def assert_refused(response: HttpResponse, route: Route, name: str) -> None:
    where = f"GET {route.url} with a NUL in {name!r}"
    assert response.status_code == 400, f"{where} answered {response.status_code}"
    if route.api:
        error = response.json()["error"]
        assert error["param"] == name, where
        assert error["type"] == "invalid_request_error", where
    else:
        assert f"<code data-param>{name}</code>".encode() in response.content, where


def swept_names(routes: list[Route]) -> dict[int, list[str]]:
    """The names to sweep on each route (by index): a name that every route of a stack reads
    (DRF's ``format``) is common code, swept on the first route only; a route that reads
    nothing gets :data:`ANY_NAME` (for the NUL check alone)."""
    out: dict[int, list[str]] = {}
    for api in (True, False):
        stack = [i for i, r in enumerate(routes) if r.api == api]
        common = set.intersection(*(set(routes[i].names) for i in stack))
        for n, i in enumerate(stack):
            names = [name for name in routes[i].names if n == 0 or name not in common]
            out[i] = names or [ANY_NAME]
    return out


def test_no_query_value_is_a_500_and_a_nul_is_a_400_naming_its_parameter(
    alpha: Alpha, routes: list[Route]
) -> None:
    found = {(r.label, n) for r in routes for n in r.names}
    # The walk found what the views read (a recorder that saw nothing would prove nothing).
    assert {("requests", "after"), ("requests", "model"), ("request_log", "before")} <= found
    assert ("org_switch", "org") in found and ("usage/completions", "group_by") in found
    sent = 0
    failures = []
    for i, names in swept_names(routes).items():
        route = routes[i]
        client = alpha.api if route.api else alpha.browser
        for name in names:
            response = client.get(f"{route.url}?{query({**BENIGN, name: 'a%00b'})}")
            assert_refused(response, route, name)
            sent += 1
            if name == ANY_NAME:
                continue
            for kind, value in HOSTILE.items():
                # The key twice: ``get`` takes the hostile last value, ``getlist`` both.
                case = {**BENIGN, name: [BENIGN.get(name, "1"), value]}
                response = client.get(f"{route.url}?{query(case)}")
                sent += 1
                if response.status_code >= 500:
                    failures.append(f"GET {route.url} {name}={kind}: {response.status_code}")
    print(f"query-value sweep: {len(routes)} routes, {len(found)} parameters, {sent} requests")
    assert not failures, "\n".join(failures)


def test_a_nul_anywhere_is_refused_on_every_stack(live_url: str, alpha: Alpha) -> None:
    """Through the real server: ``/v1`` (its own parser), the management API and a dashboard
    page (Django's); the name itself may carry the NUL."""
    key = f"Bearer {alpha.raw_admin_key}"
    with httpx.Client(base_url=live_url, timeout=30) as http:
        v1 = http.get("/v1/models?capability=chat&vendor=a%00b")
        assert v1.status_code == 400
        assert v1.json()["error"]["param"] == "vendor"
        listed = http.get("/v1/organization/requests?after=req_%00", headers={"authorization": key})
        assert listed.status_code == 400
        assert listed.json()["error"]["param"] == "after"
        named = http.get("/v1/organization/requests?mo%00del=x", headers={"authorization": key})
        assert named.status_code == 400
        assert named.json()["error"]["param"] == "mo\\x00del"
        page = http.get("/login/?next=%00")
        assert page.status_code == 400
        assert b"<code data-param>next</code>" in page.content
        # Signed in: the page shows the member (the session read off the event loop).
        session = {"sessionid": alpha.browser.cookies["sessionid"].value}
        usage = http.get(f"/o/{alpha.tenant.org.slug}/usage/?end=%00", cookies=session)
        assert usage.status_code == 400
        assert b"<code data-param>end</code>" in usage.content
        assert alpha.tenant.owner.email.encode() in usage.content
    # A raw (not percent-encoded) 0xff or NUL never reaches the app: the HTTP parser refuses it.
    for raw in (b"/v1/organization/requests?model=\xff", b"/v1/models?vendor=\x00"):
        assert _raw_get(live_url, raw, key) == 400


def _raw_get(base: str, target: bytes, authorization: str) -> int:
    """The status of a GET whose request target is sent as the bytes given (no client quoting)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"GET "
            + target
            + b" HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: "
            + authorization.encode()
            + b"\r\nconnection: close\r\n\r\n"
        )
        head = sock.recv(65536)
    return int(head.split(b" ", 2)[1])


def test_a_surrogate_or_nul_in_a_name_or_value_is_unstorable() -> None:
    assert unstorable("a\x00") and unstorable("\ud800") and unstorable("x\udcff")
    assert not unstorable("plain") and not unstorable("é\ufffd😀")
    assert unstorable_param([("ok", ["1"]), ("bad", ["1", "\ud83d"])]) == "bad"
    assert unstorable_param([("n\x00", ["1"])]) == "n\\x00"
    assert unstorable_param([("é\udc80", ["1"])]) == "é\\udc80"
    assert unstorable_param([("ok", ["é"])]) is None


def test_the_middleware_refuses_a_lone_surrogate_that_reached_the_query_dict() -> None:
    """A server that hands Django a query string with a surrogate (percent-decoding never makes
    one; a WSGI server decoding with ``surrogateescape`` would): 400 naming it, view not run."""
    called = []

    def view(request: Any) -> HttpResponse:
        called.append(request)
        return HttpResponse("ran")

    middleware = QueryValueMiddleware(view)
    request = RequestFactory().get("/v1/organization/requests?limit=2&model=x")
    request.GET = QueryDict("limit=2&model=\udcff")
    response = middleware(request)
    assert response.status_code == 400
    assert json.loads(response.content)["error"]["param"] == "model"
    page = RequestFactory().get("/o/acme/usage/?before=x")
    page.GET = QueryDict("before=\ud800")
    assert b"<code data-param>before</code>" in middleware(page).content
    assert not called
    fine = RequestFactory().get("/o/acme/usage/?before=%ff")
    assert middleware(fine).content == b"ran"
