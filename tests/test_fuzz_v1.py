"""Schema fuzzing of the whole ``/v1`` surface from the document it serves (issue 12, Proof).

schemathesis reads ``GET /v1/openapi.json`` from the live app (uvicorn, the production server)
and generates requests for every operation: *positive* cases that fit the documented schema
and *negative* ones that break it (wrong types, missing or unknown fields, out-of-range values).
Every answer must be below 500 and every error must be in the OpenAI shape; afterwards the
money is consistent — no hold left open, no ledger entry without its request
(``billing.audit.audit_findings``).

The run is bounded and reproducible: ``derandomize=True`` (the same cases every run, no example
database) and :data:`MAX_EXAMPLES` cases per operation and mode. The number of cases run is
printed (``-s`` shows it; ``docs/security.md`` records it).

Vendors: the fake vendors of ``tests/inference/conftest.py`` answer chat, embeddings, images
and speech; the session's gpu-backend answers moderation and transcription with the local
models. The local chat and voice models are left out of this catalog: a fuzzed request may ask
for thousands of tokens or characters, which the fakes answer at once and the CPU would not.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import schemathesis
from schemathesis.core import NotSet

from accounts.models import ApiKey
from billing.audit import audit_findings
from billing.models import Hold, HoldStatus, LedgerEntry
from inference.endpoints import audio, embeddings, images
from inference.endpoints.openapi import document, served_document
from inference.models import RequestLog
from infra import background
from tests.catalog_docs import catalog_model
from tests.fakes.vendors import FakeVendor
from tests.fuzzing import run_cases
from tests.gpu import backend_url  # noqa: F401  (one gpu-backend process per session)
from tests.inference.conftest import (  # noqa: F401  (fixtures used by this module)
    _fake_servers,
    fake_catalog,
    fakes,
    image_and_embedding_models,
    load_gateway_catalog,
    on_fakes,
)
from tests.live import live_floors
from tests.vectors.conftest import reseed_vector_price

# Cases per operation and per mode (positive, negative).
MAX_EXAMPLES = 20
ERROR_KEYS = {"message", "type", "code", "param"}
TTS_PRICE = {"effective_from": "2025-01-01T00:00:00Z", "source": "test", "per_mchar_usd": "15"}
# The local models this run serves (moderation and transcription); see the module docstring.
LOCAL_MODELS = ("infrai-moderation-minilm", "whisper-tiny.en")


@pytest.fixture
def fuzz_catalog(
    fake_catalog: dict[str, FakeVendor],  # noqa: F811
    backend_url: str,  # noqa: F811
) -> dict[str, FakeVendor]:
    """The fakes for chat, embeddings, images and speech; the gpu-backend for the rest; the
    seeded vector store price."""
    reseed_vector_price()
    load_gateway_catalog(
        backend_url,
        LOCAL_MODELS,
        [
            *image_and_embedding_models(),
            catalog_model(
                "test-tts", quality_tier=5, capabilities=["speech"], offerings=on_fakes(TTS_PRICE)
            ),
        ],
    )
    return fake_catalog


class ServerErrors(logging.Handler):
    """Collects what the app logs at ERROR (``log.exception``: with its traceback)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        self.records: list[str] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            self.records.append(self.format(record))

    def about(self, request_id: str) -> list[str]:
        """The records that name ``request_id``."""
        with self._lock:
            return [r for r in self.records if request_id in r]


@pytest.fixture
def server_errors() -> Iterator[ServerErrors]:
    handler = ServerErrors()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


@dataclass
class Finding:
    """A case that broke a rule: what was sent, what came back, what the server logged."""

    rule: str
    sent: Sent
    request_id: str = ""
    logged: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        sent = self.sent
        logged = "\n".join(self.logged) or "(nothing logged)"
        return (
            f"[{sent.mode}] {sent.operation}: {self.rule} ({self.request_id or 'no request id'})\n"
            f"  request: {sent.request}\n  response {sent.status}: {sent.body[:600]}\n"
            f"  server log:\n{logged}"
        )


def error_shape_problem(
    content_type: str, content: bytes, *, anthropic: bool = False
) -> str | None:
    """Why an error response is not in the OpenAI shape — or, with ``anthropic`` (the
    ``/messages`` routes), Anthropic's: ``{"type": "error", "error": {...}}`` with the same
    fields in ``error`` — (``None`` when it is)."""
    if not content_type.startswith("application/json"):
        return f"content-type {content_type!r}, not JSON"
    try:
        body = json.loads(content)
    except ValueError:
        return "a body that is not JSON"
    if anthropic:
        if not isinstance(body, dict) or set(body) != {"type", "error"} or body["type"] != "error":
            return "not {'type': 'error', 'error': {...}}"
        body = {"error": body["error"]}
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(body, dict) or set(body) != {"error"} or not isinstance(error, dict):
        return "not {'error': {...}}"
    if set(error) != ERROR_KEYS:
        return f"error keys {sorted(error)}, not {sorted(ERROR_KEYS)}"
    if not isinstance(error["message"], str) or not error["message"]:
        return "error.message is not a non-empty string"
    if not isinstance(error["type"], str) or not error["type"]:
        return "error.type is not a non-empty string"
    for name in ("code", "param"):
        if error[name] is not None and not isinstance(error[name], str):
            return f"error.{name} is neither a string nor null"
    return None


