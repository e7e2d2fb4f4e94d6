"""Reads from a streaming replica (:mod:`infra.db_router`), proved against a real one.

A private PostgreSQL 16 primary and its ``pg_basebackup -R`` standby (:mod:`tests.pg_pair`: the
suite's own database cannot be replicated), and the production web process
(``python -m config.server``) started twice over them with ``DATABASE_REPLICA_URL`` set:

- ``site``: the replica is used up to 30 s behind and measured every 30 s, so a replica that
  stops is found by a read that fails on it (the middleware then answers that GET again from
  the primary); read-your-writes lasts 60 s;
- ``strict``: the replica is used up to 1 s behind, measured every 0.1 s.

Where a read went is told by what it returns: with the replica's replay paused, a change
written on the primary behind the app's back is missing from a page read on the replica and
present on one read from the primary. The tenant (user, organization, credit, API key, admin
keys, the catalog pointed at a fake vendor) is made on the primary by the app's own services
and commands, in a ``manage.py shell``. Dashboard clients sign in through the login page.

The tests at the end check in process, without a database, the router's decisions the live
ones do not reach: which alias each kind of request and model reads, a read in a transaction,
a Redis that cannot answer, a measurement that does not hold a request up.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest
import redis
from django.contrib.sessions.models import Session
from django.db import connections
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from accounts.models import Membership, Project, User
from inference.models import RequestLog
from infra import db_router
from infra.db_router import PRIMARY, REPLICA, ReplicaReadsMiddleware, ReplicaRouter, ReplicaState
from management.models import AdminKey
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering
from tests.fakes.vendors import FakeVendor
from tests.live import ROOT, server_process, wait_for
from tests.ops.conftest import Samples, parse_metrics
from tests.pg_pair import PgPair, pg_pair

# A database of the suite's Redis that no other test uses (the suite's fixtures flush theirs),
# and a key prefix of this run's own.
REDIS_DB = 12
PREFIX = f"infrai-replica-test-{os.getpid()}"
PASSWORD = "replica-test-password-0123"
METRICS_TOKEN = "replica-test-metrics-token"
ORG = "replica-co"
HI = [{"role": "user", "content": "hello there"}]
CAUGHT_UP = {"check": "ok", "lag_s": 0.0, "lag_bytes": 0, "reads": "replica"}


@dataclass(frozen=True)
class Tenant:
    email: str
    api_key: str
    reader_admin_key: str  # never writes
    writer_admin_key: str
    doomed_admin_key: str  # revoked by a test
    project_id: int


@dataclass(frozen=True)
class Site:
    """One web process over the pair."""

    url: str
    log: Path

    def replica(self) -> dict[str, Any]:
        """``/readyz``'s ``details.replica`` (measured now), after checking that the process is
        ready whatever the replica's state and that ``checks.replica`` says the same."""
        response = httpx.get(self.url + "/readyz", timeout=30)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["status"] == "ready"
        details: dict[str, Any] = body["details"]["replica"]
        assert body["checks"]["replica"] == details["check"]
        return details

    def metrics(self) -> Samples:
        auth = {"authorization": f"Bearer {METRICS_TOKEN}"}
        response = httpx.get(self.url + "/metrics", headers=auth, timeout=30)
        assert response.status_code == 200, response.text
        return parse_metrics(response.text)

    def signed_in(self, tenant: Tenant) -> httpx.Client:
        """A browser signed in to the dashboard through the login page (a session of its
        own); the caller closes it."""
        client = httpx.Client(base_url=self.url, timeout=60)
        assert client.get("/login/").status_code == 200
        response = client.post(
            "/login/",
            data={
                "username": tenant.email,
                "password": PASSWORD,
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
            },
        )
        assert response.status_code == 302, response.text[-2000:]
        return client

    def admin(self, key: str) -> httpx.Client:
        """A management API client with the admin key ``key``."""
        return httpx.Client(
            base_url=self.url + "/v1/organization",
            headers={"authorization": f"Bearer {key}"},
            timeout=60,
        )

    def sdk(self, tenant: Tenant) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=tenant.api_key, max_retries=0)


