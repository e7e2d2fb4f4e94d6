"""The settlement journal on its own: what is appended stays until it is made, whatever runs
alongside (billing/journal.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from billing import journal


def _intent(request_id: str) -> journal.Intent:
    return journal.Intent(row={"request_id": request_id}, held=True, cost=7)


def test_an_intent_appended_during_a_replay_is_kept(tmp_path: Path, settings) -> None:
    settings.INFRAI_JOURNAL_DIR = tmp_path
    made: list[str] = []

    async def settle(intent: journal.Intent) -> None:
        made.append(intent.request_id)
        if intent.request_id == "req_a":
            await journal.append(_intent("req_b"))  # a call finishing meanwhile

    async def run() -> tuple[int, int]:
        await journal.append(_intent("req_a"))
        first = await journal.replay(settle)
        second = await journal.replay(settle)
        return first, second

    assert asyncio.run(run()) == (0, 0)
    assert made == ["req_a", "req_b"]  # req_b was not lost to the first replay's truncation
    assert journal.pending_everywhere() == {}


def test_a_failed_replay_keeps_the_intent_and_a_torn_line_is_skipped(
    tmp_path: Path, settings
) -> None:
    settings.INFRAI_JOURNAL_DIR = tmp_path

    async def refuse(intent: journal.Intent) -> None:
        raise ConnectionRefusedError("the database is away")

    async def run() -> int:
        await journal.append(_intent("req_c"))
        return await journal.replay(refuse)

    assert asyncio.run(run()) == 1
    own = next(journal.directory().glob("*.jsonl"))
    with own.open("ab") as f:
        f.write(b'{"intent": {"row": {"requ')  # a crash mid-write
    assert journal.pending_everywhere() == {own.name: 1}
