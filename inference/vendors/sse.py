"""Server-Sent Events parsing (vendor side) and writing (client side)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from infra import jsonio

DONE = b"data: [DONE]\n\n"


async def events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """``(event, data)`` pairs from SSE lines; ``event`` is ``""`` when the stream names none."""
    event, data = "", list[str]()
    async for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "", list[str]()
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if data:
        yield event, "\n".join(data)


def encode(obj: dict[str, Any]) -> bytes:
    """One ``data:`` event carrying ``obj`` as compact JSON."""
    # A vendor string that is not valid Unicode (a lone surrogate) never breaks it.
    return b"data: " + jsonio.dumps(obj) + b"\n\n"
