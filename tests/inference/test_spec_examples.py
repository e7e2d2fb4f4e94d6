"""The specifications' own code examples, run verbatim with the official Python SDK.

Each snippet is checked to appear character for character in ``../shared/spec/`` and then
executed against the live app (``client`` pointed at it). Streams must also keep OpenAI's
shape: every chunk has a choice unless usage was asked for; one ``id``, ``created`` and
``model`` throughout; the ``infrai`` object on the chunk with the last ``finish_reason``.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

SPEC = Path(__file__).resolve().parents[3] / "shared" / "spec"

INFRAI_STREAM = """stream = client.chat.completions.create(
    model="auto",
    messages=[{"role": "user", "content": "Write a haiku about smart routing."}],
    stream=True,   # real token-by-token Server-Sent Events
)
for chunk in stream:
    print(chunk.choices[0].delta.content or "", end="", flush=True)"""

INFERCOM_STREAM = """for chunk in completion:
  print(chunk.choices[0].delta.content)"""


def _spec_text() -> str:
    return "\n".join(p.read_text() for p in sorted(SPEC.glob("*.md")))


@pytest.fixture
def client(issue_key, client_for, fake_catalog):  # type: ignore[no-untyped-def]
    return client_for(issue_key())


def _run(snippet: str, namespace: dict) -> str:  # type: ignore[type-arg]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(snippet, namespace)
    return out.getvalue()


@pytest.mark.skipif(not SPEC.exists(), reason="the specifications are beside the repository")
def test_the_streaming_example_runs_verbatim(client):
    assert INFRAI_STREAM in _spec_text()
    printed = _run(INFRAI_STREAM, {"client": client})
    assert printed == "Echo: Write a haiku about smart routing."


@pytest.mark.skipif(not SPEC.exists(), reason="the specifications are beside the repository")
@pytest.mark.parametrize("temperature", [None, 0])  # 0: the second call is a cached replay
def test_the_compatibility_guide_loop_runs_on_live_and_cached_streams(client, temperature):
    assert INFERCOM_STREAM in _spec_text()
    extra = {} if temperature is None else {"temperature": temperature}
    for _ in range(2):
        completion = client.chat.completions.create(
            model="test-large",
            messages=[{"role": "user", "content": "Share a happy story with me"}],
            stream=True,
            **extra,
        )
        printed = _run(INFERCOM_STREAM, {"completion": completion})
        assert "Echo:" in printed


@pytest.mark.parametrize("include_usage", [False, True])
@pytest.mark.parametrize("temperature", [None, 0])
def test_stream_chunks_keep_openai_shape(client, include_usage, temperature):
    extra = {"stream_options": {"include_usage": True}} if include_usage else {}
    if temperature is not None:
        extra["temperature"] = temperature
    for attempt in range(2 if temperature == 0 else 1):
        chunks = list(
            client.chat.completions.create(
                model="test-large",
                messages=[{"role": "user", "content": "one two three"}],
                stream=True,
                **extra,
            )
        )
        assert len({(c.id, c.created, c.model) for c in chunks}) == 1
        with_choices = [c for c in chunks if c.choices]
        empty = [c for c in chunks if not c.choices]
        assert len(empty) == (1 if include_usage else 0)
        finishing = [c for c in with_choices if c.choices[0].finish_reason]
        assert finishing[-1] is with_choices[-1]
        infrai = finishing[-1].infrai
        assert infrai["cache"] is (attempt == 1)
        if include_usage:
            assert empty[0].usage.completion_tokens > 0 and empty[0].infrai == infrai
        else:
            assert all(getattr(c, "infrai", None) is None for c in with_choices[:-1])
