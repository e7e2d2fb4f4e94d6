"""docs/vector_store.md's examples, run verbatim with the official SDK against a live server."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest

from billing.models import LedgerEntry
from inference.models import RequestLog

DOC = Path(__file__).resolve().parents[2] / "docs" / "vector_store.md"

pytestmark = pytest.mark.usefixtures("words")


def snippet(marker: str) -> str:
    """The python block right after ``<!-- marker -->`` in the doc."""
    match = re.search(rf"<!-- {marker} -->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert match, marker
    return match.group(1)


def run(code: str, client: Any) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {"client": client})
    return out.getvalue()


def test_the_rag_example_runs_and_bills_each_step(issue_key, client_for):
    printed = run(snippet("rag-example"), client_for(issue_key()))
    assert printed == "Echo: Why does Mars look red?\n"  # the fake chat vendor echoes

    calls = RequestLog.objects.order_by("created_at")
    assert [c.endpoint for c in calls] == [
        "embeddings", "vector.upsert", "embeddings", "vector.query", "chat.completions",
    ]  # fmt: skip
    charged = {c.endpoint for c in calls if LedgerEntry.objects.filter(request_id=c.request_id)}
    assert charged == {"embeddings", "vector.query", "chat.completions"}


def test_the_rag_example_hands_the_right_document_to_the_chat_model(
    issue_key, client_for, fake_catalog
):
    run(snippet("rag-example"), client_for(issue_key()))
    sent = [r for server in fake_catalog.values() for r in server.requests if "messages" in r]
    system = sent[-1]["messages"][0]["content"]
    assert "iron oxide" in system and "Camellia" not in system


def test_the_vector_stores_example_runs(issue_key, client_for):
    printed = run(snippet("vector-stores-example"), client_for(issue_key()))
    assert printed == "Every employee gets twenty-five days of paid vacation.\n"
