"""``POST /v1/batches`` before anything is stored: every line of the input file validated
and routed as the live endpoint would (400 naming the line), the whole batch's worst case
priced at the batch price, and one hold for it (402 saying how many lines the balance would
cover). Nothing is stored or held when any of it refuses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from accounts.auth import KeyContext
from batches import lines as kinds
from batches.services import HOLD_GRACE, WINDOW, NewLine
from billing.errors import InsufficientFunds
from billing.services import ahold_open
from catalog.routing import Candidate
from catalog.selectors import batch_discount_percents, routing_decide
from config.errors import ApiError, InvalidRequest
from inference.errors import api_error, insufficient_quota
from infra.db import db_async
from money.usd import nanos_to_usd_str

_LINE_FIELDS = {"custom_id", "method", "url", "body"}


@dataclass(frozen=True, slots=True)
class Parsed:
    number: int
    custom_id: str
    body: dict[str, Any]
    request: Any  # the kind's parsed request


def _line_error(number: int, exc: ApiError, where: str = "") -> ApiError:
    """``exc`` (about the line's ``where`` — e.g. ``body`` — or the line itself) as the answer
    to the batch: the same class, status and code; the message and ``param`` name the line."""
    param = f"line[{number}]"
    if where:
        param += f".{where}"
    if exc.param:
        param += f".{exc.param}"
    exc.message = f"Line {number} of the input file: {exc.message}"
    exc.param = param
    return exc


def _invalid(number: int, message: str, field: str | None = None) -> ApiError:
    return _line_error(number, InvalidRequest(message, code="invalid_batch_line", param=field))


def parse_lines(content: bytes, *, endpoint: str) -> list[Parsed]:
    """Every line of an input file, validated: a JSON object with a unique ``custom_id``,
    ``method`` ``POST``, ``url`` equal to the batch's ``endpoint`` and a ``body`` the
    endpoint's own validator accepts. The first bad line is a 400 naming it (1-based)."""
    kind = kinds.KINDS[endpoint]
    out: list[Parsed] = []
    seen: set[str] = set()
    raw_lines = [line for line in content.splitlines() if line.strip()]
    if not raw_lines:
        raise InvalidRequest("The input file has no lines.", param="input_file_id")
    limit = int(settings.INFRAI_BATCH_MAX_LINES)
    if len(raw_lines) > limit:
        raise InvalidRequest(
            f"The input file has {len(raw_lines)} lines; a batch may hold at most {limit}.",
            param="input_file_id",
        )
    for number, raw in enumerate(raw_lines, start=1):
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _invalid(number, f"not a JSON object ({exc}).") from None
        if not isinstance(data, dict):
            raise _invalid(number, "not a JSON object.")
        unknown = sorted(set(data) - _LINE_FIELDS)
        if unknown:
            raise _invalid(number, f"unrecognized field '{unknown[0]}'.", unknown[0])
        custom_id = data.get("custom_id")
        if (
            not isinstance(custom_id, str)
            or not custom_id
            or len(custom_id) > 512
            or "\x00" in custom_id
        ):
            raise _invalid(
                number,
                "'custom_id' must be a string of 1 to 512 characters, none of them NUL.",
                "custom_id",
            )
        if custom_id in seen:
            raise _invalid(
                number, f"'custom_id' {custom_id!r} is used by an earlier line.", "custom_id"
            )
        seen.add(custom_id)
        if data.get("method") != "POST":
            raise _invalid(number, "'method' must be 'POST'.", "method")
        if data.get("url") != endpoint:
            raise _invalid(number, f"'url' must be the batch's endpoint, '{endpoint}'.", "url")
        body = data.get("body")
        if not isinstance(body, dict):
            raise _invalid(number, "'body' must be a JSON object.", "body")
        try:
            request = kind.parse(body)
        except ApiError as exc:
            raise _line_error(number, exc, "body") from None
        out.append(Parsed(number=number, custom_id=custom_id, body=body, request=request))
    return out


async def price_lines(parsed: list[Parsed], *, endpoint: str) -> list[NewLine]:
    """Route every line as the endpoint would (a refusal — unknown model, a parameter the
    matrix refuses, no healthy vendor — answers for the batch, naming the line) and price its
    worst case over its candidates at their batch price."""
    kind = kinds.KINDS[endpoint]
    routed: list[tuple[Parsed, tuple[Candidate, ...]]] = []
    for line in parsed:
        try:
            decision = await routing_decide(request=kind.routing(line.request))
        except Exception as exc:
            refused = api_error(exc)
            if refused is None:
                raise
            raise _line_error(line.number, refused, "body") from None
        routed.append((line, decision.candidates))
    ids = {c.offering_id for _line, candidates in routed for c in candidates}
    discounts = await db_async(batch_discount_percents)(offering_ids=ids)
    return [
        NewLine(
            number=line.number,
            custom_id=line.custom_id,
            body=line.body,
            reserved_nanos=kinds.worst_case_nanos(
                kind, line.request, tuple(kinds.at_batch_price(c, discounts) for c in candidates)
            ),
        )
        for line, candidates in routed
    ]


async def reserve(key: KeyContext, *, batch_id: str, lines: list[NewLine]) -> int:
    """One hold of the whole batch's worst case (request id ``batch_id``), lasting its
    completion window; returns its amount. Refused: the 402, saying how many of the batch's
    lines (in order) the available balance would cover."""
    total = sum(line.reserved_nanos for line in lines)
    try:
        await ahold_open(
            organization_id=key.organization_id,
            project_id=key.project_id,
            api_key_id=key.key_id,
            request_id=batch_id,
            amount_nanos=total,
            budget_nanos=key.monthly_budget_nanos,
            key_budget_nanos=key.key_budget_nanos,
            ttl_s=int((WINDOW + HOLD_GRACE).total_seconds()),
        )
    except InsufficientFunds as exc:
        raise insufficient_quota(exc, hint=fits_hint(exc.available_nanos, lines)) from None
    return total


def fits_hint(available_nanos: int, lines: list[NewLine]) -> str:
    """The 402's sentence: the batch's reservation, and how many of its first lines
    ``available_nanos`` covers."""
    covered, running = 0, 0
    for line in lines:
        running += line.reserved_nanos
        if running > available_nanos:
            break
        covered += 1
    total = sum(line.reserved_nanos for line in lines)
    return (
        f" The batch reserves its worst case, ${nanos_to_usd_str(total)} for {len(lines)} "
        f"lines at the batch price; the available balance covers the first {covered} of them."
    )
