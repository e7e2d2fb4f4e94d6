"""Text to speech: the piper voice ``en_US-joe-medium`` (GPL-3.0, optional), espeak-ng fallback.

Both engines return int16 mono samples and their rate; ``audio.encode`` turns them into the
requested OpenAI format. Piper runs with zero noise, so the same text gives the same audio.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import threading
import wave
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .device import DeviceSpec
from .locate import joe_voice

# OpenAI's voice names; there is one local voice, so each of them (and "joe") selects it.
OPENAI_VOICES: frozenset[str] = frozenset(
    {
        "alloy",
        "ash",
        "ballad",
        "coral",
        "echo",
        "fable",
        "onyx",
        "nova",
        "sage",
        "shimmer",
        "verse",
        "marin",
        "cedar",
        "joe",
    }
)
MAX_INPUT_CHARS = 4096


class Synthesizer(Protocol):
    """A TTS engine: text and speed factor (0.25–4.0) → (int16 mono samples, sample rate)."""

    name: str

    def synthesize(self, text: str, speed: float) -> tuple[np.ndarray, int]: ...


class PiperSynthesizer:
    """Piper with the joe voice, deterministic (``noise_scale = noise_w_scale = 0``)."""

    name = "piper"

    def __init__(self, threads: int, spec: DeviceSpec) -> None:
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        model_path, config_path = joe_voice()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        if spec.is_cuda and "CUDAExecutionProvider" in onnxruntime.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        session = onnxruntime.InferenceSession(
            str(model_path), sess_options=options, providers=providers
        )
        config = PiperConfig.from_dict(_read_json(config_path))
        self._voice = PiperVoice(session=session, config=config)
        self._lock = threading.Lock()

    def synthesize(self, text: str, speed: float) -> tuple[np.ndarray, int]:
        """Synthesize ``text``; ``speed`` 2.0 halves the phoneme lengths."""
        from piper import SynthesisConfig

        config = SynthesisConfig(
            noise_scale=0.0,
            noise_w_scale=0.0,
            length_scale=self._voice.config.length_scale / speed,
        )
        with self._lock:
            chunks = list(self._voice.synthesize(text, syn_config=config))
        rate = self._voice.config.sample_rate
        if not chunks:
            return np.zeros(0, dtype=np.int16), rate
        return np.concatenate([c.audio_int16_array.reshape(-1) for c in chunks]), rate


class EspeakSynthesizer:
    """The ``espeak-ng`` command (Debian package ``espeak-ng``): robotic but always available."""

    name = "espeak-ng"
    BASE_WPM = 175

    def __init__(self) -> None:
        binary = shutil.which("espeak-ng")
        if binary is None:
            raise RuntimeError(
                "neither piper-tts nor espeak-ng is installed (apt-get install -y espeak-ng)"
            )
        self._binary = binary

    def synthesize(self, text: str, speed: float) -> tuple[np.ndarray, int]:
        """Run ``espeak-ng --stdout`` and read its WAV output."""
        wpm = str(max(80, min(500, round(self.BASE_WPM * speed))))
        result = subprocess.run(
            [self._binary, "--stdout", "-v", "en-us", "-s", wpm, "--", text],
            capture_output=True,
            check=True,
            timeout=120,
        )
        with wave.open(io.BytesIO(result.stdout)) as wav:
            rate = wav.getframerate()
            frames = wav.readframes(wav.getnframes())
        return np.frombuffer(frames, dtype="<i2").astype(np.int16), rate


def _read_json(path: Path) -> dict[str, Any]:
    """The JSON object stored at ``path``."""
    return dict(json.loads(path.read_text(encoding="utf-8")))


def load_synthesizer(engine: str, threads: int, spec: DeviceSpec) -> Synthesizer:
    """The requested engine; ``auto`` falls back to espeak-ng when piper-tts is missing."""
    if engine not in {"auto", "piper", "espeak"}:
        raise ValueError(f"tts engine must be auto, piper or espeak, not {engine!r}")
    if engine == "espeak":
        return EspeakSynthesizer()
    try:
        return PiperSynthesizer(threads, spec)
    except ImportError:
        if engine == "piper":
            raise
        return EspeakSynthesizer()
