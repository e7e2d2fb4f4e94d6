"""Reading the usage a vendor reports — the one place vendor token counts are trusted.

A vendor's counts are checked at this boundary: non-negative integers (not booleans, not
floats), at most :data:`MAX_COUNT` each, cached ≤ prompt. Anything else raises
:class:`InvalidUsage`; callers then bill their own estimate of what was delivered and note it
in the request log (``vendor_usage_invalid``) — never a negative cost, never a 500 after the
vendor succeeded.
"""

from __future__ import annotations

from typing import Any

from money.pricing import Usage

# More tokens than any model's context window by orders of magnitude: a count above this is
# garbage, and it would overflow the request log's integer columns.
MAX_COUNT = 100_000_000
INVALID_USAGE_NOTE = "vendor_usage_invalid"


class InvalidUsage(ValueError):
    """The vendor reported usage that cannot be true."""


def _count(value: Any, name: str, *, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise InvalidUsage(f"{name} is {value!r}")
    return value


def chat_usage(body: Any) -> Usage | None:
    """The usage of an OpenAI chat completion or chunk: ``None`` when it reports none.

    Raises :class:`InvalidUsage` for counts that cannot be true (see the module docstring).
    """
    if not isinstance(body, dict):
        return None
    usage = body.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise InvalidUsage("usage is not an object")
    if usage.get("prompt_tokens") is None and usage.get("completion_tokens") is None:
        return None
    details = usage.get("prompt_tokens_details") or {}
    if not isinstance(details, dict):
        raise InvalidUsage("prompt_tokens_details is not an object")
    prompt = _count(usage.get("prompt_tokens"), "prompt_tokens")
    cached = _count(details.get("cached_tokens"), "cached_tokens", default=0)
    completion = _count(usage.get("completion_tokens"), "completion_tokens", default=0)
    if cached > prompt:
        raise InvalidUsage(f"cached_tokens {cached} > prompt_tokens {prompt}")
    return Usage(input_tokens=prompt, cached_input_tokens=cached, output_tokens=completion)


def openai_chat_usage(usage: Usage) -> dict[str, Any]:
    """``usage`` in the shape OpenAI's chat API reports it."""
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
    }
