"""Request bodies of the vector store, validated before anything is counted, held or written.

Every refusal is a 400 in OpenAI's shape whose ``param`` names the field (``vectors[3]``,
``metadata[0]``, ``top_k`` …). Limits (module constants, documented in docs/vector_store.md):
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from config.errors import InvalidRequest, invalid_type, missing_param
from inference.endpoints import metered

MAX_BATCH = 1000  # vectors or texts per upsert / ids per delete
MAX_DIMENSIONS = 2000  # pgvector's HNSW limit for ``vector``; the same on every engine
MAX_METADATA_BYTES = 8192  # one vector's metadata as compact JSON
MAX_ID_CHARS = 256
MAX_TEXT_CHARS = 32_000
MAX_TOP_K = 100
FLOAT32_MAX = 3.4028234e38
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

Scalar = str | int | float | bool


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, code="invalid_value", param=param)


def collection_name(data: dict[str, Any], name: str = "collection") -> str:
    """A collection name: 1-64 of letters, digits, ``_ . -``, starting with a letter/digit."""
    value = data.get(name)
    if value is None:
        raise missing_param(name)
    if not isinstance(value, str):
        raise invalid_type(name, "a string")
    if not NAME_RE.match(value):
        raise _bad(
            f"'{name}' must be 1 to 64 letters, digits, '_', '.' or '-', starting with a "
            "letter or digit.",
            name,
        )
    return value


def dimensions_field(data: dict[str, Any], name: str = "dimensions") -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise invalid_type(name, "an integer")
    if not 1 <= value <= MAX_DIMENSIONS:
        raise _bad(f"'{name}' must be between 1 and {MAX_DIMENSIONS}.", name)
    return value


def metadata_field(value: Any, param: str) -> dict[str, Any]:
    """A metadata object (``None`` is empty) of at most MAX_METADATA_BYTES as JSON."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid_type(param, "an object")
    text = json.dumps(value, separators=(",", ":"))
    if "\\u0000" in text:
        raise _bad(f"'{param}' holds a NUL character, which cannot be stored.", param)
    size = len(text.encode())
    if size > MAX_METADATA_BYTES:
        raise _bad(f"'{param}' is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}.", param)
    return value


def vector_field(value: Any, param: str, dimensions: int | None) -> list[float]:
    """A list of finite numbers of the collection's ``dimensions`` (any, up to the maximum,
    when the collection has none yet)."""
    if not isinstance(value, list) or not value:
        raise invalid_type(param, "a non-empty array of numbers")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        raise invalid_type(param, "an array of numbers")
    if not all(math.isfinite(v) and abs(v) <= FLOAT32_MAX for v in value):
        raise _bad(f"'{param}' holds a value that is not a finite float32 number.", param)
    if not any(value):
        raise _bad(f"'{param}' is all zeros: it has no direction to compare by cosine.", param)
    if dimensions is not None and len(value) != dimensions:
        raise _bad(
            f"'{param}' has {len(value)} dimensions; the collection holds vectors of {dimensions}.",
            param,
        )
    if len(value) > MAX_DIMENSIONS:
        raise _bad(f"'{param}' has more than {MAX_DIMENSIONS} dimensions.", param)
    return [float(v) for v in value]


