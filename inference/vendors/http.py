"""The gateway's HTTP client for vendor calls: one pooled ``aiohttp`` session per event loop.

aiohttp parses HTTP in C; on this path it costs about a fifth of the CPU httpx does per call
(``docs/performance.md``). Adapters see only this module's small surface — :func:`request`
for a complete answer, :func:`stream` for one read as it arrives — and every transport failure
leaves it as a :class:`~inference.vendors.errors.VendorError` (``errors.translate``), never as
an aiohttp exception.

Timeouts per call (from the target, so settings changes apply at once): ``connect`` to open
the connection, ``read`` the longest silence between two reads (before the answer, or
between two chunks of a stream). There is no total timeout: a stream may run as long as the
vendor keeps sending (``INFRAI_MAX_STREAM_S`` bounds it above this layer).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import yarl

from inference.vendors import errors
from inference.vendors.base import VendorTarget
from infra import jsonio

_USER_AGENT = "infrai-gateway/0.1"
# The longest stream line we read (a chunk carrying a large tool-call argument); a longer one
# is a vendor sending garbage.
_MAX_LINE_BYTES = 4 << 20
_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
    weakref.WeakKeyDictionary()
)


def session() -> aiohttp.ClientSession:
    """The shared session of the running loop, created on first use (a pool cannot cross
    loops). Keep-alive connections are pooled per host."""
    loop = asyncio.get_running_loop()
    current = _sessions.get(loop)
    if current is None or current.closed:
        current = aiohttp.ClientSession(
            # No cap on connections: a cap would make every stream beyond it wait, silently,
            # for one of the open streams to end. What a process serves is bounded upstream
            # (its clients' connections, the wallet's holds, the key's rate limits).
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
            headers={"user-agent": _USER_AGENT},
            # The Content-Type a vendor declares is trusted as is; no cookies between calls.
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        _sessions[loop] = current
    return current


async def close() -> None:
    """Close the running loop's session (process shutdown)."""
    current = _sessions.pop(asyncio.get_running_loop(), None)
    if current is not None:
        await current.close()


def _timeout(target: VendorTarget) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(
        total=None, sock_connect=target.connect_timeout_s, sock_read=target.read_timeout_s
    )


def _url(target: VendorTarget, path: str, *, encoded: bool = False) -> str | yarl.URL:
    """The URL of ``path`` at ``target``; ``encoded``: the path is percent-encoded already and
    goes out byte for byte (a signature covers it: yarl would otherwise decode ``%3A``)."""
    url = target.base_url.rstrip("/") + "/" + path
    return yarl.URL(url, encoded=True) if encoded else url


def _headers(auth: Mapping[str, str] | None) -> dict[str, str]:
    return dict(auth or {})


@dataclass(frozen=True, slots=True)
class VendorResponse:
    """A vendor's complete answer."""

    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body parsed as JSON (``ValueError`` when it is not)."""
        return jsonio.loads(self.body)


async def request(
    target: VendorTarget,
    method: str,
    path: str,
    *,
    auth: Mapping[str, str] | None = None,
    json_body: Any = None,
    form: aiohttp.FormData | None = None,
    encoded: bool = False,
) -> VendorResponse:
    """Send one request to ``target`` (``path`` relative to its base URL; ``encoded``: see
    :func:`stream`) and read the whole answer. Transport failures raise :class:`VendorError`;
    any HTTP status is returned."""
    async with stream(
        target, method, path, auth=auth, json_body=json_body, form=form, encoded=encoded
    ) as response:
        return await response.read()


class VendorStream:
    """A vendor's answer read as it arrives (inside :func:`stream`)."""

    def __init__(self, target: VendorTarget, response: aiohttp.ClientResponse) -> None:
        self._vendor = target.vendor
        self._response = response
        self.status = response.status
        self.reason = response.reason or ""
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> VendorResponse:
        """The rest of the body, whole (for an error status)."""
        with errors.translate(self._vendor):
            body = await self._response.read()
        return VendorResponse(self.status, self.reason, self.headers, body)

    async def lines(self) -> AsyncIterator[str]:
        """The body's lines without their line endings (``\n``, ``\r\n`` or ``\r``),
        decoded as UTF-8 (invalid bytes replaced), as the vendor sends them.

        Reads whatever arrived and splits it: one await per network read, not per line (a
        stream chunk is two lines). A line longer than 4 MiB is a protocol error.
        """
        pending = b""
        with errors.translate(self._vendor):
            async for data in self._response.content.iter_any():
                pending += data
                held = b""
                if b"\r" in pending:
                    if pending.endswith(b"\r"):  # maybe the first half of a \r\n
                        pending, held = pending[:-1], b"\r"
                    pending = pending.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                *complete, pending = pending.split(b"\n")
                pending += held
                for line in complete:
                    yield line.decode("utf-8", "replace")
                if len(pending) > _MAX_LINE_BYTES:
                    raise errors.VendorProtocolError(
                        f"{self._vendor} sent a stream line over {_MAX_LINE_BYTES} bytes",
                        vendor=self._vendor,
                    )
        if pending:
            yield pending.decode("utf-8", "replace")

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes in the pieces they arrive in."""
        with errors.translate(self._vendor):
            async for chunk in self._response.content.iter_any():
                yield chunk


@asynccontextmanager
async def stream(
    target: VendorTarget,
    method: str,
    path: str,
    *,
    auth: Mapping[str, str] | None = None,
    json_body: Any = None,
    form: aiohttp.FormData | None = None,
    encoded: bool = False,
) -> AsyncIterator[VendorStream]:
    """Send one request and yield its answer unread; leaving the block closes the connection
    (a vendor still sending is cut off, so an abandoned stream stops costing). ``encoded``:
    ``path`` is percent-encoded already and is sent as is (Bedrock signs its model ids'
    ``%3A``)."""
    headers = _headers(auth)
    data: aiohttp.FormData | bytes | None = form
    if json_body is not None:  # encoded by orjson (aiohttp's json= uses the standard library)
        data = jsonio.dumps(json_body)
        headers["content-type"] = "application/json"
    with errors.translate(target.vendor):
        response = await session().request(
            method,
            _url(target, path, encoded=encoded),
            data=data,
            headers=headers,
            timeout=_timeout(target),
        )
    try:
        yield VendorStream(target, response)
    finally:
        if response.content.at_eof():
            response.release()  # read to the end: the connection is reused
        else:
            response.close()
