"""``GET /metrics``: the backend's state in Prometheus' text exposition format (version 0.0.4).

Written by hand (a few gauges and counters; no client library in the model server's
dependencies). Every series carries a ``model`` label. What a scrape reads:

- per model: ``infrai_gpu_backend_model_ready`` (1 ready, 0 not yet or failed) and
  ``infrai_gpu_backend_model_load_seconds``;
- chat: ``…_batch_size`` (sequences decoding now), ``…_queue_depth`` (submitted, not yet
  prefilled), ``…_tokens_per_second`` (tokens generated over the last 10 s / 10),
  ``…_generated_tokens_total``, ``…_sequences_total``, ``…_decode_steps_total``,
  ``…_prefills_total``;
- embeddings (moderation shares its batcher): ``…_queue_depth`` (requests waiting),
  ``…_embedded_texts_total``, ``…_embedding_requests_total``, ``…_forward_passes_total``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from . import CHAT_MODEL_ID, EMBEDDING_MODEL_ID
from .backend import Backend

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "infrai_gpu_backend_"


@dataclass(frozen=True)
class Sample:
    """One value of a metric family, with its labels."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Family:
    """A metric family: name (without the prefix), type, help text and its samples."""

    name: str
    kind: str  # "gauge" or "counter"
    help: str
    samples: tuple[Sample, ...]


def _escape(value: str) -> str:
    """A label value as the text format wants it (backslash, quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    """Integers without a decimal point, other values in Python's shortest repr."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def render(families: Iterable[Family]) -> str:
    """The exposition text: ``# HELP`` and ``# TYPE`` lines, then one line per sample."""
    lines: list[str] = []
    for family in families:
        name = PREFIX + family.name
        lines.append(f"# HELP {name} {family.help}")
        lines.append(f"# TYPE {name} {family.kind}")
        for sample in family.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items()))
            lines.append(f"{name}{{{labels}}} {_number(sample.value)}")
    return "\n".join(lines) + "\n"


def backend_families(backend: Backend) -> list[Family]:
    """The families of a running ``Backend`` (read without locks: each value is one read of a
    counter or a queue size, so a scrape never waits for the engine)."""
    slots = backend.slots.values()
    families = [
        Family(
            "model_ready",
            "gauge",
            "1 when the model is loaded and serving, else 0 (loading, pending or failed).",
            tuple(
                Sample({"model": s.model_id, "kind": s.kind}, 1.0 if s.state == "ready" else 0.0)
                for s in slots
            ),
        ),
        Family(
            "model_load_seconds",
            "gauge",
            "Seconds the model's load took at this start.",
            tuple(
                Sample({"model": s.model_id, "kind": s.kind}, s.load_seconds)
                for s in slots
                if s.load_seconds is not None
            ),
        ),
    ]
    engine, batcher = backend.engine, backend.embedding_batcher
    chat, embed = {"model": CHAT_MODEL_ID}, {"model": EMBEDDING_MODEL_ID}
    queued = []
    if engine is not None:
        queued.append(Sample(chat, engine.queue_depth))
    if batcher is not None:
        queued.append(Sample(embed, batcher.queue_depth))
    families.append(
        Family("queue_depth", "gauge", "Requests (chat: sequences) waiting for the model.",
               tuple(queued))
    )  # fmt: skip
    if engine is not None:
        counters = engine.stats
        families += _one_sample_each(chat, (
            ("batch_size", "gauge", "Sequences in the running decode batch.", engine.batch_size),
            ("tokens_per_second", "gauge",
             "Tokens generated per second over the last 10 s, all sequences together.",
             round(engine.rate.per_second(), 3)),
            ("generated_tokens_total", "counter", "Tokens sampled since the start.",
             counters.tokens_generated),
            ("sequences_total", "counter", "Sequences (choices) prefilled since the start.",
             counters.sequences),
            ("decode_steps_total", "counter", "Batched decode forward passes.",
             counters.decode_steps),
            ("prefills_total", "counter", "Batched prefill forward passes.", counters.prefills),
        ))  # fmt: skip
    if batcher is not None:
        texts = batcher.stats
        families += _one_sample_each(embed, (
            ("embedded_texts_total", "counter", "Texts embedded (moderation included).",
             texts.texts),
            ("embedding_requests_total", "counter", "Embedding and moderation requests served.",
             texts.requests),
            ("forward_passes_total", "counter", "Embedding forward passes.",
             texts.forward_passes),
        ))  # fmt: skip
    return families


def _one_sample_each(
    labels: dict[str, str], rows: Iterable[tuple[str, str, str, float]]
) -> list[Family]:
    """A family of one sample labelled ``labels`` for each ``(name, kind, help, value)`` row."""
    return [Family(name, kind, text, (Sample(labels, value),)) for name, kind, text, value in rows]
