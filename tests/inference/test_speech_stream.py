"""Speech is relayed as the vendor sends it, with failover before the first byte and honest
billing when the audio breaks."""

from __future__ import annotations

import httpx
import pytest

from billing.models import Hold, HoldStatus, LedgerEntry
from catalog.documents import catalog_load
from inference.models import RequestLog, RequestStatus
from tests.fakes.vendors import SPEECH_CHUNKS

TTS_PRICE = {"effective_from": "2025-01-01T00:00:00Z", "source": "test", "per_mchar_usd": "15"}


@pytest.fixture
def tts(fake_catalog):
    model = {
        "id": "test-tts",
        "display_name": "test-tts",
        "owned_by": "tests",
        "capabilities": ["speech"],
        "quality_tier": 5,
        "created": "2025-01-01",
        "offerings": [
            {
                "vendor": "primary",
                "upstream_model": "up-large",
                "priority": 10,
                "prices": [TTS_PRICE],
            },
            {
                "vendor": "backup",
                "upstream_model": "up-large",
                "priority": 20,
                "prices": [TTS_PRICE],
            },
        ],
    }
    catalog_load({"models": [model]})
    return fake_catalog


def _speak(api_base, key):
    return httpx.post(
        api_base + "/audio/speech",
        json={"model": "test-tts", "voice": "alloy", "input": "hello world"},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def test_audio_is_relayed_whole_and_billed_per_character(api_base, issue_key, tts):
    tts["primary"].fail_statuses = [503]  # failover before the first byte
    r = _speak(api_base, issue_key())
    assert r.status_code == 200 and r.headers["content-type"] == "audio/mpeg"
    assert r.content == b"".join(bytes([i]) * 1024 for i in range(SPEECH_CHUNKS))
    assert r.headers["x-infrai-vendor"] == "backup"
    request_id = r.headers["x-infrai-request-id"]
    assert (
        LedgerEntry.objects.get(request_id=request_id).amount_nanos == -165_000
    )  # 11 chars × $15/1M
    assert r.headers["x-infrai-cost-usd"] == "0.000165"


def test_audio_cut_by_the_vendor_is_not_charged(api_base, issue_key, tts):
    tts["primary"].cut_after = 3
    r = _speak(api_base, issue_key())
    # A binary body has no error channel once it has started: the audio ends short, is logged
    # as interrupted and costs nothing.
    assert len(r.content) == 3 * 1024
    log = RequestLog.objects.get(request_id=r.headers["x-infrai-request-id"])
    assert log.status == RequestStatus.VENDOR_ERROR and log.cost_nanos == 0
    assert not LedgerEntry.objects.filter(kind="usage").exists()
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()


def test_identical_speech_is_answered_from_the_cache_for_free(api_base, issue_key, tts):
    key = issue_key()
    first, second = _speak(api_base, key), _speak(api_base, key)
    assert first.content == second.content and len(first.content) == SPEECH_CHUNKS * 1024
    assert "x-infrai-cache" not in first.headers and second.headers["x-infrai-cache"] == "hit"
    assert second.headers["x-infrai-cost-usd"] == "0"
    assert len(tts["primary"].requests) == 1
    assert LedgerEntry.objects.filter(kind="usage").count() == 1


def test_audio_cut_short_is_never_cached(api_base, issue_key, tts):
    tts["primary"].cut_after = 3
    key = issue_key()
    _speak(api_base, key)
    tts["primary"].cut_after = None
    again = _speak(api_base, key)
    assert "x-infrai-cache" not in again.headers
    assert len(again.content) == SPEECH_CHUNKS * 1024
