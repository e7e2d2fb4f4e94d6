"""The three model-list endpoints through the official ``openai`` SDK against the live server.

A fake OpenAI-compatible vendor on 127.0.0.1 answers ``/v1/models``; the test declares it with
a catalog document and makes it routable by running the probe (``manage.py catalog probe``).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import openai
import pytest
from django.core.management import call_command

from catalog.documents import catalog_load

UPSTREAM = ["fake-chat-upstream", "something-else"]


class _FakeModels(BaseHTTPRequestHandler):
    seen_auth: list[str] = []

    def do_GET(self) -> None:
        type(self).seen_auth.append(self.headers.get("Authorization", ""))
        if self.path.rstrip("/") != "/v1/models":
            self.send_error(404)
            return
        body = json.dumps(
            {"object": "list", "data": [{"id": m, "object": "model"} for m in UPSTREAM]}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_vendor() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeModels)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _FakeModels.seen_auth = []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _declare(base_url: str) -> None:
    price = {
        "effective_from": "2025-01-01T00:00:00Z",
        "source": "test",
        "input_per_mtok_usd": "0.5",
        "cached_input_per_mtok_usd": "0.25",
        "output_per_mtok_usd": "1.000000001",
    }
    catalog_load(
        {
            "vendors": [
                {
                    "name": "fakeco",
                    "adapter_kind": "openai",
                    "base_url": base_url,
                    "credentials_env": "FAKECO_API_KEY",
                    "region": "local",
                }
            ],
            "models": [
                {
                    "id": "fake-chat",
                    "owned_by": "fakeco",
                    "capabilities": ["chat", "vision"],
                    "tasks": ["chat"],
                    "context_window": 4096,
                    "quality_tier": 3,
                    "parameters": {"seed": "no_effect"},
                    "offerings": [
                        {
                            "vendor": "fakeco",
                            "upstream_model": "fake-chat-upstream",
                            "prices": [price],
                        }
                    ],
                },
                {
                    "id": "fake-embed",
                    "owned_by": "fakeco",
                    "capabilities": ["embeddings"],
                    "offerings": [
                        {"vendor": "fakeco", "upstream_model": "not-served", "prices": [price]}
                    ],
                },
            ],
        }
    )


@pytest.fixture
def routable_fake(api_base, seeded, fake_vendor, monkeypatch) -> str:
    monkeypatch.setenv("FAKECO_API_KEY", "sk-fake-secret")
    _declare(fake_vendor)
    out = io.StringIO()
    call_command("catalog", "probe", "--vendor", "fakeco", stdout=out)
    assert "fakeco: ok, 2 models" in out.getvalue()
    assert _FakeModels.seen_auth == ["Bearer sk-fake-secret"]
    return api_base


def test_list_models_shows_modes_and_only_routable_models(routable_fake, issue_key):
    client = openai.OpenAI(base_url=routable_fake, api_key=issue_key(), max_retries=0)
    page = client.models.list()
    ids = [m.id for m in page.data]
    assert ids[:3] == ["auto", "cheapest", "smartest"]
    assert "fake-chat" in ids
    assert "fake-embed" not in ids  # the vendor's /models does not list its upstream name
    assert "gpt-4o" not in ids  # no OPENAI_API_KEY here
    fake = next(m for m in page.data if m.id == "fake-chat")
    assert (fake.object, fake.owned_by) == ("model", "fakeco")
    assert isinstance(fake.created, int)


def test_retrieve_model_details_prices_and_availability(routable_fake, issue_key):
    client = openai.OpenAI(base_url=routable_fake, api_key=issue_key(), max_retries=0)
    model = client.models.retrieve("fake-chat")
    assert model.id == "fake-chat"
    details = model.model_dump()
    assert details["capabilities"] == ["chat", "vision"]
    assert details["context_window"] == 4096
    assert details["parameters"]["seed"]["support"] == "no_effect"
    availability = details["availability"]
    assert availability["available"] is True
    assert availability["vendors"] == ["fakeco"]
    assert availability["pricing"] == {
        "input_per_1m_tokens_usd": "0.5",
        "cached_input_per_1m_tokens_usd": "0.25",
        "cache_write_5m_per_1m_tokens_usd": "0.625",  # the defaults: 1.25× and 2× the input
        "cache_write_1h_per_1m_tokens_usd": "1",
        "output_per_1m_tokens_usd": "1.000000001",
        "reasoning_per_1m_tokens_usd": "1.000000001",  # the default: the output price
    }

    pinned = client.models.retrieve("fakeco/fake-chat")
    assert pinned.id == "fakeco/fake-chat"

    unavailable = client.models.retrieve("fake-embed").model_dump()["availability"]
    assert unavailable["available"] is False
    assert unavailable["offerings"][0]["reason"] == "vendor fakeco does not serve this model now"

    gpt = client.models.retrieve("gpt-4o-mini").model_dump()["availability"]
    assert gpt["available"] is False
    # Customers see the vendor and the reason, never the operator's setting.
    assert gpt["offerings"][0]["reason"] == "vendor openai is not available on this platform"
    assert "OPENAI_API_KEY" not in json.dumps(gpt)

    auto = client.models.retrieve("auto").model_dump()
    assert auto["routing_mode"] is True
    # Modes are case-insensitive like model ids.
    assert client.models.retrieve("Auto").model_dump()["id"] == "auto"
    assert client.models.retrieve("FAKE-chat").id == "fake-chat"


def test_unknown_model_is_an_openai_404(routable_fake, issue_key):
    client = openai.OpenAI(base_url=routable_fake, api_key=issue_key(), max_retries=0)
    for name in ("no-such-model", "fakeco/gpt-4o"):
        with pytest.raises(openai.NotFoundError) as err:
            client.models.retrieve(name)
        assert err.value.status_code == 404
        assert err.value.code == "model_not_found"
        assert err.value.param == "model"


def test_models_need_a_key_but_the_public_list_does_not(routable_fake):
    assert httpx.get(routable_fake + "/models").status_code == 401
    public = httpx.get(routable_fake + "/ai/models", params={"capability": "vision"})
    assert public.status_code == 200
    rows = {m["id"]: m for m in public.json()["data"]}
    assert rows["fake-chat"]["available"] is True
    assert rows["fake-chat"]["pricing"]["input_per_1m_tokens_usd"] == "0.5"
    assert rows["gpt-4o"]["available"] is False  # in the catalog, not routable here
    assert "fake-embed" not in rows  # no vision
    assert all("vision" in m["capabilities"] for m in rows.values())


def test_public_list_filters_by_vendor_and_task_and_checks_capability(routable_fake):
    by_vendor = httpx.get(routable_fake + "/ai/models", params={"vendor": "fakeco"}).json()
    assert [m["id"] for m in by_vendor["data"]] == ["fake-chat", "fake-embed"]
    by_task = httpx.get(routable_fake + "/ai/models", params={"task": "reasoning"}).json()
    assert by_task["data"] and all("reasoning" in m["tasks"] for m in by_task["data"])
    bad = httpx.get(routable_fake + "/ai/models", params={"capability": "telepathy"})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "capability"


def test_a_failed_probe_keeps_the_vendor_unverified(api_base, db, monkeypatch):
    monkeypatch.setenv("FAKECO_API_KEY", "x")
    from tests.live import free_port

    _declare(f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
    out = io.StringIO()
    call_command("catalog", "probe", "--vendor", "fakeco", stdout=out)
    assert "fakeco: ConnectError" in out.getvalue()
    from catalog.models import Vendor

    vendor = Vendor.objects.get(name="fakeco")
    assert vendor.verified_at is None
    assert vendor.last_probe_error.startswith("ConnectError")