def text_field(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise invalid_type(param, "a string")
    if not value.strip() or len(value) > MAX_TEXT_CHARS:
        raise _bad(f"'{param}' must hold 1 to {MAX_TEXT_CHARS} characters.", param)
    if "\x00" in value:
        raise _bad(f"'{param}' holds a NUL character, which cannot be stored.", param)
    return value


def where_field(value: Any, param: str = "filter") -> dict[str, Scalar]:
    """A metadata filter: an object of top-level keys and the scalar values they must equal."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid_type(param, "an object of metadata keys and values")
    for key, v in value.items():
        if not isinstance(v, str | int | float | bool):
            raise invalid_type(f"{param}.{key}", "a string, number or boolean")
        if isinstance(v, float) and not math.isfinite(v):
            raise _bad(f"'{param}.{key}' is not a finite number.", param)
    if "\\u0000" in json.dumps(value):
        raise _bad(f"'{param}' holds a NUL character.", param)
    return value


def top_k_field(data: dict[str, Any], name: str, default: int, maximum: int) -> int:
    value = data.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise invalid_type(name, "an integer")
    if not 1 <= value <= maximum:
        raise _bad(f"'{name}' must be between 1 and {maximum}.", name)
    return value


@dataclass(frozen=True, slots=True)
class Upsert:
    """``POST /v1/vector/upsert``: ``ids`` with ``vectors`` and/or ``texts`` (texts without
    vectors are embedded with ``model``), optional ``metadata`` per id."""

    collection: str
    ids: list[str]
    vectors: list[list[float]] | None
    texts: list[str] | None
    metadata: list[dict[str, Any]]
    model: str | None
    routing: metered.Routing


def _array(data: dict[str, Any], name: str, n: int | None) -> list[Any] | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise invalid_type(name, "a non-empty array")
    if len(value) > MAX_BATCH:
        raise _bad(f"'{name}' may hold at most {MAX_BATCH} items per request.", name)
    if n is not None and len(value) != n:
        raise _bad(f"'{name}' must hold one item per id ({n}), not {len(value)}.", name)
    return value


def parse_upsert(data: dict[str, Any], dimensions: int | None) -> Upsert:
    """Validate an upsert against the collection's ``dimensions`` (``None``: not fixed yet —
    then every vector must have the first one's length)."""
    metered.reject_unknown(data, {"collection", "ids", "vectors", "texts", "metadata", "model"})
    name = collection_name(data)
    raw_ids = _array(data, "ids", None)
    if raw_ids is None:
        raise missing_param("ids")
    ids = []
    for i, value in enumerate(raw_ids):
        if not isinstance(value, str) or not 1 <= len(value) <= MAX_ID_CHARS or "\x00" in value:
            raise _bad(
                f"'ids[{i}]' must be a string of 1 to {MAX_ID_CHARS} characters.", f"ids[{i}]"
            )
        ids.append(value)
    if len(set(ids)) != len(ids):
        raise _bad("'ids' holds the same id twice.", "ids")
    raw_vectors = _array(data, "vectors", len(ids))
    raw_texts = _array(data, "texts", len(ids))
    if raw_vectors is None and raw_texts is None:
        raise missing_param("vectors")
    vectors = None
    if raw_vectors is not None:
        dims = (
            dimensions
            if dimensions is not None
            else (len(raw_vectors[0]) if isinstance(raw_vectors[0], list) else None)
        )
        vectors = [vector_field(v, f"vectors[{i}]", dims) for i, v in enumerate(raw_vectors)]
    texts = None
    if raw_texts is not None:
        texts = [text_field(t, f"texts[{i}]") for i, t in enumerate(raw_texts)]
    raw_meta = _array(data, "metadata", len(ids)) or [None] * len(ids)
    meta = [metadata_field(m, f"metadata[{i}]") for i, m in enumerate(raw_meta)]
    model = metered.optional_string(data, "model")
    routing = metered.routing_fields(data)
    return Upsert(name, ids, vectors, texts, meta, model, routing)


@dataclass(frozen=True, slots=True)
class Query:
    """``POST /v1/vector/query``: a ``vector`` or a ``text``, ``top_k``, a ``filter``."""

    collection: str
    vector: list[float] | None
    text: str | None
    top_k: int
    where: dict[str, Scalar]
    model: str | None
    routing: metered.Routing


def parse_query(data: dict[str, Any], dimensions: int | None) -> Query:
    metered.reject_unknown(data, {"collection", "vector", "text", "top_k", "filter", "model"})
    name = collection_name(data)
    vector = None
    if data.get("vector") is not None:
        vector = vector_field(data["vector"], "vector", dimensions)
    text = text_field(data["text"], "text") if data.get("text") is not None else None
    if (vector is None) == (text is None):
        raise InvalidRequest(
            "Send exactly one of 'vector' and 'text'.",
            code="missing_required_parameter" if vector is None else "invalid_value",
            param="vector",
        )
    top_k = top_k_field(data, "top_k", 10, MAX_TOP_K)
    where = where_field(data.get("filter"))
    model = metered.optional_string(data, "model")
    return Query(name, vector, text, top_k, where, model, metered.routing_fields(data))


@dataclass(frozen=True, slots=True)
class Delete:
    """``POST /v1/vector/delete``: ``ids``, a ``filter``, or ``delete_all``."""

    collection: str
    ids: list[str] | None
    where: dict[str, Scalar]


def parse_delete(data: dict[str, Any]) -> Delete:
    metered.reject_unknown(data, {"collection", "ids", "filter", "delete_all"})
    name = collection_name(data)
    raw_ids = _array(data, "ids", None)
    ids = None
    if raw_ids is not None:
        if not all(isinstance(v, str) and "\x00" not in v for v in raw_ids):
            raise invalid_type("ids", "an array of strings")
        ids = list(raw_ids)
    where = where_field(data.get("filter"))
    everything = data.get("delete_all")
    if everything is not None and not isinstance(everything, bool):
        raise invalid_type("delete_all", "a boolean")
    if ids is None and not where and not everything:
        raise missing_param("ids")
    return Delete(name, ids, where)
