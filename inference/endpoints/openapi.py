"""``GET /v1/openapi.json`` (public): the OpenAPI 3.1 document of the ``/v1`` surface.

The document is kept as data in ``inference/openapi.yaml`` (request schemas as the validators
accept them, the OpenAI error shape as every error response); it is read and rendered to JSON
once per process. ``tests/test_fuzz_v1.py`` fuzzes the live app from it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import yaml

from inference.http import ApiRequest, Response, route

DOCUMENT_PATH = Path(__file__).resolve().parent.parent / "openapi.yaml"


@functools.cache
def document() -> dict[str, Any]:
    """The OpenAPI document as a dict (parsed once)."""
    data = yaml.safe_load(DOCUMENT_PATH.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{DOCUMENT_PATH} is not a mapping"
    return data


@functools.cache
def _rendered() -> bytes:
    return json.dumps(document(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")


async def openapi_document(request: ApiRequest) -> Response:
    """The document as JSON (no key needed; it describes only what is public anyway)."""
    return Response(_rendered(), headers={"cache-control": "public, max-age=300"})


route("/v1/openapi.json", methods={"GET": openapi_document}, authenticated=False)