@dataclass(frozen=True)
class World:
    pair: PgPair
    tenant: Tenant
    site: Site
    strict: Site


# --- the pair, the tenant, the web processes ----------------------------------------------------


def _redis_url() -> str:
    return urlsplit(os.environ["REDIS_URL"])._replace(path=f"/{REDIS_DB}").geturl()


def _env(pair: PgPair) -> dict[str, str]:
    """What every process over the pair shares."""
    return {
        "DATABASE_URL": pair.primary.url,
        "REDIS_URL": _redis_url(),
        "INFRAI_CACHE_PREFIX": PREFIX,
        "INFRAI_METRICS_TOKEN": METRICS_TOKEN,
    }


def _manage(pair: PgPair, *args: str) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS`` on the primary alone (test settings, no replica)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_REPLICA_URL": "",
        **_env(pair),
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


# Run by `manage.py shell -c` after the constants it names (CATALOG, ORG, EMAIL, PASSWORD).
_TENANT = """
import io, json
from django.core.management import call_command
from accounts.roles import Role
from accounts.selectors import organization_get_by_slug, project_get_by_name
from accounts.services import membership_set, user_create, user_mark_email_verified
from catalog.models import Vendor
from management.services import admin_key_create

call_command("catalog", "load", CATALOG, verbosity=0)
Vendor.objects.exclude(name="primary").update(enabled=False)
out = io.StringIO()
call_command("issue_key", org=ORG, project="default", credit_usd="5", stdout=out)
org = organization_get_by_slug(slug=ORG)
user = user_mark_email_verified(user=user_create(email=EMAIL, password=PASSWORD))
membership_set(organization=org, user=user, role=Role.OWNER)
admin = {
    name: admin_key_create(organization=org, created_by=user, name=name)[1]
    for name in ("reader", "writer", "doomed")
}
print(json.dumps({
    "email": EMAIL,
    "api_key": out.getvalue().strip().splitlines()[-1],
    "reader_admin_key": admin["reader"],
    "writer_admin_key": admin["writer"],
    "doomed_admin_key": admin["doomed"],
    "project_id": project_get_by_name(organization=org, name="default").pk,
}))
"""


def _make_tenant(pair: PgPair, fake: FakeVendor, folder: Path) -> Tenant:
    catalog = folder / "catalog.json"
    document = {
        "vendors": [catalog_vendor("primary", base_url=fake.url, verified_models=fake.models)],
        "models": [
            catalog_model(
                "test-large",
                quality_tier=9,
                capabilities=["chat"],
                offerings=[offering("primary", "up-large", PRICE)],
            )
        ],
    }
    catalog.write_text(json.dumps(document))
    constants = (
        f"CATALOG = {str(catalog)!r}\nORG = {ORG!r}\n"
        f"EMAIL = 'owner@replica.example'\nPASSWORD = {PASSWORD!r}\n"
    )
    done = _manage(pair, "shell", "-c", constants + _TENANT)
    assert done.returncode == 0, done.stderr[-3000:]
    return Tenant(**json.loads(done.stdout.strip().splitlines()[-1]))


