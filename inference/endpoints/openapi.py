"""``GET /v1/openapi.json`` (public): the OpenAPI 3.1 document of the ``/v1`` surface.

The inference part is kept as data in ``inference/openapi.yaml`` (request schemas as the
validators accept them, the OpenAI error shape as every error response): :func:`document`.
The served document adds the parts named in ``settings.INFRAI_OPENAPI_PARTS`` — a function's
dotted path (the management API's, generated from its DRF views, under ``/organization/…``) or
an app's own YAML file as ``package:file`` (the vector store's, the Batch API's):
:func:`served_document`, built and rendered once per process. ``tests/test_fuzz_v1.py``
fuzzes the live app from it.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.utils.module_loading import import_string

from inference.http import ApiRequest, Response, route

DOCUMENT_PATH = Path(__file__).resolve().parent.parent / "openapi.yaml"


@functools.cache
def document() -> dict[str, Any]:
    """The OpenAPI document as a dict (parsed once)."""
    return _yaml(DOCUMENT_PATH.read_text(encoding="utf-8"), str(DOCUMENT_PATH))


def _yaml(text: str, name: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict), f"{name} is not a mapping"
    return data


def part(entry: str) -> dict[str, Any]:
    """One entry of ``settings.INFRAI_OPENAPI_PARTS``: ``package:file.yaml`` (a file shipped
    in the package) parsed, else a dotted function's result."""
    package, sep, name = entry.partition(":")
    if sep:
        return _yaml(resources.files(package).joinpath(name).read_text(encoding="utf-8"), entry)
    result: dict[str, Any] = import_string(entry)()
    return result


def merged(base: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``part``'s ``paths`` and ``components`` added (a new dict). A path or a
    component name both define is a ``ValueError``: one would silently hide the other."""
    out = copy.deepcopy(base)
    clash = set(out["paths"]) & set(part.get("paths", {}))
    for kind, entries in part.get("components", {}).items():
        mine = out.setdefault("components", {}).setdefault(kind, {})
        clash |= {f"components/{kind}/{name}" for name in set(mine) & set(entries)}
        mine.update(entries)
    if clash:
        raise ValueError(f"OpenAPI parts define the same names: {sorted(clash)}")
    out["paths"].update(part.get("paths", {}))
    return out


@functools.cache
def served_document() -> dict[str, Any]:
    """:func:`document` with every part of ``settings.INFRAI_OPENAPI_PARTS`` merged in."""
    out = document()
    for entry in settings.INFRAI_OPENAPI_PARTS:
        out = merged(out, part(entry))
    return out


@functools.cache
def _rendered() -> bytes:
    return json.dumps(served_document(), separators=(",", ":"), ensure_ascii=False).encode()


async def openapi_document(request: ApiRequest) -> Response:
    """The document as JSON (no key needed; it describes only what is public anyway). The
    first call builds it in a worker thread (the generated parts take a fraction of a second)."""
    body = await asyncio.to_thread(_rendered)
    return Response(body, headers={"cache-control": "public, max-age=300"})


# The routes of this module, for the app's table (config.asgi).
ROUTES = (route("/v1/openapi.json", methods={"GET": openapi_document}, authenticated=False),)