def describe(case: schemathesis.Case) -> str:
    """The request of ``case`` in one line (method, path, query, body)."""
    parts = [case.method, case.formatted_path]
    if case.query:
        parts.append(f"query={case.query!r}")
    if not isinstance(case.body, NotSet):
        try:
            text = json.dumps(case.body, ensure_ascii=True, default=repr)
        except (TypeError, ValueError):
            text = repr(case.body)
        parts.append(f"{case.media_type} body={text[:1500]}")
    return " ".join(parts)


@dataclass
class Sent:
    """One case as sent: where it came from, its request and its answer."""

    operation: str
    mode: str
    request: str
    status: int
    body: str


@dataclass
class Fuzzer:
    """Runs the cases of each operation and mode; counts them and keeps what broke a rule."""

    base_url: str
    key: str
    server_errors: ServerErrors
    cases: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    sent: dict[str, Sent] = field(default_factory=dict)  # by the response's request id

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def run(self, operation: Any, mode: schemathesis.GenerationMode) -> str:
        """Run ``MAX_EXAMPLES`` cases; a line saying how many and with which statuses."""
        before = dict(self.by_status)
        try:
            # The key is fixed (not generated): negative cases break the request, not the key.
            strategy = operation.as_strategy(generation_mode=mode, headers=self.auth)
        except Exception as exc:  # an operation with nothing to negate
            return f"no strategy ({exc.__class__.__name__})"

        if not run_cases(strategy, lambda case: self.check(case, mode), max_examples=MAX_EXAMPLES):
            return "nothing to generate"
        counts = {s: n - before.get(s, 0) for s, n in sorted(self.by_status.items())}
        return (
            f"{sum(counts.values())} cases, statuses { ({s: n for s, n in counts.items() if n}) }"
        )

    def check(self, case: schemathesis.Case, mode: schemathesis.GenerationMode) -> None:
        response = case.call(base_url=self.base_url, headers=self.auth, timeout=60)
        status = response.status_code
        self.cases += 1
        self.by_status[status] = self.by_status.get(status, 0) + 1
        sent = Sent(
            operation=case.operation.label,
            mode=mode.value,
            request=describe(case),
            status=status,
            body=response.content.decode("utf-8", "replace"),
        )
        request_id = (response.headers.get("x-request-id") or [""])[0]
        if request_id:
            self.sent[request_id] = sent
        rule = None
        if status >= 500:
            rule = "a 5xx"
        elif status >= 400:
            content_type = (response.headers.get("content-type") or [""])[0]
            problem = error_shape_problem(
                content_type, response.content, anthropic=case.path.startswith("/messages")
            )
            if problem is not None:
                rule = f"an error not in the OpenAI shape: {problem}"
        if rule is not None:
            self.findings.append(Finding(rule, sent, request_id))

    def logged_errors(self) -> list[Finding]:
        """Every error the server logged during the run, with the case it belongs to (the
        request id in the log line; request-log writes and settlements log after the
        response)."""
        found = []
        for record in self.server_errors.records:
            ids = set(_REQUEST_ID.findall(record))
            request_id = next((i for i in ids if i in self.sent), "")
            sent = self.sent.get(request_id) or Sent("?", "?", "(no request id logged)", 0, "")
            found.append(Finding("the server logged an error", sent, request_id, [record]))
        return found


_REQUEST_ID = re.compile(r"req_[0-9a-f]{24}")


def wait_until_settled(seconds: float = 30.0) -> None:
    """Wait for the app's background work (request-log writes, settlements) to end."""
    deadline = time.monotonic() + seconds
    while (
        background.pending() or any(f.calls for f in live_floors())
    ) and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture
def fuzz_key(issue_key: Callable[..., str], fuzz_catalog: dict[str, FakeVendor]) -> str:
    """A key with money and limits enough for every case (429s and 402s would hide code)."""
    key = issue_key(org="fuzz", credit_usd="100000")
    ApiKey.objects.update(requests_per_minute=1_000_000, tokens_per_minute=2**31 - 1)
    return key


