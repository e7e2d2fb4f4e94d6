"""JSON on the ``/v1`` hot path — request bodies, vendor answers, stream chunks, cached values:
orjson (several times faster than the standard library on these), with the standard
library as the fallback for what orjson refuses, so the behaviour stays the standard one:

- :func:`dumps` of a string holding a lone surrogate (a vendor may send one), a ``Decimal``
  or a non-string key falls back to ``json.dumps`` (``ensure_ascii=False``) and encodes the
  surrogate as "?", never failing the response;
- :func:`loads` of text orjson rejects but Python accepts (``NaN``, a lone ``\\ud800`` escape,
  integers beyond 64 bits) falls back to ``json.loads``; what neither accepts raises
  ``ValueError``.

Request bodies are parsed with :func:`loads` too (:meth:`inference.http.ApiRequest.json`):
a body orjson refuses is parsed again by the standard library, whose error messages the 400
quotes — the same answer for every body as before, faster for the valid ones.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    """``value`` as compact UTF-8 JSON (every object's keys sorted with ``sort_keys``)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else None)
    except (TypeError, orjson.JSONEncodeError):
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)
        return text.encode("utf-8", "replace")


def canonical(value: Any) -> bytes:
    """The same bytes for equal values, whatever their keys' order (cache keys)."""
    return dumps(value, sort_keys=True)


def loads(data: bytes | str) -> Any:
    """The JSON value in ``data`` (``ValueError`` when it is not JSON)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