def _start_web(pair: PgPair, log: Path, **settings: str) -> tuple[subprocess.Popen[bytes], Site]:
    """``python -m config.server`` on the pair (primary and replica), its output to ``log``."""
    with log.open("wb") as sink:
        proc, url = server_process(
            output=sink, **_env(pair), DATABASE_REPLICA_URL=pair.replica.url, **settings
        )
    return proc, Site(url, log)


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to every process at once, then wait for each (killed after 30 s)."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _forget_redis_keys() -> None:
    """This run's keys, and the catalog version the pair's migration set (default prefix)."""
    client = redis.Redis.from_url(_redis_url())
    for pattern in (PREFIX + "*", "infrai:*"):
        for key in client.scan_iter(pattern, count=1000):
            client.delete(key)
    client.close()


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, _fake_servers: dict[str, FakeVendor]
) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("replica")
    with contextlib.ExitStack() as stack:
        stack.callback(_forget_redis_keys)
        pair = stack.enter_context(pg_pair(folder / "pair", redis_url=_redis_url()))
        tenant = _make_tenant(pair, _fake_servers["primary"], folder)
        generous = {
            "INFRAI_REPLICA_MAX_LAG_S": "30",
            "INFRAI_REPLICA_CHECK_S": "30",
            "INFRAI_READ_YOUR_WRITES_S": "60",
        }
        strict = {
            "INFRAI_REPLICA_MAX_LAG_S": "1",
            "INFRAI_REPLICA_CHECK_S": "0.1",
            "INFRAI_READ_YOUR_WRITES_S": "5",
        }
        procs: list[subprocess.Popen[bytes]] = []
        stack.callback(_stop_all, procs)
        with ThreadPoolExecutor(2) as pool:  # both at once
            started = [
                pool.submit(_start_web, pair, folder / f"{name}.log", **env)
                for name, env in (("site", generous), ("strict", strict))
            ]
            sites, failures = [], []
            for future in started:  # every started process stopped, even when the other failed
                try:
                    proc, site = future.result()
                except Exception as exc:
                    failures.append(exc)
                else:
                    procs.append(proc)
                    sites.append(site)
        if failures:
            raise failures[0]
        yield World(pair, tenant, *sites)


@pytest.fixture(scope="module")
def reader(world: World) -> Iterator[httpx.Client]:
    """A dashboard session on ``site`` that never writes."""
    with contextlib.closing(world.site.signed_in(world.tenant)) as client:
        yield client


@pytest.fixture(scope="module")
def admin_reader(world: World) -> Iterator[httpx.Client]:
    """A management API client on ``site`` that never writes."""
    with world.site.admin(world.tenant.reader_admin_key) as client:
        yield client


# --- what the app shows -------------------------------------------------------------------------


def _projects_page(client: httpx.Client) -> str:
    response = client.get(f"/o/{ORG}/projects/")
    assert response.status_code == 200, response.text[-2000:]
    return response.text


def _projects_api(client: httpx.Client) -> set[str]:
    response = client.get("/projects", params={"limit": 100})
    assert response.status_code == 200, response.text
    return {project["name"] for project in response.json()["data"]}


def _exported_ids(client: httpx.Client) -> set[str]:
    """The request ids in the dashboard's request-log export (a streamed CSV)."""
    response = client.get(f"/o/{ORG}/usage/requests/export.csv")
    assert response.status_code == 200, response.text[-2000:]
    return {row["request_id"] for row in csv.DictReader(io.StringIO(response.text))}


@dataclass(frozen=True)
class Rename:
    """The tenant's project renamed on the primary in SQL, behind the app's back."""

    old: str
    new: str

    def stale(self, shown: str | set[str]) -> bool:
        """``shown`` (a page, a list of names) was read where the rename was not replayed."""
        return self.old in shown and self.new not in shown

    def fresh(self, shown: str | set[str]) -> bool:
        return self.new in shown and self.old not in shown


def _rename_behind_the_apps_back(pair: PgPair, tenant: Tenant) -> Rename:
    new = f"renamed-{secrets.token_hex(4)}"
    ((old,),) = pair.primary.fetch(
        "SELECT name FROM accounts_project WHERE id = %s", [tenant.project_id]
    )
    pair.primary.fetch(
        "UPDATE accounts_project SET name = %s WHERE id = %s RETURNING id",
        [new, tenant.project_id],
    )
    return Rename(old, new)


@contextlib.contextmanager
def _replay_paused(pair: PgPair) -> Iterator[None]:
    """The replica receives WAL but applies none (its last replayed commit is just before);
    replay resumes, and has caught up, after the block."""
    pair.mark()
    pair.pause_replay()
    try:
        yield
    finally:
        pair.resume_replay()
        pair.wait_caught_up()


def _assert_replica_never_written(pair: PgPair) -> None:
    """The standby refused no write: a write routed to it would be an error in its log."""
    assert "read-only transaction" not in pair.replica.log, pair.replica.log[-3000:]
    assert pair.replica.fetch("SELECT pg_is_in_recovery()") == [(True,)]


def _sample(samples: Samples, name: str) -> float:
    return samples[(name, frozenset())]


# --- through HTTP ---------------------------------------------------------------------------


def test_pages_and_the_management_api_read_from_the_replica(
    world: World, reader: httpx.Client, admin_reader: httpx.Client
) -> None:
    pair = world.pair
    wait_for(lambda: world.site.replica()["reads"] == "replica")
    with _replay_paused(pair):
        rename = _rename_behind_the_apps_back(pair, world.tenant)
        assert rename.stale(_projects_page(reader))
        assert rename.stale(_projects_api(admin_reader))
    assert rename.fresh(_projects_page(reader))
    assert rename.fresh(_projects_api(admin_reader))


def test_a_client_that_wrote_reads_its_write_at_once_and_others_after_replay(
    world: World, reader: httpx.Client, admin_reader: httpx.Client
) -> None:
    pair, site = world.pair, world.site
    with (
        contextlib.closing(site.signed_in(world.tenant)) as writer,
        site.admin(world.tenant.writer_admin_key) as admin_writer,
        _replay_paused(pair),
    ):
        created = writer.post(
            f"/o/{ORG}/projects/new/",
            data={"name": "from the page", "csrfmiddlewaretoken": writer.cookies["csrftoken"]},
        )
        assert created.status_code == 302, created.text[-2000:]
        assert "from the page" in _projects_page(writer)
        assert "from the page" not in _projects_page(reader)

        created = admin_writer.post("/projects", json={"name": "from the api"})
        assert created.status_code == 201, created.text
        assert "from the api" in _projects_api(admin_writer)
        # The reader's calls touch its admin key's last_used_at: no stamp for that.
        assert not {"from the page", "from the api"} & _projects_api(admin_reader)
    assert {"from the page", "from the api"} <= _projects_api(admin_reader)
    page = _projects_page(reader)
    assert "from the page" in page and "from the api" in page
    _assert_replica_never_written(pair)


def test_a_revoked_admin_key_is_refused_at_once_while_the_replica_lags(world: World) -> None:
    pair, site, tenant = world.pair, world.site, world.tenant
    with (
        site.admin(tenant.writer_admin_key) as admin,
        site.admin(tenant.doomed_admin_key) as doomed,
    ):
        assert doomed.get("/projects").status_code == 200
        keys = admin.get("/admin_api_keys").json()["data"]
        (doomed_id,) = (key["id"] for key in keys if key["name"] == "doomed")
        with _replay_paused(pair):
            assert admin.delete(f"/admin_api_keys/{doomed_id}").status_code == 200
            refused = doomed.get("/projects")
            assert refused.status_code == 401, refused.text
            assert refused.json()["error"]["code"] == "revoked_api_key"
            # Only the primary knew.
            assert pair.replica.fetch(
                "SELECT revoked_at FROM management_adminkey WHERE name = 'doomed'"
            ) == [(None,)]


def test_calls_while_the_replica_lags_are_held_settled_and_charged_on_the_primary(
    world: World, reader: httpx.Client
) -> None:
    pair = world.pair
    sdk = world.site.sdk(world.tenant)
    usage = (
        "SELECT request_id, -amount_nanos FROM billing_ledgerentry"
        " WHERE request_id = ANY(%s) AND kind = 'usage'"
    )
    with sdk, _replay_paused(pair):
        ids = []
        for stream in (False, True, False):
            if stream:
                with sdk.chat.completions.with_streaming_response.create(
                    model="test-large",
                    messages=HI,  # type: ignore[arg-type]
                    stream=True,
                ) as streamed:
                    ids.append(streamed.headers["x-infrai-request-id"])
                    assert "[DONE]" in streamed.read().decode()
            else:
                raw = sdk.chat.completions.with_raw_response.create(
                    model="test-large",
                    messages=HI,  # type: ignore[arg-type]
                )
                ids.append(raw.headers["x-infrai-request-id"])
                assert raw.parse().choices[0].message.content == "Echo: hello there"
        wait_for(
            lambda: (
                not pair.primary.fetch(
                    "SELECT 1 FROM billing_hold WHERE request_id = ANY(%s) AND status = 'open'",
                    [ids],
                )
            )
        )
        held = pair.primary.fetch("SELECT 1 FROM billing_hold WHERE request_id = ANY(%s)", [ids])
        logged = dict(
            pair.primary.fetch(
                "SELECT request_id, cost_nanos FROM inference_requestlog"
                " WHERE request_id = ANY(%s) AND status = 'ok'",
                [ids],
            )
        )
        charged = dict(pair.primary.fetch(usage, [ids]))
        assert len(held) == 3
        assert set(logged) == set(ids) and all(cost > 0 for cost in logged.values())
        assert charged == logged
        audit = _manage(pair, "billing_audit")
        assert audit.returncode == 0, audit.stdout + audit.stderr
        # None of it has reached the replica yet; the dashboard's export, read there, lacks it.
        assert not pair.replica.fetch(
            "SELECT 1 FROM inference_requestlog WHERE request_id = ANY(%s)", [ids]
        )
        assert not set(ids) & _exported_ids(reader)
    assert set(ids) <= _exported_ids(reader)
    assert dict(pair.replica.fetch(usage, [ids])) == charged
    _assert_replica_never_written(pair)


def test_a_replica_further_behind_than_allowed_is_left_for_the_primary(world: World) -> None:
    pair, strict, tenant = world.pair, world.strict, world.tenant
    wait_for(lambda: strict.replica() == CAUGHT_UP)
    wait_for(lambda: _sample(strict.metrics(), "infrai_db_replica_reads") == 1)
    with (
        contextlib.closing(strict.signed_in(tenant)) as browser,
        strict.admin(tenant.reader_admin_key) as api,
        _replay_paused(pair),
    ):
        rename = _rename_behind_the_apps_back(pair, tenant)
        details = wait_for(lambda: _lagging(strict.replica(), more_than_s=1), seconds=60)
        assert details["check"].startswith("lagging: ")
        assert details["lag_bytes"] > 0 and details["reads"] == "primary"
        assert rename.fresh(_projects_page(browser))
        assert rename.fresh(_projects_api(api))
        samples = strict.metrics()
        assert _sample(samples, "infrai_db_replica_lag_seconds") > 1
        assert _sample(samples, "infrai_db_replica_lag_bytes") > 0
        assert _sample(samples, "infrai_db_replica_up") == 1
        assert _sample(samples, "infrai_db_replica_reads") == 0
    wait_for(lambda: strict.replica() == CAUGHT_UP)
    wait_for(lambda: _sample(strict.metrics(), "infrai_db_replica_reads") == 1)


def _lagging(details: dict[str, Any], *, more_than_s: float) -> dict[str, Any] | None:
    lag_s = details["lag_s"]
    return details if lag_s is not None and lag_s > more_than_s else None


