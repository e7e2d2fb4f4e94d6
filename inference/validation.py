"""Field validators every ``/v1`` endpoint shares, and the platform's own request fields.

Each validator reads one field of a parsed JSON body and returns its value (``None`` when the
field is absent), or raises :class:`~config.errors.InvalidRequest` with ``param`` naming the
field and OpenAI's wording — before anything is counted, held or sent. Chat's own rules are in
:mod:`inference.chat.validation`; the shared endpoint plumbing in
:mod:`inference.endpoints.metered`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from catalog.routing import PREFERENCES, prefer_refusal
from config.errors import InvalidRequest, invalid_type

#: The largest integer OpenAI accepts for a count such as max_tokens (int32); a bigger value is
#: a 400 naming the field, never a rate-limit or a server error further down.
MAX_INT32 = 2**31 - 1

#: The platform's own fields every endpoint accepts beside OpenAI's (sent through the SDKs'
#: ``extra_body``), in the order they are checked: the routing task and preference
#: (:func:`check_routing_fields`). Chat adds ``cache`` (:mod:`inference.chat.validation`).
EXTENSIONS = ("task", "prefer")


def is_number(value: Any) -> bool:
    """An int or a float (JSON number), not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_int(value: Any) -> bool:
    """An int (JSON integer), not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def number(data: dict[str, Any], name: str, low: float, high: float) -> float | None:
    """The number field ``name`` within ``[low, high]`` (``None`` when absent), else a 400."""
    value = data.get(name)
    if value is None:
        return None
    if not is_number(value):
        raise invalid_type(name, "a number")
    if not low <= value <= high:
        raise InvalidRequest(
            f"Invalid value for '{name}': {json.dumps(value)}. It must be between {low:g} and "
            f"{high:g}.",
            param=name,
        )
    return float(value)


def positive_int(data: dict[str, Any], name: str, high: int | None = None) -> int | None:
    """The integer field ``name`` in ``1..high`` (``None`` when absent), else a 400.

    Without ``high`` the bound is :data:`MAX_INT32`, worded as OpenAI words it."""
    value = data.get(name)
    if value is None:
        return None
    if not is_int(value):
        raise invalid_type(name, "an integer")
    if high is None and value > MAX_INT32:
        raise InvalidRequest(
            f"Invalid '{name}': integer above maximum value. Expected a value <= {MAX_INT32}, "
            f"but got {value} instead.",
            code="integer_above_max_value",
            param=name,
        )
    if value < 1 or (high is not None and value > high):
        limit = f" and at most {high}" if high is not None else ""
        raise InvalidRequest(
            f"Invalid value for '{name}': {value}. It must be a positive integer{limit}.",
            param=name,
        )
    return int(value)


def invalid_choice(name: str, value: Any, allowed: Iterable[str]) -> InvalidRequest:
    """The 400 for ``value`` of the field ``name`` that is not one of ``allowed`` (listed)."""
    return InvalidRequest(
        f"Invalid value for '{name}': {json.dumps(value)}. Supported values are: "
        + ", ".join(f"'{a}'" for a in allowed)
        + ".",
        param=name,
    )


def check_routing_fields(data: dict[str, Any]) -> None:
    """The platform's ``task`` and ``prefer`` (from ``extra_body``): strings, and ``prefer``
    one of :data:`~catalog.routing.PREFERENCES`; else a 400 naming the field."""
    for name in EXTENSIONS:
        if data.get(name) is not None and not isinstance(data[name], str):
            raise invalid_type(name, "a string")
    if data.get("prefer") is not None and data["prefer"] not in PREFERENCES:
        raise prefer_refusal(data["prefer"])
