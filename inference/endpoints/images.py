"""``POST /v1/images/generations`` and the signed image URLs we serve.

validate → limit → route (``images``) → hold (``n`` images at the offering's per-image price for
``<size>/<quality>``) → call with failover → settle (per image returned) → respond. When no
image-capable offering is routable, routing answers 503 ``no_routable_offering``.

``response_format`` is honoured whatever the vendor returns: a vendor URL is passed through; a
vendor that only answers ``b64_json`` gets its bytes kept in the shared cache for
``INFRAI_IMAGE_URL_TTL_S`` seconds behind ``GET /v1/files/images/<token>`` (no key needed: the
token is HMAC-signed with an expiry, via Django's signing); a vendor URL asked as ``b64_json`` is
fetched and encoded. An answer that cannot be delivered so (malformed, unfetchable) moves on to
the next candidate like a vendor failure.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings
from django.core import signing

from config.errors import NotFound
from inference import render, stages
from inference.endpoints import metered
from inference.http import ApiRequest, Response, json_response, route
from inference.usage import Billed
from inference.validation import positive_int
from inference.vendors import errors
from inference.vendors.base import JSON, Adapter, VendorTarget
from infra import fastcache
from money.pricing import Usage

ENDPOINT = "images.generations"
MAX_PROMPT_CHARS = 32000
MAX_IMAGES = 10
SIZES = (
    "auto", "256x256", "512x512", "1024x1024", "1792x1024", "1024x1792", "1536x1024",
    "1024x1536",
)  # fmt: skip
QUALITIES = ("standard", "hd", "low", "medium", "high", "auto")
DEFAULT_SIZE, DEFAULT_QUALITY = "1024x1024", "standard"
_FIELDS = {"model", "prompt", "n", "size", "quality", "response_format", "style", "user"}
_SIGNING_SALT = "infrai.images.url"
_FETCH_TIMEOUT_S = 30.0
_MAGIC = (
    (b"\x89PNG", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"RIFF", "image/webp"),
    (b"GIF8", "image/gif"),
)


@dataclass(frozen=True, slots=True)
class ImageRequest:
    """A validated image request. ``price_key`` is how the catalog prices one image."""

    payload: JSON
    routing: metered.Routing
    n: int
    response_format: str
    price_key: str


def url_ttl_s() -> int:
    """How long a URL we serve stays valid, in seconds (``INFRAI_IMAGE_URL_TTL_S``)."""
    return int(settings.INFRAI_IMAGE_URL_TTL_S)


def parse_image_request(data: dict[str, Any]) -> ImageRequest:
    """Validate an image generation body; 400 with ``param`` naming the field."""
    metered.reject_unknown(data, _FIELDS)
    routing = metered.routing_fields(data)
    metered.required_text(data, "prompt", MAX_PROMPT_CHARS)
    n = positive_int(data, "n", MAX_IMAGES) or 1
    size = metered.choice(data, "size", SIZES, DEFAULT_SIZE)
    quality = metered.choice(data, "quality", QUALITIES, DEFAULT_QUALITY)
    fmt = metered.choice(data, "response_format", ("url", "b64_json"), "url")
    metered.choice(data, "style", ("vivid", "natural"), "vivid")
    metered.optional_string(data, "user")
    payload = {k: v for k, v in data.items() if k in _FIELDS - {"model"} and v is not None}
    return ImageRequest(
        payload=payload,
        routing=routing,
        n=n,
        response_format=fmt,
        price_key=f"{size}/{quality}",
    )


def usage_of(request: ImageRequest, images: list[JSON]) -> Billed:
    """One image of ``request.price_key`` per image delivered."""
    return Billed(Usage(images={request.price_key: len(images)}))


# --- URLs we serve ---------------------------------------------------------------------------
def _content_type(image: bytes) -> str:
    return next((ct for magic, ct in _MAGIC if image.startswith(magic)), "application/octet-stream")


async def store_image(image: bytes) -> str:
    """Keep ``image`` in the shared cache for :func:`url_ttl_s` seconds; its signed token."""
    image_id = secrets.token_urlsafe(16)
    await fastcache.set(
        f"image:{image_id}",
        {"b64": base64.b64encode(image).decode("ascii"), "content_type": _content_type(image)},
        url_ttl_s(),
    )
    return signing.TimestampSigner(salt=_SIGNING_SALT).sign(image_id)


def image_url(token: str) -> str:
    """The public URL of a stored image (under ``INFRAI_PUBLIC_BASE_URL``)."""
    return f"{settings.INFRAI_PUBLIC_BASE_URL.rstrip('/')}/files/images/{token}"


async def image_file(request: ApiRequest) -> Response:
    """``GET /v1/files/images/<token>``: the image bytes, or 404 once expired or forged."""
    token = request.path_params["token"]
    gone = NotFound("This image URL is invalid or has expired.", code="not_found")
    try:
        image_id = signing.TimestampSigner(salt=_SIGNING_SALT).unsign(token, max_age=url_ttl_s())
    except signing.BadSignature:
        raise gone from None
    stored = await fastcache.get(f"image:{image_id}")
    if stored is None:
        raise gone
    return Response(
        base64.b64decode(stored["b64"]),
        content_type=str(stored["content_type"]).encode(),
        headers={"cache-control": f"private, max-age={url_ttl_s()}"},
    )


async def _fetch(url: str, vendor: str) -> bytes:
    async with httpx.AsyncClient(timeout=_FETCH_TIMEOUT_S) as client:
        with errors.translate(vendor):
            response = await client.get(url)
    if response.status_code >= 400:
        raise errors.from_status(
            response.status_code,
            f"{vendor}'s image URL answered {response.status_code}",
            vendor=vendor,
        )
    return response.content


async def _item(item: JSON, response_format: str, vendor: str) -> JSON:
    """One image in the requested format (``revised_prompt`` kept)."""
    out: JSON = {k: v for k, v in item.items() if k == "revised_prompt"}
    if response_format == "url":
        if item.get("url"):
            out["url"] = item["url"]
            return out
        try:
            image = base64.b64decode(item["b64_json"], validate=True)
        except (binascii.Error, ValueError):
            raise errors.VendorProtocolError(
                f"{vendor} answered an image that is not base64", vendor=vendor
            ) from None
        out["url"] = image_url(await store_image(image))
        return out
    b64 = item.get("b64_json")
    out["b64_json"] = b64 or base64.b64encode(await _fetch(item["url"], vendor)).decode("ascii")
    return out


async def generate(adapter: Adapter, target: VendorTarget, request: ImageRequest) -> list[JSON]:
    """The images of one vendor, already in the requested format.

    A malformed answer or an unfetchable vendor URL is a :class:`VendorError` (the next
    candidate is tried; nothing is charged for what could not be delivered).
    """
    body = await adapter.images(target, request.payload)
    data = body.get("data") if isinstance(body, dict) else None
    if (
        not isinstance(data, list)
        or not data
        or not all(isinstance(d, dict) and (d.get("url") or d.get("b64_json")) for d in data)
    ):
        raise errors.VendorProtocolError(
            f"{target.vendor} answered something that is not a list of images",
            vendor=target.vendor,
        )
    return [await _item(item, request.response_format, target.vendor) for item in data]


# --- the endpoint ----------------------------------------------------------------------------
async def generations(request: ApiRequest) -> Response:
    """The endpoint. See the module docstring."""
    parsed = parse_image_request(request.json())
    worst = Usage(images={parsed.price_key: parsed.n})
    call = await metered.open_call(
        request,
        endpoint=ENDPOINT,
        routing=parsed.routing,
        capability="images",
        limit_tokens=0,
        expected=worst,
        worst_case=lambda _candidate: worst,
    )
    call.prompt = lambda: str(parsed.payload["prompt"])
    images = await stages.call_and_settle(
        call,
        lambda adapter, target, _c: generate(adapter, target, parsed),
        lambda answer: usage_of(parsed, answer),
    )
    out: JSON = {"created": int(time.time()), "data": images, "infrai": render.infrai(call)}
    return json_response(out, headers=render.headers(call))


# The routes of this module, for the app's table (config.asgi).
ROUTES = (
    route("/v1/images/generations", methods={"POST": generations}, confirms_key=True),
    route("/v1/files/images/{token}", methods={"GET": image_file}, authenticated=False),
)
