"""A web process whose Redis stops mid-load answers a retryable 503 and recovers."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import redis

from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry
from config.services import valkey_server
from inference.models import RequestLog, RequestStatus
from tests.live import free_port, server_process, wait_for


@pytest.mark.django_db(transaction=True)
def test_a_web_process_whose_redis_stops_answers_503_and_recovers(
    issue_key, fake_catalog, tmp_path: Path
) -> None:
    port = free_port()
    argv = [valkey_server(), "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
    argv += ["--appendonly", "no", "--dir", str(tmp_path)]
    valkey = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    wait_for(lambda: _pings(port), seconds=10)
    log_path = tmp_path / "server.log"
    key = issue_key()
    with log_path.open("wb") as sink:
        proc, url = server_process(REDIS_URL=f"redis://127.0.0.1:{port}/0", output=sink)
    headers = {"authorization": f"Bearer {key}"}
    body = {"model": "test-large", "messages": [{"role": "user", "content": "hi"}]}

    def call() -> httpx.Response:
        return httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=30)

    try:
        assert call().status_code == 200
        valkey.send_signal(signal.SIGTERM)
        valkey.wait(10)
        down = [call() for _ in range(40)]
        assert {r.status_code for r in down} == {503}
        assert {r.json()["error"]["code"] for r in down} == {"service_unavailable"}
        assert all(r.headers["retry-after"] == "1" for r in down)
        valkey = subprocess.Popen(argv, stdout=subprocess.DEVNULL)  # the same port again
        wait_for(lambda: _pings(port), seconds=10)
        recovery: list[int] = []  # calls until the process sees Redis again: 503s, then a 200

        def recovered() -> bool:
            recovery.append(call().status_code)
            return recovery[-1] == 200

        wait_for(recovered, seconds=15)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        valkey.kill()
        valkey.wait(10)
    text = log_path.read_text()
    assert text.count("Traceback") == 0, text[-3000:]
    assert 1 <= text.count("Redis unavailable") <= 10  # one line a second, not one per call
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    served = LedgerEntry.objects.filter(kind=EntryKind.USAGE).count()
    assert served >= 2  # the call before and the one after; none of the 503s was charged
    assert audit_findings().findings == []
    refused = RequestLog.objects.filter(status=RequestStatus.UNAVAILABLE)
    # Logged as the infrastructure's failure, not a vendor's: every 503, the recovery's too.
    assert set(recovery[:-1]) <= {503}
    assert refused.count() == 40 + len(recovery) - 1
    assert set(refused.values_list("http_status", "cost_nanos")) == {(503, 0)}


def _pings(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_connect_timeout=0.5).ping())
    except redis.ConnectionError:
        return False