def test_the_document_matches_the_validators_enums() -> None:
    """The enums the document states are the ones the endpoints check."""
    schemas = document()["components"]["schemas"]
    assert schemas["ImageRequest"]["properties"]["size"]["enum"] == list(images.SIZES)
    assert schemas["ImageRequest"]["properties"]["quality"]["enum"] == list(images.QUALITIES)
    assert schemas["ImageRequest"]["properties"]["n"]["maximum"] == images.MAX_IMAGES
    assert schemas["SpeechRequest"]["properties"]["response_format"]["enum"] == list(
        audio.SPEECH_FORMATS
    )
    assert schemas["SpeechRequest"]["properties"]["input"]["maxLength"] == audio.MAX_SPEECH_CHARS
    assert schemas["TranscriptionForm"]["properties"]["response_format"]["enum"] == list(
        audio.TRANSCRIPTION_FORMATS
    )
    assert (
        schemas["EmbeddingRequest"]["properties"]["dimensions"]["maximum"]
        == embeddings.MAX_DIMENSIONS
    )
    documented = {
        "ImageRequest": images._FIELDS,
        "EmbeddingRequest": embeddings._FIELDS,
        "SpeechRequest": audio._SPEECH_FIELDS,
        "TranscriptionForm": audio._TRANSCRIPTION_FIELDS,
    }
    for name, fields in documented.items():
        assert set(schemas[name]["properties"]) == set(fields) | {"task", "prefer"}, name


def test_the_document_is_served_without_a_key(live_url: str, transactional_db: None) -> None:
    r = httpx.get(live_url + "/v1/openapi.json", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json() == served_document()  # document() + the management API's part
    assert set(r.json()["paths"]) >= {
        "/chat/completions",
        "/embeddings",
        "/moderations",
        "/images/generations",
        "/audio/speech",
        "/audio/transcriptions",
        "/responses",
        "/models",
        "/models/{model}",
        "/messages",
        "/batches",
        "/batches/{batch_id}/cancel",
        "/files",
        "/files/{file_id}/content",
    }


def test_fuzzing_every_v1_operation_finds_no_5xx_and_only_openai_errors(
    live_url: str, fuzz_key: str, server_errors: ServerErrors
) -> None:
    served = httpx.get(live_url + "/v1/openapi.json", timeout=10).json()
    # The management API's part (/organization/…, admin keys) has its own fuzz in
    # tests/management/test_fuzz.py.
    inference = {p: v for p, v in served["paths"].items() if not p.startswith("/organization/")}
    served["paths"] = inference
    schema = schemathesis.openapi.from_dict(served)
    operations = [result.ok() for result in schema.get_all_operations()]
    methods = {"get", "post", "put", "patch", "delete"}
    assert len(operations) == sum(len(methods & set(item)) for item in served["paths"].values())
    started = time.monotonic()
    fuzzer = Fuzzer(live_url + "/v1", fuzz_key, server_errors)
    for operation in operations:
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            print(f"  {operation.label} [{mode.value}]: {fuzzer.run(operation, mode)}")
    wait_until_settled()
    findings = fuzzer.findings + fuzzer.logged_errors() + unlogged_calls(fuzzer, served)
    known = [f for f in findings if known_bug(f)]
    findings = [f for f in findings if not known_bug(f)]
    print(
        f"\nschemathesis: {fuzzer.cases} cases over {len(operations)} operations in "
        f"{time.monotonic() - started:.0f} s; statuses {dict(sorted(fuzzer.by_status.items()))}; "
        f"{sum(f.rule == 'a 5xx' for f in fuzzer.findings)} 5xx; "
        f"{len(known)} cases of known bugs ({sorted({known_bug(f) for f in known})})"
    )
    assert fuzzer.cases >= len(operations) * MAX_EXAMPLES
    assert not findings, "\n\n".join(str(f) for f in findings)
    # Money: what the fuzzer was charged is consistent, and nothing is held any more.
    assert audit_findings().findings == []
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    logged = set(RequestLog.objects.values_list("request_id", flat=True))
    charged = set(LedgerEntry.objects.filter(kind="usage").values_list("request_id", flat=True))
    assert charged <= logged
    assert charged  # the positive cases did reach vendors and were billed


def unlogged_calls(fuzzer: Fuzzer, document: dict[str, Any]) -> list[Finding]:
    """Authenticated calls the key made that have no request-log row (every call of a valid
    key is logged, failures included; ``GET /models`` answers are not metered)."""
    public = {
        f"{method.upper()} {path}"
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if operation.get("security") == []
    }
    logged = set(RequestLog.objects.values_list("request_id", flat=True))
    return [
        Finding("an authenticated call without its request-log row", sent, request_id)
        for request_id, sent in fuzzer.sent.items()
        if sent.operation not in public
        and sent.status != 401
        and not (sent.operation.startswith("GET /models") and sent.status == 200)
        and request_id not in logged
    ]


def known_bug(finding: Finding) -> str:
    """The reported, not yet fixed bug ``finding`` is a case of ('' if none). Each one gets a
    strict xfail that reproduces it; none is open now."""
    return ""


def test_a_refusal_that_echoes_a_nul_character_is_in_the_request_log(
    live_url: str,
    issue_key: Callable[..., str],
    fake_catalog: dict[str, FakeVendor],  # noqa: F811
) -> None:
    r = httpx.post(
        live_url + "/v1/chat/completions",
        json={"model": "no\u0000such-model", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {issue_key()}"},
        timeout=30,
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    wait_until_settled()
    assert RequestLog.objects.filter(request_id=r.headers["x-request-id"]).exists()
