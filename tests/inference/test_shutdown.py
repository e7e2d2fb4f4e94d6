"""A real web process (``python -m config.server``) stopped with calls in flight.

SIGTERM: the process drains — calls in flight get ``INFRAI_DRAIN_S``, then streams end with an
error event and ``[DONE]`` and are billed for what they delivered, non-streamed calls answer
503 and cost nothing. SIGKILL: nothing can run in the process; the hold sweeper releases the
holds (its ``hold_expired`` entry names the request) and the request log shows the call as
abandoned. Either way no hold stays open and the audit is clean.
"""

from __future__ import annotations

import datetime as dt
import signal
import threading
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.utils import timezone

from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry
from billing.services import holds_expire
from inference.models import RequestLog, RequestStatus
from inference.tasks import log_abandoned_calls
from tests.inference.test_money_faults import assert_settled_once
from tests.live import server_process, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
]

WORDS = " ".join(f"w{i}" for i in range(30))


class _Stream(threading.Thread):
    """One streamed chat call read line by line in a thread."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(daemon=True)
        self.url, self.key = url, key
        self.lines: list[str] = []
        self.request_id = ""
        self.error: BaseException | None = None

    def run(self) -> None:
        body = {
            "model": "test-large",
            "messages": [{"role": "user", "content": WORDS}],
            "stream": True,
        }
        try:
            with httpx.stream(
                "POST",
                self.url + "/v1/chat/completions",
                json=body,
                headers={"authorization": f"Bearer {self.key}"},
                timeout=60,
            ) as r:
                self.request_id = r.headers["x-infrai-request-id"]
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        self.lines.append(line)
        except httpx.HTTPError as exc:
            self.error = exc


def _data_lines(stream: _Stream) -> int:
    return len(stream.lines)


def test_sigterm_drains_streams_and_plain_calls_billing_each_once(issue_key, fake_catalog) -> None:
    fake_catalog["primary"].chunk_delay_s = 0.3
    fake_catalog["anthro"].stall_s = 8.0
    key = issue_key()
    proc, url = server_process(INFRAI_DRAIN_S="0.5")
    try:
        streams = [_Stream(url, key) for _ in range(2)]
        for s in streams:
            s.start()
        plain: dict[str, Any] = {}

        def non_streamed() -> None:
            r = httpx.post(
                url + "/v1/chat/completions",
                json={"model": "claude-fake", "messages": [{"role": "user", "content": "hi"}]},
                headers={"authorization": f"Bearer {key}"},
                timeout=60,
            )
            plain.update(status=r.status_code, body=r.json(), rid=r.headers["x-request-id"])

        worker = threading.Thread(target=non_streamed, daemon=True)
        worker.start()
        wait_for(lambda: all(_data_lines(s) >= 3 for s in streams), seconds=30)
        wait_for(lambda: len(fake_catalog["anthro"].requests) == 1, seconds=30)
        proc.send_signal(signal.SIGTERM)
        for t in [*streams, worker]:
            t.join(60)
        assert proc.wait(60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it caught
    finally:
        if proc.poll() is None:
            proc.kill()
    for s in streams:
        assert s.error is None
        assert s.lines[-1] == "data: [DONE]"
        assert '"code":"server_shutting_down"' in s.lines[-2]
        log = assert_settled_once(s.request_id)
        assert (log.status, log.error_code) == (RequestStatus.CANCELLED, "server_shutting_down")
        assert log.cost_nanos > 0  # what was delivered was billed
    assert plain["status"] == 503
    assert plain["body"]["error"]["code"] == "server_shutting_down"
    log = assert_settled_once(plain["rid"])
    assert (log.http_status, log.cost_nanos) == (503, 0)
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    assert audit_findings().findings == []


def test_after_sigkill_the_sweeper_releases_and_names_the_abandoned_call(
    issue_key, fake_catalog
) -> None:
    fake_catalog["primary"].chunk_delay_s = 0.3
    proc, url = server_process(INFRAI_DRAIN_S="0.5")
    try:
        stream = _Stream(url, issue_key())
        stream.start()
        wait_for(lambda: _data_lines(stream) >= 3, seconds=30)
        proc.kill()
        proc.wait(30)
        stream.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    rid = stream.request_id
    assert Hold.objects.get(request_id=rid).status == HoldStatus.OPEN  # nobody could settle it
    assert not RequestLog.objects.filter(request_id=rid).exists()
    assert holds_expire(now=timezone.now() + dt.timedelta(seconds=settings.INFRAI_HOLD_TTL_S + 1))
    entry = LedgerEntry.objects.get(kind=EntryKind.HOLD_EXPIRED)
    assert entry.request_id == rid
    assert log_abandoned_calls() == 1
    log = RequestLog.objects.get(request_id=rid)
    assert (log.status, log.cost_nanos) == (RequestStatus.ABANDONED, 0)
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    assert audit_findings().findings == []
