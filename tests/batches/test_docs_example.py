"""The "Batches" section of docs/api.md runs verbatim against the live app, its worker being
the beat's sweep."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batches import tasks
from batches.models import Batch, BatchStatus
from tests.batches.test_batches import assert_books_clean
from tests.live import wait_for


def test_the_docs_example_runs_verbatim(
    fake_catalog: Any,
    issue_key: Callable[..., str],
    api_base: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = doc.split("## Batches: `/v1/batches`", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("INFRAI_BASE_URL", api_base)
    monkeypatch.setenv("INFRAI_API_KEY", issue_key())
    failures: list[BaseException] = []

    def client() -> None:
        try:
            exec(compile(example, "docs/api.md", "exec"), {})
        except BaseException as exc:  # re-raised below, in the test's thread
            failures.append(exc)

    thread = threading.Thread(target=client)
    thread.start()
    wait_for(lambda: Batch.objects.exists() or not thread.is_alive())
    tasks.batch_sweep()
    thread.join(timeout=60)
    assert not thread.is_alive() and not failures, failures
    printed = capsys.readouterr().out
    assert Batch.objects.get().status == BatchStatus.COMPLETED
    assert "q0 " in printed and "q2 " in printed and "batch cost" in printed
    assert_books_clean()