def test_a_stopped_replica_is_left_for_the_primary_until_it_is_back(
    world: World, reader: httpx.Client, admin_reader: httpx.Client
) -> None:
    pair, site, tenant = world.pair, world.site, world.tenant
    # Measured now: the process trusts the replica for its next 30 s.
    wait_for(lambda: site.replica()["reads"] == "replica")
    ((name,),) = pair.primary.fetch(
        "SELECT name FROM accounts_project WHERE id = %s", [tenant.project_id]
    )
    logged = len(site.log.read_bytes())
    pair.replica.stop()
    try:
        # The page's read fails on the replica; the GET is answered again from the primary.
        assert name in _projects_page(reader)
        assert b"answering from the primary" in site.log.read_bytes()[logged:]
        assert name in _projects_api(admin_reader)
        details = site.replica()
        assert details["check"].startswith("unavailable: ")
        assert details["reads"] == "primary" and details["lag_s"] is None
        samples = site.metrics()
        assert _sample(samples, "infrai_db_replica_up") == 0
        assert _sample(samples, "infrai_db_replica_reads") == 0
        assert ("infrai_db_replica_lag_seconds", frozenset()) not in samples
    finally:
        pair.replica.start()
    wait_for(lambda: site.replica()["reads"] == "replica")
    with _replay_paused(pair):  # read again: its stale state shows
        rename = _rename_behind_the_apps_back(pair, tenant)
        assert rename.stale(_projects_page(reader))
        assert rename.stale(_projects_api(admin_reader))
    assert rename.fresh(_projects_page(reader))
    _assert_replica_never_written(pair)


# --- the router's decisions, in process -------------------------------------------------------


