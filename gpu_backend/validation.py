"""Small typed readers for JSON request fields that raise OpenAI-shaped 400s."""

from __future__ import annotations

from types import UnionType
from typing import Any

from .errors import APIError, invalid


def reject_unknown(body: dict[str, Any], known: frozenset[str]) -> None:
    """400 for the first top-level field this endpoint does not know (OpenAI does the same)."""
    for name in body:
        if name not in known:
            raise APIError(
                400,
                f"Unrecognized request argument supplied: {name}",
                code="unknown_parameter",
                param=name,
            )


def _typed(body: dict[str, Any], name: str, kinds: type | UnionType, expected: str) -> Any:
    """``body[name]`` (``None`` when absent) if it is one of ``kinds``, else a 400 naming
    ``expected``. A bool is a bool only: never a number or an integer."""
    value = body.get(name)
    if value is not None and (
        not isinstance(value, kinds) or (isinstance(value, bool) and kinds is not bool)
    ):
        raise invalid(f"Invalid type for '{name}': expected {expected}.", name, "invalid_type")
    return value


def _ranged(
    body: dict[str, Any], name: str, low: float, high: float, *, integral: bool
) -> int | float | None:
    """The number (an integer if ``integral``) ``name`` in [low, high], ``None`` when absent."""
    kinds, expected = (int, "an integer") if integral else (int | float, "a number")
    value = _typed(body, name, kinds, expected)
    if value is not None and not low <= value <= high:
        raise invalid(
            f"Invalid value for '{name}': {value}. It must be between {_bound(low)} and "
            f"{_bound(high)}.",
            name,
        )
    return value


def _bound(value: float) -> str:
    """A range end as the messages print it: ``2`` for 2.0, an integer in full."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def number(
    body: dict[str, Any], name: str, low: float, high: float, *, default: float | None = None
) -> float | None:
    """A number in [low, high] (``None``/absent → ``default``); bools are not numbers."""
    value = _ranged(body, name, low, high, integral=False)
    return default if value is None else float(value)


def integer(
    body: dict[str, Any], name: str, low: int, high: int, *, default: int | None = None
) -> int | None:
    """An integer in [low, high] (``None``/absent → ``default``)."""
    value = _ranged(body, name, low, high, integral=True)
    return default if value is None else int(value)


def boolean(body: dict[str, Any], name: str, *, default: bool = False) -> bool:
    """A boolean (``None``/absent → ``default``)."""
    value = _typed(body, name, bool, "a boolean")
    return default if value is None else bool(value)


def string(
    body: dict[str, Any], name: str, *, required: bool = False, default: str | None = None
) -> str | None:
    """A string (``None``/absent → ``default``, or a 400 when ``required``)."""
    value = _typed(body, name, str, "a string")
    if value is None and required:
        raise invalid(f"Missing required parameter: '{name}'.", name, "missing_required_parameter")
    return default if value is None else str(value)


def choice(body: dict[str, Any], name: str, allowed: tuple[str, ...], default: str) -> str:
    """One of ``allowed`` (absent → ``default``)."""
    value = string(body, name, default=default)
    assert value is not None
    if value not in allowed:
        raise invalid(
            f"Invalid value for '{name}': '{value}'. Supported values are: "
            + ", ".join(repr(a) for a in allowed)
            + ".",
            name,
        )
    return value


def zero_only(body: dict[str, Any], name: str) -> None:
    """The platform rule for ``presence_penalty``/``frequency_penalty``: only 0 is accepted."""
    value = _typed(body, name, int | float, "a number")
    if value not in (None, 0):
        raise invalid(
            f"Invalid value for '{name}': {value}. This deployment does not implement '{name}', "
            "so only 0 is accepted. Use 'repetition_penalty' to penalize repetition.",
            name,
        )
