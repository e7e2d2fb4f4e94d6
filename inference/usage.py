"""Reading the usage a vendor reports, and deciding whether to bill it.

A vendor's counts are first checked for form at this boundary: non-negative integers (not
booleans, not floats), at most :data:`MAX_COUNT` each, cache reads + writes ≤ prompt, 1-hour
writes ≤ writes, reasoning ≤ completion. Anything else raises :class:`InvalidUsage`; callers
then bill their own count of what was delivered and note it in the request log
(``vendor_usage_invalid``) — never a negative cost, never a 500 after the vendor succeeded.

Well-formed counts are then checked against what the gateway itself relayed
(:func:`reconcile`, the rule in ``docs/billing.md``, "Vendor usage against the relay"): the
vendor's usage is billed only where it is plausible against our own count (cl100k_base) and
the call's output cap; otherwise our count is billed, never above the cap, and the request log
says so (``usage_source``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from inference.models import UsageSource
from money.pricing import Usage

# More tokens than any model's context window by orders of magnitude: a count above this is
# garbage, and it would overflow the request log's integer columns.
MAX_COUNT = 100_000_000
INVALID_USAGE_NOTE = "vendor_usage_invalid"
# The log's code for a successful call whose vendor's (well-formed) usage was not billed as
# reported, and for a stream the relay ended at the output cap.
IMPLAUSIBLE_USAGE_NOTE = "vendor_usage_implausible"
MISSING_USAGE_NOTE = "vendor_usage_missing"  # a whole answer with text and no usage
OUTPUT_CAP_NOTE = "vendor_exceeded_output_cap"

TOKENIZER_RATIO = 3
"""How far a vendor's token count may be from ours (cl100k_base) for the same text, as a
factor either way. Tokenizers differ between models: for English prose the common ones
(cl100k, o200k, Llama 3, Mistral, Gemma) are within about 1.5× of each other; code, numbers,
whitespace runs and non-Latin scripts widen that, an old 32k-vocabulary tokenizer on Chinese or
Hindi counting about 2–2.5× what cl100k does. 3× either way is what no honest vendor leaves
and still catches a vendor that reports a tenth, or ten times, of what it sent."""

TOKEN_SLACK = 8
"""Tokens added to either side of the ratio band, and the most our count may exceed a
zero-free floor by: short texts have noisy ratios (a tool call of two words is 2 tokens to one
vendor and 9 to cl100k with its JSON quoting), and a vendor may count a stop token."""

OUTPUT_CAP_SLACK = 4
"""Tokens per choice a vendor may report above the output cap (``max_tokens`` or
``max_completion_tokens``, else the model's limit): some count the stop token or a
reasoning-block delimiter past the cap. Above cap + slack the vendor broke its own limit."""


def stream_cut_tokens(output_cap: int, choices: int = 1) -> int:
    """The most tokens (our count) a stream may relay against an output cap of ``output_cap``
    over ``choices`` choices before the relay ends it: what the cap can hold in any tokenizer
    within :data:`TOKENIZER_RATIO`, plus :data:`TOKEN_SLACK` per choice. Beyond it the vendor
    ignored the cap; below it we cannot tell it did."""
    return output_cap * TOKENIZER_RATIO + TOKEN_SLACK * choices


class UsageReport(NamedTuple):
    """A vendor's usage as reported (:func:`chat_usage_report`): the billable counts, with the
    completion tokens it says were hidden reasoning (``completion_tokens_details.
    reasoning_tokens``) in ``usage.reasoning_tokens``, part of ``usage.output_tokens``."""

    usage: Usage

    @property
    def reasoning_tokens(self) -> int:
        """The hidden reasoning tokens of ``usage.output_tokens``."""
        return self.usage.reasoning_tokens


@dataclass(frozen=True, slots=True)
class Relayed:
    """What the gateway counted itself of one call, in cl100k_base tokens.

    ``prompt_tokens``: the whole prompt as chat validation counts it (messages with OpenAI's
    framing, tool definitions, images at a flat rate); ``prompt_text_tokens``: its message text
    alone, the part every tokenizer sees whatever the model's chat template, tool rendering or
    image tiling; ``output_tokens``: the text delivered (content, tool calls); ``output_cap``:
    the most output the call allowed (per-choice cap × ``choices``, the request's ``n``).
    """

    prompt_tokens: int
    prompt_text_tokens: int
    output_tokens: int
    output_cap: int
    choices: int = 1


class Billed(NamedTuple):
    """What to bill for a call: ``(usage, estimated, note)`` as :class:`inference.relay.Meter`
    returns it, with where it came from and whether it contradicts the vendor's report."""

    usage: Usage
    estimated: bool = False
    note: str = ""
    source: UsageSource = UsageSource.VENDOR
    disputed: bool = False


def _band(counted: int) -> tuple[int, int]:
    """The vendor counts plausible for a text we count ``counted`` tokens: the ratio band with
    :data:`TOKEN_SLACK` on each side, and at least one token for any text at all."""
    low = max(-(-counted // TOKENIZER_RATIO) - TOKEN_SLACK, 1 if counted else 0)
    return low, counted * TOKENIZER_RATIO + TOKEN_SLACK


def reconcile(
    reported: UsageReport | None, relayed: Relayed, *, invalid: bool = False, note: str = ""
) -> Billed:
    """The usage to bill for a call that ended (whole answer) with ``reported`` from the vendor
    (``None``: absent, or malformed with ``invalid``) and ``relayed`` counted by us. The rule:

    - prompt: the vendor's ``prompt_tokens`` if within the band of our text-only count below
      and of our whole count above (:func:`_band`), else our whole count (the reported cache
      reads and writes kept, as far as the new prompt holds them);
    - output: the vendor's ``completion_tokens`` if its visible part (completion − reasoning)
      is within the band of our count of the delivered text and the whole is at most the
      output cap + :data:`OUTPUT_CAP_SLACK` per choice; else our count plus the reported
      reasoning (tokens we cannot see), never above the output cap;
    - absent usage, or zero with text delivered, is billed by our count.

    ``source`` is ``capped`` when the cap limited the billed output, ``counted`` when any of our
    counts replaced the vendor's, else ``vendor``; ``disputed`` when that contradicts (or
    replaces a missing) vendor report, for the request log and the disagreement metric.
    """
    prompt_low, _ = _band(relayed.prompt_text_tokens)
    _, prompt_high = _band(relayed.prompt_tokens)
    if reported is None:
        usage, reasoning = Usage(), 0
        prompt_ok = output_ok = False
    else:
        usage = reported.usage
        reasoning = usage.reasoning_tokens
        prompt_ok = prompt_low <= usage.input_tokens <= prompt_high
        low, high = _band(relayed.output_tokens)
        cap_high = relayed.output_cap + OUTPUT_CAP_SLACK * relayed.choices
        output_ok = (
            low <= usage.output_tokens - reasoning <= high and usage.output_tokens <= cap_high
        )
    if prompt_ok and output_ok:
        return Billed(usage, False, note)
    source = UsageSource.COUNTED
    billed = usage
    if not prompt_ok:
        billed = _with_prompt(billed, relayed.prompt_tokens)
    if not output_ok:
        output = relayed.output_tokens + reasoning
        if output > relayed.output_cap:
            output, source = relayed.output_cap, UsageSource.CAPPED
        billed = replace(billed, output_tokens=output, reasoning_tokens=min(reasoning, output))
    if invalid:
        disputed, note = True, INVALID_USAGE_NOTE
    elif reported is not None:
        disputed, note = True, note or IMPLAUSIBLE_USAGE_NOTE
    else:
        disputed = relayed.output_tokens > 0
        note = note or (MISSING_USAGE_NOTE if disputed else "")
    return Billed(billed, True, note, source, disputed)


def counted(
    relayed: Relayed,
    *,
    note: str = "",
    disputed: bool = False,
    running: UsageReport | None = None,
) -> Billed:
    """Our own count of a call the vendor did not get to report on (a broken or cancelled
    stream, one the relay cut at the output cap — ``disputed``): output never above the cap.

    ``running``: a report the vendor sent before the end (the prompt's count on a stream's
    first chunk, as the gpu-backend and vLLM's continuous usage do): its prompt, when within the
    band of ours (:func:`reconcile`'s rule), replaces our count — the model's own tokenizer and
    chat template, not cl100k_base's count of the text."""
    output, source = relayed.output_tokens, UsageSource.COUNTED
    if output > relayed.output_cap:
        output, source = relayed.output_cap, UsageSource.CAPPED
    prompt = Usage(input_tokens=relayed.prompt_tokens)
    if running is not None:
        low, _ = _band(relayed.prompt_text_tokens)
        _, high = _band(relayed.prompt_tokens)
        if low <= running.usage.input_tokens <= high:
            prompt = running.usage  # its prompt split: cache reads and writes
    usage = replace(prompt, output_tokens=output, reasoning_tokens=0)
    return Billed(usage, True, note, source, disputed)


def _with_prompt(usage: Usage, prompt: int) -> Usage:
    """``usage`` with ``prompt`` prompt tokens in place of its own: its cache reads, then its
    cache writes (1-hour first), kept as far as ``prompt`` holds them."""
    cached = min(usage.cached_input_tokens, prompt)
    hour = min(usage.cache_write_1h_tokens, prompt - cached)
    minutes = min(usage.cache_write_5m_tokens, prompt - cached - hour)
    return replace(
        usage,
        input_tokens=prompt,
        cached_input_tokens=cached,
        cache_write_5m_tokens=minutes,
        cache_write_1h_tokens=hour,
    )


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
    report = chat_usage_report(body)
    return None if report is None else report.usage


def chat_usage_report(body: Any) -> UsageReport | None:
    """:func:`chat_usage` as a :class:`UsageReport`.

    The usage is read in OpenAI's semantics — every adapter translates its vendor's into them
    (``docs/billing.md``, "Prompt cache and reasoning tokens"): ``prompt_tokens`` counts every
    prompt token; of them ``prompt_tokens_details.cached_tokens`` were cache reads and
    ``prompt_tokens_details.cache_write_tokens`` cache writes, of which
    ``prompt_tokens_details.cache_write_1h_tokens`` (infrai's extension, which the Anthropic
    adapter fills; OpenAI's format has no cache lifetimes) were written for an hour, the rest
    for five minutes; ``completion_tokens`` counts every generated token, of them
    ``completion_tokens_details.reasoning_tokens`` hidden reasoning. Absent details are 0."""
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
    written = _count(details.get("cache_write_tokens"), "cache_write_tokens", default=0)
    hour = _count(details.get("cache_write_1h_tokens"), "cache_write_1h_tokens", default=0)
    completion = _count(usage.get("completion_tokens"), "completion_tokens", default=0)
    if cached + written > prompt:
        raise InvalidUsage(
            f"cached_tokens {cached} + cache_write_tokens {written} > prompt_tokens {prompt}"
        )
    if hour > written:
        raise InvalidUsage(f"cache_write_1h_tokens {hour} > cache_write_tokens {written}")
    output_details = usage.get("completion_tokens_details") or {}
    if not isinstance(output_details, dict):
        raise InvalidUsage("completion_tokens_details is not an object")
    reasoning = _count(output_details.get("reasoning_tokens"), "reasoning_tokens", default=0)
    if reasoning > completion:
        raise InvalidUsage(f"reasoning_tokens {reasoning} > completion_tokens {completion}")
    return UsageReport(
        Usage(
            input_tokens=prompt,
            cached_input_tokens=cached,
            cache_write_5m_tokens=written - hour,
            cache_write_1h_tokens=hour,
            output_tokens=completion,
            reasoning_tokens=reasoning,
        )
    )


def openai_chat_usage(usage: Usage) -> dict[str, Any]:
    """``usage`` in the shape OpenAI's chat API reports it: the cache reads as
    ``prompt_tokens_details.cached_tokens``, the cache writes (both lifetimes) as its
    ``cache_write_tokens``, the hidden reasoning as ``completion_tokens_details.
    reasoning_tokens``."""
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {
            "cached_tokens": usage.cached_input_tokens,
            "cache_write_tokens": usage.cache_write_5m_tokens + usage.cache_write_1h_tokens,
        },
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }
