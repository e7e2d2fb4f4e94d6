"""Small typed readers for JSON request fields that raise OpenAI-shaped 400s."""

from __future__ import annotations

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


def number(
    body: dict[str, Any], name: str, low: float, high: float, *, default: float | None = None
) -> float | None:
    """A number in [low, high] (``None``/absent → ``default``); bools are not numbers."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(f"Invalid type for '{name}': expected a number.", name, "invalid_type")
    if not low <= value <= high:
        raise invalid(
            f"Invalid value for '{name}': {value}. It must be between {low:g} and {high:g}.", name
        )
    return float(value)


def integer(
    body: dict[str, Any], name: str, low: int, high: int, *, default: int | None = None
) -> int | None:
    """An integer in [low, high] (``None``/absent → ``default``)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"Invalid type for '{name}': expected an integer.", name, "invalid_type")
    if not low <= value <= high:
        raise invalid(
            f"Invalid value for '{name}': {value}. It must be between {low} and {high}.", name
        )
    return value


def boolean(body: dict[str, Any], name: str, *, default: bool = False) -> bool:
    """A boolean (``None``/absent → ``default``)."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"Invalid type for '{name}': expected a boolean.", name, "invalid_type")
    return value


def string(
    body: dict[str, Any], name: str, *, required: bool = False, default: str | None = None
) -> str | None:
    """A string (``None``/absent → ``default``, or a 400 when ``required``)."""
    value = body.get(name)
    if value is None:
        if required:
            raise invalid(
                f"Missing required parameter: '{name}'.", name, "missing_required_parameter"
            )
        return default
    if not isinstance(value, str):
        raise invalid(f"Invalid type for '{name}': expected a string.", name, "invalid_type")
    return value


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
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(f"Invalid type for '{name}': expected a number.", name, "invalid_type")
    if value != 0:
        raise invalid(
            f"Invalid value for '{name}': {value}. This deployment does not implement '{name}', "
            "so only 0 is accepted. Use 'repetition_penalty' to penalize repetition.",
            name,
        )
