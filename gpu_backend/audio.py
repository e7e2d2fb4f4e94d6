"""PCM ↔ OpenAI audio formats with PyAV (mp3, opus, aac, flac, wav, pcm)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import cast

import av
import numpy as np
from av.audio.stream import AudioStream

OUTPUT_RATE = 24000  # OpenAI's speech output rate (``pcm`` is documented as 24 kHz s16le)


@dataclass(frozen=True)
class AudioFormat:
    """How one OpenAI ``response_format`` is produced."""

    container: str | None  # None: raw samples, no container
    codec: str
    rate: int
    content_type: str


FORMATS: dict[str, AudioFormat] = {
    "mp3": AudioFormat("mp3", "libmp3lame", OUTPUT_RATE, "audio/mpeg"),
    "opus": AudioFormat("ogg", "libopus", 48000, "audio/ogg"),
    "aac": AudioFormat("adts", "aac", OUTPUT_RATE, "audio/aac"),
    "flac": AudioFormat("flac", "flac", OUTPUT_RATE, "audio/flac"),
    "wav": AudioFormat("wav", "pcm_s16le", OUTPUT_RATE, "audio/wav"),
    "pcm": AudioFormat(None, "pcm_s16le", OUTPUT_RATE, "audio/pcm"),
}


def _mono_frame(samples: np.ndarray, rate: int) -> av.AudioFrame:
    """An s16 mono PyAV frame holding ``samples`` (int16, 1-D)."""
    frame = av.AudioFrame.from_ndarray(
        samples.astype(np.int16).reshape(1, -1), format="s16", layout="mono"
    )
    frame.sample_rate = rate
    return frame


def resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    """int16 mono ``samples`` at ``rate`` → int16 mono at ``target`` (libswresample)."""
    if rate == target:
        return samples.astype(np.int16)
    resampler = av.AudioResampler(format="s16", layout="mono", rate=target)
    frames = resampler.resample(_mono_frame(samples, rate)) + resampler.resample(None)
    if not frames:
        return np.zeros(0, dtype=np.int16)
    return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.int16)


def encode(samples: np.ndarray, rate: int, response_format: str) -> bytes:
    """Encode int16 mono ``samples`` at ``rate`` Hz as OpenAI's ``response_format``.

    Raises ``KeyError`` for a format not in ``FORMATS`` (validate before calling).
    """
    fmt = FORMATS[response_format]
    pcm = resample(samples, rate, fmt.rate)
    if fmt.container is None:
        return pcm.astype("<i2").tobytes()
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=fmt.container) as container:
        stream = cast(AudioStream, container.add_stream(fmt.codec, rate=fmt.rate, layout="mono"))
        for packet in stream.encode(_mono_frame(pcm, fmt.rate)):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buffer.getvalue()


def decode(data: bytes, target_rate: int = 16000) -> tuple[np.ndarray, float]:
    """Any container/codec PyAV reads → (float32 mono samples at ``target_rate``, duration s).

    Raises ``ValueError`` when ``data`` holds no decodable audio stream.
    """
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise ValueError("the file has no audio stream")
            resampler = av.AudioResampler(format="flt", layout="mono", rate=target_rate)
            chunks: list[np.ndarray] = []
            for frame in container.decode(audio=0):
                chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(frame))
            chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(None))
    except (av.error.FFmpegError, IndexError) as exc:
        raise ValueError(f"could not decode audio: {exc}") from exc
    audio = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, dtype=np.float32)
    return audio, len(audio) / target_rate
