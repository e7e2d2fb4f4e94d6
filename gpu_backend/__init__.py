"""infrai's own inference server: local models behind an OpenAI-compatible HTTP API.

The package runs standalone (``python -m gpu_backend``) and imports nothing of Django;
``manage.py gpu_backend`` is a thin wrapper that fills the options from the settings.
"""

from __future__ import annotations

CHAT_MODEL_ID = "SmolLM2-135M-Instruct"
EMBEDDING_MODEL_ID = "all-MiniLM-L6-v2"
SPEECH_MODEL_ID = "piper-en-us-joe"
TRANSCRIPTION_MODEL_ID = "whisper-tiny.en"
MODERATION_MODEL_ID = "infrai-moderation-minilm"

ALL_MODEL_IDS: tuple[str, ...] = (
    EMBEDDING_MODEL_ID,
    CHAT_MODEL_ID,
    MODERATION_MODEL_ID,
    TRANSCRIPTION_MODEL_ID,
    SPEECH_MODEL_ID,
)
