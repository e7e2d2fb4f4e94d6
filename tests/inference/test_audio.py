"""Speech and transcription end to end: the official SDK → live app → the real gpu-backend's
piper voice and Whisper tiny.en, billed per character and per second of audio."""

from __future__ import annotations

import base64
import io

import av
import httpx
import openai
import pytest

from billing.models import Hold
from billing.pricing import Usage
from tests.inference.conftest import assert_billed

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
    response = httpx.post(
        f"{api_base}/audio/speech", json=body, headers={"authorization": f"Bearer {issue_key()}"}
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == param
    assert not Hold.objects.exists()


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
