"""Images a caller gave by URL, fetched by the gateway for vendors that take only bytes.

Gemini and Bedrock accept an image as inline bytes, not as an arbitrary web URL; OpenAI's API
accepts the URL and fetches it itself. To serve the same request on every vendor the gateway
fetches the image, which makes it a client that requests addresses its callers choose. So a
fetch reaches **public addresses only** (a host that resolves to a loopback, private,
link-local, multicast or reserved address is refused, and the connection uses only the
addresses that were checked, so a name that re-resolves elsewhere between check and connect
gets nowhere), follows at most :data:`MAX_REDIRECTS` redirects (each target checked again),
reads at most :data:`MAX_IMAGE_BYTES` of an ``image/*`` answer, within the vendor's timeouts.
``INFRAI_FETCH_PRIVATE_URLS`` lifts the address rule (tests, whose image servers are on
127.0.0.1; a deployment whose callers' images live on an internal host).

A refusal is a :class:`~inference.vendors.errors.VendorRejected` with code
``invalid_image_url`` on ``messages`` (what OpenAI answers for an image it cannot download);
the URL itself is never in the message.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket
import weakref
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from django.conf import settings

from inference.vendors import errors
from inference.vendors.base import VendorTarget

MAX_IMAGE_BYTES = 20 * 1024 * 1024  # Gemini's limit on a whole inline request; Bedrock's: 3.75 MB
MAX_REDIRECTS = 3
_sessions: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[bool, aiohttp.ClientSession]
] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class FetchedImage:
    """An image's media type (``image/png`` …) and bytes."""

    media_type: str
    data: bytes


def _public(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_global
    except ValueError:
        return False


class _PublicOnlyResolver(AbstractResolver):
    """aiohttp's threaded resolver, keeping only public addresses: the addresses a connection
    may use are the ones checked (no second lookup to rebind)."""

    def __init__(self) -> None:
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = [r for r in await self._inner.resolve(host, port, family) if _public(r["host"])]
        if not found:
            raise OSError(f"{host} has no public address")
        return found

    async def close(self) -> None:
        await self._inner.close()


def _session(private_allowed: bool) -> aiohttp.ClientSession:
    loop = asyncio.get_running_loop()
    by_rule = _sessions.setdefault(loop, {})
    current = by_rule.get(private_allowed)
    if current is None or current.closed:
        connector = (
            aiohttp.TCPConnector(limit=0)
            if private_allowed
            else aiohttp.TCPConnector(limit=0, resolver=_PublicOnlyResolver())
        )
        current = aiohttp.ClientSession(
            connector=connector,
            headers={"user-agent": "infrai-gateway/0.1 (image fetch)"},
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        by_rule[private_allowed] = current
    return current


def _refused(target: VendorTarget, why: str) -> errors.VendorRejected:
    return errors.VendorRejected(
        f"{target.vendor} takes images as bytes, so the gateway fetches image URLs, and one {why}",
        status=400,
        vendor=target.vendor,
        code="invalid_image_url",
        param="messages",
    )


async def _check_address(url: str, target: VendorTarget) -> None:
    """Refuse ``url`` unless it is http(s) and its host has only public addresses."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refused(target, "is not an http(s) URL")
    host = parts.hostname
    try:
        ipaddress.ip_address(host)
        addresses = [host]  # a literal address: the connection uses it as it is
    except ValueError:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, parts.port or 443, type=socket.SOCK_STREAM
            )
        except OSError:
            raise _refused(target, "names a host that does not resolve") from None
        addresses = [str(info[4][0]) for info in infos]
    if not addresses or not all(_public(a) for a in addresses):
        raise _refused(target, "points to an address that is not public")


async def fetch_image(url: str, target: VendorTarget) -> FetchedImage:
    """The image at ``url`` (see the module docstring for the rules); raises
    ``VendorRejected`` (``invalid_image_url``) when it cannot or may not be fetched."""
    private_allowed = bool(getattr(settings, "INFRAI_FETCH_PRIVATE_URLS", False))
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=target.connect_timeout_s, sock_read=target.read_timeout_s
    )
    for _ in range(MAX_REDIRECTS + 1):
        if not private_allowed:
            await _check_address(url, target)
        try:
            async with _session(private_allowed).get(
                url, allow_redirects=False, timeout=timeout
            ) as response:
                if response.status in (301, 302, 303, 307, 308) and "location" in response.headers:
                    url = urljoin(url, response.headers["location"])
                    continue
                return await _read_image(response, target)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _refused(target, f"could not be fetched ({type(exc).__name__})") from None
    raise _refused(target, f"redirects more than {MAX_REDIRECTS} times")


async def _read_image(response: aiohttp.ClientResponse, target: VendorTarget) -> FetchedImage:
    if response.status != 200:
        raise _refused(target, f"answered {response.status}")
    media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if not media_type.startswith("image/"):
        raise _refused(target, "is not an image")
    data = bytearray()
    async for chunk in response.content.iter_any():
        data += chunk
        if len(data) > MAX_IMAGE_BYTES:
            raise _refused(target, f"is larger than {MAX_IMAGE_BYTES} bytes")
    return FetchedImage(media_type, bytes(data))


async def close() -> None:
    """Close the running loop's fetch sessions (process shutdown)."""
    for session in (_sessions.pop(asyncio.get_running_loop(), None) or {}).values():
        await session.close()


def image_urls(payload: dict[str, Any]) -> list[str]:
    """The ``http(s)`` image URLs of a chat request's messages, in order, each once."""
    seen: dict[str, None] = {}
    for message in payload.get("messages") or ():
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") == "image_url":
                image = part.get("image_url") or {}
                url = image.get("url", "") if isinstance(image, dict) else str(image)
                if url.startswith(("http://", "https://")):
                    seen[url] = None
    return list(seen)


async def inline_images(payload: dict[str, Any], target: VendorTarget) -> dict[str, Any]:
    """``payload`` with each ``http(s)`` image URL replaced by a ``data:`` URL of the image
    fetched (each URL once); the same ``payload`` when it has none. Raises like
    :func:`fetch_image`."""
    urls = image_urls(payload)
    if not urls:
        return payload
    inline: dict[str, str] = {}
    for url in urls:
        image = await fetch_image(url, target)
        encoded = base64.b64encode(image.data).decode("ascii")
        inline[url] = f"data:{image.media_type};base64,{encoded}"

    def part_of(part: Any) -> Any:
        if not (isinstance(part, dict) and part.get("type") == "image_url"):
            return part
        image = part.get("image_url") or {}
        url = image.get("url", "") if isinstance(image, dict) else str(image)
        if url not in inline:
            return part
        fields = image if isinstance(image, dict) else {}
        return {**part, "image_url": {**fields, "url": inline[url]}}

    messages = []
    for message in payload["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            message = {**message, "content": [part_of(p) for p in content]}
        messages.append(message)
    return {**payload, "messages": messages}
