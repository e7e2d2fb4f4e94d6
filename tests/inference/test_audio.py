"""Speech and transcription end to end: the official SDK → live app → the real gpu-backend's
piper voice and Whisper tiny.en, billed per character and per second of audio."""

from __future__ import annotations

import base64
import io
import socket
import struct
import threading

import av
import httpx
import openai
import pytest

from billing.models import Hold, LedgerEntry
from inference import multipart
from inference.endpoints import audio
from money.pricing import Usage
from tests.inference.conftest import assert_400_before_any_hold, assert_billed

pytestmark = pytest.mark.usefixtures("gateway_catalog")

SPEECH = "piper-en-us-joe"
WHISPER = "whisper-tiny.en"
SENTENCE = "The quick brown fox jumps over the lazy dog."


def audio_ms(data: bytes) -> int:
    """Milliseconds of audio in ``data``, rounded up (as billing meters it)."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        return -(-samples * 1000 // stream.rate)


@pytest.fixture(scope="module")
def wav(backend_url: str) -> bytes:
    """The sentence spoken once by the backend itself (not through the gateway), as WAV."""
    response = httpx.post(
        backend_url + "/v1/audio/speech",
        json={"model": SPEECH, "voice": "alloy", "input": SENTENCE, "response_format": "wav"},
        timeout=120,
    )
    assert response.status_code == 200
    return response.content


# --- speech ----------------------------------------------------------------------------------
def test_sdk_speech_returns_audio_with_headers_and_bills_characters(issue_key, client_for):
    raw = client_for(issue_key()).audio.speech.with_raw_response.create(
        model=SPEECH, voice="alloy", input=SENTENCE, response_format="wav"
    )
    audio = raw.content
    assert raw.headers["content-type"] == "audio/wav"
    assert raw.headers["transfer-encoding"] == "chunked"
    assert 1000 < audio_ms(audio) < 10000
    assert raw.headers["x-infrai-vendor"] == "infrai-gpu"
    assert raw.headers["x-infrai-model"] == SPEECH
    cost = assert_billed(
        raw.headers["x-infrai-request-id"],
        model=SPEECH,
        vendor="infrai-gpu",
        usage=Usage(characters=len(SENTENCE)),
    )
    assert cost == 44_000  # 44 characters at $1.00 per 1M
    assert raw.headers["x-infrai-cost-usd"] == "0.000044"


def test_mp3_is_the_default_and_routing_modes_find_the_voice(issue_key, client_for):
    raw = client_for(issue_key()).audio.speech.with_raw_response.create(
        model="cheapest", voice="alloy", input="Hello there."
    )
    assert raw.headers["content-type"] == "audio/mpeg"
    assert audio_ms(raw.content) > 300
    assert raw.headers["x-infrai-model"] == SPEECH


@pytest.mark.parametrize(
    ("body", "param"),
    [({"input": "x"}, "voice"), ({"voice": "alloy"}, "input"),
     ({"voice": "alloy", "input": "x", "response_format": "ogg"}, "response_format"),
     ({"voice": "alloy", "input": "x", "speed": 5}, "speed"),
     ({"voice": "alloy", "input": "x", "model": WHISPER}, "model")],
)  # fmt: skip
def test_bad_speech_requests_are_400_before_any_hold(issue_key, api_base, body, param):
    assert_400_before_any_hold(api_base, issue_key(), "audio/speech", body, param)


# --- transcription ---------------------------------------------------------------------------
def test_sdk_transcription_of_an_uploaded_file_bills_seconds(issue_key, client_for, wav):
    raw = client_for(issue_key()).audio.transcriptions.with_raw_response.create(
        model=WHISPER, file=("fox.wav", wav, "audio/wav")
    )
    result = raw.parse()
    assert "quick brown fox" in result.text.lower()
    infrai = result.model_extra["infrai"]
    assert infrai["vendor"] == "infrai-gpu" and raw.headers["x-infrai-model"] == WHISPER
    cost = assert_billed(
        infrai["request_id"],
        model=WHISPER,
        vendor="infrai-gpu",
        usage=Usage(audio_ms=audio_ms(wav)),
    )
    assert cost == infrai["cost_nanos"] and 20_000 < cost < 200_000  # $0.00002/s, 1-10 s


def test_an_identical_transcription_is_answered_from_the_cache(issue_key, client_for, wav):
    client = client_for(issue_key())
    first = client.audio.transcriptions.create(model=WHISPER, file=("fox.wav", wav, "audio/wav"))
    second = client.audio.transcriptions.create(model=WHISPER, file=("fox.wav", wav, "audio/wav"))
    assert first.text == second.text
    assert (first.model_extra["infrai"]["cache"], second.model_extra["infrai"]["cache"]) == (
        False,
        True,
    )
    assert second.model_extra["infrai"]["cost_nanos"] == 0
    assert LedgerEntry.objects.filter(kind="usage").count() == 1


@pytest.mark.parametrize(
    ("fmt", "content_type", "marker"),
    [("text", "text/plain", "quick brown fox"), ("srt", "text/plain", "-->"),
     ("vtt", "text/vtt", "WEBVTT")],
)  # fmt: skip
def test_text_formats(issue_key, client_for, wav, fmt, content_type, marker):
    raw = client_for(issue_key()).audio.transcriptions.with_raw_response.create(
        model="auto", file=("fox.wav", wav), response_format=fmt
    )
    assert raw.headers["content-type"].startswith(content_type)
    assert marker in raw.text.lower() or marker in raw.text
    assert raw.headers["x-infrai-vendor"] == "infrai-gpu"
    assert float(raw.headers["x-infrai-cost-usd"]) > 0


def test_verbose_json_with_word_timestamps(issue_key, client_for, wav):
    result = client_for(issue_key()).audio.transcriptions.create(
        model=WHISPER,
        file=("fox.wav", wav),
        response_format="verbose_json",
        timestamp_granularities=["word"],
    )
    assert abs(result.duration * 1000 - audio_ms(wav)) < 50
    assert "fox" in [w.word.strip().lower().strip(".") for w in result.words]
    assert result.model_extra["infrai"]["cost_nanos"] > 0


def test_base64_json_upload(issue_key, api_base, wav):
    response = httpx.post(
        f"{api_base}/audio/transcriptions",
        json={"model": WHISPER, "file": "data:audio/wav;base64," + base64.b64encode(wav).decode()},
        headers={"authorization": f"Bearer {issue_key()}"},
        timeout=120,
    )
    body = response.json()
    assert response.status_code == 200 and "quick brown fox" in body["text"].lower()
    assert body["infrai"]["cost_nanos"] > 0


def test_uploads_may_exceed_the_body_limit_but_not_the_upload_limit(
    issue_key, client_for, api_base, wav, settings
):
    settings.INFRAI_MAX_BODY_BYTES = 1024
    key = issue_key()
    client = client_for(key)
    assert "fox" in client.audio.transcriptions.create(model=WHISPER, file=("a.wav", wav)).text
    big = httpx.post(
        f"{api_base}/embeddings",
        json={"model": "all-MiniLM-L6-v2", "input": "x" * 2048},
        headers={"authorization": f"Bearer {key}"},
    )
    assert big.status_code == 413
    settings.INFRAI_MAX_UPLOAD_BYTES = len(wav) // 2
    with pytest.raises(openai.APIStatusError) as caught:
        client.audio.transcriptions.create(model=WHISPER, file=("a.wav", wav))
    assert caught.value.status_code == 413
    assert caught.value.body["code"] == "request_too_large"


@pytest.mark.parametrize(
    ("file", "fields", "param"),
    [(b"this is not audio at all", {}, "file"),
     (None, {}, "file"),
     (b"RIFF", {"response_format": "xml"}, "response_format"),
     (b"RIFF", {"timestamp_granularities[]": "word"}, "timestamp_granularities"),
     (b"RIFF", {"model": SPEECH}, "model")],
)  # fmt: skip
def test_bad_transcriptions_are_400_before_any_hold(issue_key, api_base, wav, file, fields, param):
    files = {"file": ("a.wav", wav if file == b"RIFF" else file)} if file is not None else None
    response = httpx.post(
        f"{api_base}/audio/transcriptions",
        data={"model": WHISPER, **fields},
        files=files or {"other": ("x.txt", b"x")},
        headers={"authorization": f"Bearer {issue_key()}"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert not Hold.objects.exists()


# --- hostile uploads (issue 12) ----------------------------------------------------------------
def _multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[str, bytes]:
    request = httpx.Request("POST", "http://x/", data=fields, files=files)
    return request.headers["content-type"], request.read()


def _counting(monkeypatch, module, name):
    calls = []
    original = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def test_a_zero_balance_key_gets_its_402_before_the_upload_is_read(
    issue_key, api_base, wav, monkeypatch
):
    parsed = _counting(monkeypatch, multipart, "parse")
    probed = _counting(monkeypatch, audio, "audio_duration_ms")
    key = issue_key(credit_usd="0")
    content_type, body = _multipart({"model": WHISPER}, {"file": ("fox.wav", wav)})
    host, port = api_base.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            (
                f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {host}\r\n"
                f"Authorization: Bearer {key}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
        )  # ... and not one byte of the body
        head = sock.recv(65536).decode("latin-1")
    assert head.startswith("HTTP/1.1 402 ")
    assert "x-should-retry: false" in head.lower()
    with pytest.raises(openai.APIStatusError) as caught:
        openai.OpenAI(base_url=api_base, api_key=key, max_retries=0).audio.transcriptions.create(
            model=WHISPER, file=("fox.wav", wav)
        )
    assert caught.value.status_code == 402
    assert caught.value.body["code"] == "insufficient_quota"
    assert parsed == [] and probed == []  # neither parsed nor decoded
    assert not Hold.objects.exists()


def test_a_many_part_body_is_parsed_off_the_event_loop_and_refused_after_the_cap(
    issue_key, api_base, live_url, wav, monkeypatch
):
    entered, release = threading.Event(), threading.Event()
    original = multipart.parse

    def held_parse(*args, **kwargs):
        entered.set()
        release.wait(60)  # the parse is "slow" until the test has its /healthz answer
        return original(*args, **kwargs)

    monkeypatch.setattr(multipart, "parse", held_parse)
    parts = _counting(monkeypatch, multipart._Collector, "on_part_begin")
    content_type, body = _multipart(
        {f"field{i}": "x" for i in range(40_000)}, {"file": ("fox.wav", wav)}
    )
    result: dict[str, httpx.Response] = {}

    def upload() -> None:
        result["response"] = httpx.post(
            f"{api_base}/audio/transcriptions",
            content=body,
            headers={"authorization": f"Bearer {issue_key()}", "content-type": content_type},
            timeout=120,
        )

    uploader = threading.Thread(target=upload)
    uploader.start()
    try:
        assert entered.wait(60), "the upload never reached the parser"
        # While the parser holds its thread, the event loop still answers everyone else.
        assert httpx.get(live_url + "/healthz", timeout=30).status_code == 200
    finally:
        release.set()
        uploader.join(120)
    response = result["response"]
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "file" and "at most 16 parts" in error["message"]
    assert len(parts) == multipart.MAX_PARTS + 1  # 17 of 40,001 parts were looked at
    assert not Hold.objects.exists()


def test_undecodable_audio_is_a_400_without_codec_internals(issue_key, client_for):
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(issue_key()).audio.transcriptions.create(
            model=WHISPER, file=("fake.mp3", b"\xff\xfb\x90\x00" + bytes(range(256)) * 40)
        )
    message = caught.value.body["message"]
    assert caught.value.body["param"] == "file" and "not audio we can decode" in message
    assert "errno" not in message.lower() and "invalid data" not in message.lower()
    assert not Hold.objects.exists()


def test_audio_longer_than_the_cap_is_a_400_before_any_hold(issue_key, client_for, wav, settings):
    settings.INFRAI_MAX_AUDIO_SECONDS = 1
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(issue_key()).audio.transcriptions.create(model=WHISPER, file=("a.wav", wav))
    assert caught.value.body["param"] == "file"
    assert "longer than the limit of 1 seconds" in caught.value.body["message"]
    assert not Hold.objects.exists()


def test_the_duration_comes_from_the_header_and_equals_the_decoded_samples(wav, monkeypatch):
    counted = _counting(monkeypatch, audio, "_counted_ms")
    assert audio.audio_duration_ms(wav, max_ms=3_600_000) == audio_ms(wav)
    assert counted == []  # metadata only: no frame-by-frame decode
    # A header that states far less audio than the file holds is not believed.
    understated = _wav_header(rate=16000, data_bytes=320) + bytes(16000 * 2 * 20)
    assert audio.audio_duration_ms(understated, max_ms=3_600_000) >= 0
    assert counted == ["_counted_ms"]


def _wav_header(*, rate: int, data_bytes: int) -> bytes:
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (
        b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVEfmt " + struct.pack("<I", 16) + fmt
        + b"data" + struct.pack("<I", data_bytes)
    )  # fmt: skip
