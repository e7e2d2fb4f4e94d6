"""Image URLs fetched for vendors that take bytes (``inference.vendors.fetch``): public addresses
only, redirects checked and bounded, size and type checked — against real servers on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web

from inference.vendors import errors, fetch
from inference.vendors.base import VendorTarget
from tests.fakes.server import ThreadedServer
from tests.fakes.vendors import png_bytes

T = TypeVar("T")
TARGET = VendorTarget(vendor="gem", base_url="http://unused.test", upstream_model="m")


class ImageHost(ThreadedServer):
    """``/cat.png`` (a PNG), ``/page`` (HTML), ``/big.png`` (over the limit under test),
    ``/hop/<n>`` (redirects n more times, then to ``/cat.png``)."""

    def __init__(self) -> None:
        self.serve_on_free_port("image-host")
        self.hits: list[str] = []

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/{name:.*}", self.serve)

    async def serve(self, request: web.Request) -> web.StreamResponse:
        self.hits.append(request.path)
        name = request.match_info["name"]
        if name == "cat.png":
            return web.Response(body=png_bytes("cat"), content_type="image/png")
        if name == "page":
            return web.Response(text="<html></html>", content_type="text/html")
        if name == "big.png":
            return web.Response(body=b"\0" * 4096, content_type="image/png")
        if name.startswith("hop/"):
            left = int(name.removeprefix("hop/"))
            location = "/cat.png" if left == 0 else f"/hop/{left - 1}"
            raise web.HTTPFound(location)
        return web.Response(status=404)


@pytest.fixture(scope="module")
def host() -> Iterator[ImageHost]:
    with ImageHost() as server:
        yield server


def _root(host: ImageHost) -> str:
    return f"http://127.0.0.1:{host.port}"


def _run(make: Callable[[], Awaitable[T]]) -> T:
    async def go() -> T:
        try:
            return await make()
        finally:
            await fetch.close()

    return asyncio.run(go())


def _refusal(make: Callable[[], Awaitable[Any]]) -> str:
    with pytest.raises(errors.VendorRejected) as info:
        _run(make)
    assert info.value.code == "invalid_image_url" and info.value.param == "messages"
    assert not info.value.retryable
    return info.value.message


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/cat.png",  # loopback, literal
        "http://localhost:{port}/cat.png",  # a name that resolves to loopback
        "http://[::1]:{port}/cat.png",
        "http://10.1.2.3/cat.png",
        "http://192.168.0.1/cat.png",
        "http://169.254.169.254/latest/meta-data/",  # the cloud metadata service
        "http://0.0.0.0:{port}/cat.png",
    ],
)
def test_non_public_addresses_are_refused_before_connecting(host, settings, url):
    settings.INFRAI_FETCH_PRIVATE_URLS = False
    url = url.format(port=host.port)
    hits = len(host.hits)
    message = _refusal(lambda: fetch.fetch_image(url, TARGET))
    assert "not public" in message and url not in message
    assert len(host.hits) == hits  # nothing reached the server


def test_a_scheme_other_than_http_is_refused(settings):
    settings.INFRAI_FETCH_PRIVATE_URLS = False
    assert "not an http(s) URL" in _refusal(lambda: fetch.fetch_image("file:///etc/passwd", TARGET))


def test_the_connection_resolver_keeps_only_public_addresses():
    """What the connection uses is what was checked: a name resolving to loopback has no
    address left to connect to, whatever a first lookup said."""

    async def resolve() -> Any:
        resolver = fetch._PublicOnlyResolver()
        try:
            return await resolver.resolve("localhost", 80, socket.AF_INET)
        finally:
            await resolver.close()

    with pytest.raises(OSError, match="no public address"):
        asyncio.run(resolve())


def test_an_image_is_fetched_with_its_type_and_bytes(host, settings):
    settings.INFRAI_FETCH_PRIVATE_URLS = True
    image = _run(lambda: fetch.fetch_image(_root(host) + "/cat.png", TARGET))
    assert image.media_type == "image/png" and image.data == png_bytes("cat")


def test_redirects_are_followed_up_to_the_limit(host, settings):
    settings.INFRAI_FETCH_PRIVATE_URLS = True
    hops = fetch.MAX_REDIRECTS - 1  # /hop/n answers n + 1 redirects
    image = _run(lambda: fetch.fetch_image(f"{_root(host)}/hop/{hops}", TARGET))
    assert image.data == png_bytes("cat")
    message = _refusal(lambda: fetch.fetch_image(f"{_root(host)}/hop/{hops + 1}", TARGET))
    assert f"redirects more than {fetch.MAX_REDIRECTS} times" in message


def test_a_redirect_to_a_private_address_is_refused(host, settings, monkeypatch):
    """Each redirect's target is checked again: a public page may not bounce to the inside."""
    settings.INFRAI_FETCH_PRIVATE_URLS = False
    checked: list[str] = []
    real_check = fetch._check_address

    async def first_hop_public(url: str, target: VendorTarget) -> None:
        checked.append(url)
        if len(checked) > 1:
            await real_check(url, target)

    monkeypatch.setattr(fetch, "_check_address", first_hop_public)
    opened: list[aiohttp.ClientSession] = []

    def plain_session(private_allowed: bool) -> aiohttp.ClientSession:
        opened.append(aiohttp.ClientSession())  # its resolver would refuse 127.0.0.1 at once
        return opened[-1]

    async def go() -> Any:
        try:
            return await fetch.fetch_image(f"{_root(host)}/hop/0", TARGET)
        finally:
            for session in opened:
                await session.close()

    monkeypatch.setattr(fetch, "_session", plain_session)
    with pytest.raises(errors.VendorRejected) as info:
        asyncio.run(go())
    assert "not public" in info.value.message and checked[-1].endswith("/cat.png")


def test_what_is_not_an_image_or_too_large_or_missing_is_refused(host, settings, monkeypatch):
    settings.INFRAI_FETCH_PRIVATE_URLS = True
    assert "is not an image" in _refusal(lambda: fetch.fetch_image(_root(host) + "/page", TARGET))
    assert "answered 404" in _refusal(lambda: fetch.fetch_image(_root(host) + "/nope", TARGET))
    monkeypatch.setattr(fetch, "MAX_IMAGE_BYTES", 1024)
    assert "larger than 1024 bytes" in _refusal(
        lambda: fetch.fetch_image(_root(host) + "/big.png", TARGET)
    )


def test_inline_images_replaces_each_url_by_a_data_url_once(host, settings):
    settings.INFRAI_FETCH_PRIVATE_URLS = True
    url = _root(host) + "/cat.png"
    part = {"type": "image_url", "image_url": {"url": url, "detail": "low"}}
    payload = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "two cats"}, part, part]},
        ],
    }
    hits = len(host.hits)
    inlined = _run(lambda: fetch.inline_images(payload, TARGET))
    assert len(host.hits) == hits + 1
    content = inlined["messages"][1]["content"]
    data_url = "data:image/png;base64," + base64.b64encode(png_bytes("cat")).decode()
    assert (
        content[1]
        == content[2]
        == {
            "type": "image_url",
            "image_url": {"url": data_url, "detail": "low"},
        }
    )
    assert payload["messages"][1]["content"][1]["image_url"]["url"] == url  # not mutated
    no_urls = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert _run(lambda: fetch.inline_images(no_urls, TARGET)) is no_urls