@pytest.fixture
def replica_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process acts as one with a usable replica (its settings have none)."""
    monkeypatch.setattr(db_router, "configured", lambda: True)
    monkeypatch.setattr(db_router, "replica_usable", lambda **_: True)


@pytest.mark.parametrize(
    ("model", "alias"),
    [
        (Project, REPLICA),
        (RequestLog, REPLICA),
        # Who the caller is and what they may do: the primary, always.
        (Membership, PRIMARY),
        (AdminKey, PRIMARY),
        (User, PRIMARY),
        (Session, PRIMARY),
    ],
)
def test_a_replica_route_reads_the_replica_except_who_may_do_what(
    replica_configured: None, model: type[Model], alias: str
) -> None:
    router = ReplicaRouter()
    assert router.db_for_read(model) == PRIMARY  # no route: the primary
    with db_router.reads_from_replica() as route:
        assert router.db_for_read(model) == alias
        assert router.db_for_write(model) == PRIMARY
    # A write stamps the client unless it is of a model read from the primary anyway.
    assert route.wrote is (alias == REPLICA)


def test_what_a_request_wrote_it_reads_back_from_the_primary(replica_configured: None) -> None:
    router = ReplicaRouter()
    with db_router.reads_from_replica():
        assert router.db_for_read(Project) == REPLICA
        router.db_for_write(Project)
        assert router.db_for_read(Project) == router.db_for_read(RequestLog) == PRIMARY


def test_a_get_view_marked_as_writing_reads_the_primary(
    replica_configured: None, rf: RequestFactory
) -> None:
    """The e-mail link that verifies an address (and grants starter credit from what it
    reads) is a GET of the dashboard, marked ``primary_reads``."""
    from dashboard.views.auth import verify_email

    read: list[str] = []

    def handler(request: HttpRequest) -> HttpResponse:
        for view in (verify_email, _view_of("dashboard.views.auth")):
            request.infrai_read_route = db_router.ReadRoute()  # type: ignore[attr-defined]
            with db_router._routed(request.infrai_read_route):  # type: ignore[attr-defined]
                middleware.process_view(request, view, (), {})
                read.append(ReplicaRouter().db_for_read(Project))
        return HttpResponse()

    middleware = ReplicaReadsMiddleware(handler)
    middleware(rf.get("/verify/x/", HTTP_AUTHORIZATION=f"Bearer {secrets.token_hex(8)}"))
    assert read == [PRIMARY, REPLICA]


def test_a_read_inside_a_transaction_on_the_primary_stays_there(
    replica_configured: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections[PRIMARY], "in_atomic_block", True)
    with db_router.reads_from_replica():
        assert ReplicaRouter().db_for_read(Project) == PRIMARY


def _view_of(module: str) -> Callable[[HttpRequest], HttpResponse]:
    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    view.__module__ = module
    return view


@pytest.mark.parametrize(
    ("method", "module", "alias"),
    [
        ("GET", "dashboard.views.projects", REPLICA),
        ("HEAD", "management.views.projects", REPLICA),
        ("POST", "dashboard.views.projects", PRIMARY),
        ("GET", "django.contrib.admin.sites", PRIMARY),
        ("GET", "billing.webhooks", PRIMARY),
        ("GET", "config.probes", PRIMARY),
    ],
)
def test_only_gets_of_the_dashboard_and_the_management_api_read_the_replica(
    replica_configured: None, rf: RequestFactory, method: str, module: str, alias: str
) -> None:
    read: list[str] = []

    def handler(request: HttpRequest) -> HttpResponse:  # what Django does around a view
        middleware.process_view(request, _view_of(module), (), {})
        read.append(ReplicaRouter().db_for_read(Project))
        return HttpResponse()

    middleware = ReplicaReadsMiddleware(handler)
    middleware(rf.generic(method, "/", HTTP_AUTHORIZATION=f"Bearer {secrets.token_hex(8)}"))
    assert read == [alias]


def test_a_client_reads_the_primary_when_redis_cannot_say_whether_it_wrote(
    replica_configured: None, rf: RequestFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Away:
        def get(self, key: str) -> None:
            raise ConnectionError("Redis is away")

    request = rf.get("/", HTTP_AUTHORIZATION="Bearer someone")
    assert not db_router.wrote_recently(request)
    monkeypatch.setattr(db_router, "cache", Away())
    assert db_router.wrote_recently(request)


@pytest.mark.parametrize(
    ("state", "check"),
    [
        (ReplicaState(lag_s=0.0, lag_bytes=0), "ok"),
        (ReplicaState(lag_s=5.0, lag_bytes=800), "ok"),
        (ReplicaState(lag_s=5.5, lag_bytes=800), "lagging: 5.5 s behind (reads on the primary)"),
        (
            ReplicaState(lag_s=None, lag_bytes=800),
            "lag unknown: nothing replayed yet (reads on the primary)",
        ),
        (ReplicaState(error="PoolTimeout"), "unavailable: PoolTimeout (reads on the primary)"),
    ],
)
def test_the_replica_is_used_while_it_answers_no_further_behind_than_allowed(
    state: ReplicaState, check: str
) -> None:
    assert state.describe(5.0) == check
    assert state.usable(5.0) is (check == "ok")


def test_a_request_goes_on_with_the_last_state_while_the_replica_is_measured_aside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(db_router, "configured", lambda: True)
    monkeypatch.setattr(db_router._Memo, "state", None)
    answering, away = ReplicaState(lag_s=0.0, lag_bytes=0), ReplicaState(error="PoolTimeout")
    states = iter([answering, away])
    timed_out = threading.Event()

    def measure() -> ReplicaState:
        state = next(states)
        if state is away:  # a replica that does not answer: the pool's timeout
            timed_out.wait(30)
        return state

    monkeypatch.setattr(db_router, "measure", measure)
    assert db_router.replica_state(max_age_s=60) is answering  # none yet: measured here
    monkeypatch.setattr(db_router._Memo, "at", db_router._Memo.at - 120)
    assert db_router.replica_state(max_age_s=60) is answering  # at once; measured aside
    timed_out.set()
    wait_for(lambda: db_router.replica_state(max_age_s=60) is away)
    wait_for(lambda: not db_router._Memo.lock.locked())  # the measuring thread is done
