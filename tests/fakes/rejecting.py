"""A fake vendor that refuses requests with a body of the test's choosing (vendor 4xx mapping).

:class:`RejectingVendor` is a :class:`~tests.fakes.vendors.FakeVendor` whose ``rejection`` —
``(status, JSON body)`` — is answered to every request while it is set (OpenAI's
``{"error": {…}}``, vLLM's flat ``{"object": "error", …}`` or Anthropic's shape).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.vendors import FakeVendor


@dataclass
class RejectingVendor(FakeVendor):
    rejection: tuple[int, dict[str, Any]] | None = None

    def reset(self) -> None:
        super().reset()
        self.rejection = None

    async def _gate(self, request: web.Request) -> tuple[dict[str, Any], web.Response | None]:
        body, failure = await super()._gate(request)
        if failure is None and self.rejection is not None:
            status, payload = self.rejection
            return body, web.json_response(payload, status=status)
        return body, failure
