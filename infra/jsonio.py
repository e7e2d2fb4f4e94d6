"""JSON on the ``/v1`` hot path — request bodies, vendor answers, stream chunks, cached values:
orjson (several times faster than the standard library on these), with the standard
library as the fallback for what orjson refuses, so the behaviour stays the standard one:

- :func:`dumps` of a string holding a lone surrogate (a vendor may send one), a ``Decimal``
  or a non-string key falls back to ``json.dumps`` (``ensure_ascii=False``) and encodes the
  surrogate as "?", never failing the response;
- :func:`loads` of text orjson rejects but Python accepts (``NaN``, a lone ``\\ud800`` escape,
  integers beyond 64 bits) falls back to ``json.loads``; what neither accepts raises
  ``ValueError``.

PostgreSQL's ``jsonb`` refuses a NUL character ("unsupported Unicode escape sequence"), which
a caller's JSON may carry: what is written to a jsonb column goes through :func:`jsonb_text`
(asyncpg parameters, :func:`infra.adb.json_text`) or :class:`JsonbEncoder` (Django's
``JSONField(encoder=...)``), which store each NUL as U+FFFD, the replacement character.

Request bodies are parsed with :func:`loads` too (:meth:`inference.http.ApiRequest.json`):
a body orjson refuses is parsed again by the standard library, whose error messages the 400
quotes — the same answer for every body as before, faster for the valid ones.
"""

from __future__ import annotations

import json
import re
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


# A ``\u0000`` escape that is not itself escaped (preceded by an even number of backslashes).
_NUL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def nul_free(text: str) -> str:
    """JSON ``text`` with each NUL character it encodes as ``\u0000`` encoded as U+FFFD."""
    return _NUL_ESCAPE.sub(r"\1\\ufffd", text) if "\\u0000" in text else text


def jsonb_text(value: Any) -> str:
    """``value`` as text PostgreSQL's ``jsonb`` accepts (see the module docstring)."""
    return nul_free(dumps(value).decode())


class JsonbEncoder(json.JSONEncoder):
    """Django's ``JSONField`` encoder for columns that hold a caller's data: NULs as U+FFFD."""

    def encode(self, o: Any) -> str:
        return nul_free(super().encode(o))
