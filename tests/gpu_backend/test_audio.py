"""Speech (piper joe voice) and transcription (whisper tiny.en) on the real server."""

from __future__ import annotations

import base64
import io
import json
import re

import av
import httpx
import openai
import pytest

SPEECH = "piper-en-us-joe"
WHISPER = "whisper-tiny.en"
SENTENCE = "The quick brown fox jumps over the lazy dog."


def words(text: str) -> list[str]:
    """Lower-case words without punctuation."""
    return re.findall(r"[a-z']+", text.lower())


def speak(http: httpx.Client, text: str = SENTENCE, **params: object) -> httpx.Response:
    """POST /v1/audio/speech and check the status."""
    response = http.post(
        "/v1/audio/speech", json={"model": SPEECH, "voice": "alloy", "input": text, **params}
    )
    assert response.status_code == 200, response.text
    return response


def decoded_seconds(data: bytes) -> float:
    """Seconds of audio PyAV decodes from ``data`` (any container)."""
    with av.open(io.BytesIO(data), mode="r") as container:
        stream = container.streams.audio[0]
        samples: int = sum(frame.samples for frame in container.decode(stream))
        return samples / stream.rate


@pytest.fixture(scope="module")
def wav_bytes(http: httpx.Client) -> bytes:
    """The sentence spoken once, as WAV."""
    return speak(http, response_format="wav").content


@pytest.mark.parametrize(
    ("fmt", "content_type"),
    [("mp3", "audio/mpeg"), ("opus", "audio/ogg"), ("aac", "audio/aac"), ("flac", "audio/flac"),
     ("wav", "audio/wav")],
)  # fmt: skip
def test_each_container_format_decodes(http: httpx.Client, fmt: str, content_type: str) -> None:
    response = speak(http, response_format=fmt)
    assert response.headers["content-type"].startswith(content_type)
    assert 1.0 < decoded_seconds(response.content) < 10.0


def test_pcm_is_raw_24khz_16bit(http: httpx.Client, wav_bytes: bytes) -> None:
    pcm = speak(http, response_format="pcm").content
    assert len(pcm) % 2 == 0
    assert len(pcm) / 2 / 24000 == pytest.approx(decoded_seconds(wav_bytes), abs=0.01)


def test_default_format_is_mp3_and_speed_shortens_audio(
    http: httpx.Client, wav_bytes: bytes
) -> None:
    default = speak(http)
    assert default.headers["content-type"].startswith("audio/mpeg")
    fast = speak(http, response_format="wav", speed=2.0).content
    assert decoded_seconds(fast) < 0.7 * decoded_seconds(wav_bytes)


def test_speech_is_deterministic(http: httpx.Client, wav_bytes: bytes) -> None:
    assert speak(http, response_format="wav").content == wav_bytes


def test_round_trip_speech_to_transcription_recovers_the_words(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    mp3 = speak(http, response_format="mp3").content
    result = client.audio.transcriptions.create(model=WHISPER, file=("speech.mp3", mp3))
    assert words(result.text) == words(SENTENCE)


def test_base64_json_upload(http: httpx.Client, wav_bytes: bytes) -> None:
    plain = base64.b64encode(wav_bytes).decode()
    as_json = http.post("/v1/audio/transcriptions", json={"model": WHISPER, "file": plain})
    data_url = f"data:audio/wav;base64,{plain}"
    as_text = http.post(
        "/v1/audio/transcriptions",
        json={"model": WHISPER, "file": data_url, "response_format": "text"},
    )
    assert as_json.status_code == 200, as_json.text
    assert words(as_json.json()["text"]) == words(SENTENCE)
    assert as_json.json()["usage"] == {"type": "duration", "seconds": 3}
    assert as_text.status_code == 200
    assert as_text.headers["content-type"].startswith("text/plain")
    assert as_text.text.endswith("\n") and words(as_text.text) == words(SENTENCE)


def transcribe(http: httpx.Client, audio: bytes, **fields: str | list[str]) -> httpx.Response:
    """Multipart upload (``files`` + form fields) as the OpenAI SDK sends it."""
    response = http.post(
        "/v1/audio/transcriptions",
        files={"file": ("speech.wav", audio, "audio/wav")},
        data={"model": WHISPER, **fields},
    )
    assert response.status_code == 200, response.text
    return response


def test_srt_and_vtt_formats(http: httpx.Client, wav_bytes: bytes) -> None:
    srt = transcribe(http, wav_bytes, response_format="srt").text
    vtt = transcribe(http, wav_bytes, response_format="vtt").text

    assert re.match(r"1\n00:00:00,000 --> 00:00:0\d,\d{3}\n", srt)
    assert words(srt.split("\n", 2)[2]) == words(SENTENCE)
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:0")
    assert words(vtt.split("\n", 3)[3]) == words(SENTENCE)


def test_verbose_json_with_word_timestamps(http: httpx.Client, wav_bytes: bytes) -> None:
    body = json.loads(
        transcribe(
            http, wav_bytes, response_format="verbose_json",
            **{"timestamp_granularities[]": ["word", "segment"]},
        ).text
    )  # fmt: skip
    assert body["task"] == "transcribe" and body["language"] == "english"
    assert 1.0 < body["duration"] < 10.0
    assert words(body["text"]) == words(SENTENCE)
    assert [words(w["word"])[0] for w in body["words"]] == words(SENTENCE)
    starts = [w["start"] for w in body["words"]]
    assert starts == sorted(starts)
    segment = body["segments"][0]
    assert {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
            "compression_ratio", "no_speech_prob"} <= set(segment)  # fmt: skip


def test_audio_errors(http: httpx.Client) -> None:
    bad_voice = http.post(
        "/v1/audio/speech", json={"model": SPEECH, "voice": "nobody", "input": "hi"}
    )
    bad_format = http.post(
        "/v1/audio/speech",
        json={"model": SPEECH, "voice": "alloy", "input": "hi", "response_format": "ogg"},
    )
    not_audio = http.post(
        "/v1/audio/transcriptions",
        files={"file": ("x.wav", b"not audio at all", "audio/wav")},
        data={"model": WHISPER},
    )
    assert bad_voice.status_code == 400 and bad_voice.json()["error"]["param"] == "voice"
    assert (
        bad_format.status_code == 400 and bad_format.json()["error"]["param"] == "response_format"
    )
    assert not_audio.status_code == 400 and not_audio.json()["error"]["param"] == "file"
