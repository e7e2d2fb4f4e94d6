"""The one boundary between the domain's refusals and the OpenAI error shape.

Billing and the catalog raise exceptions in their own terms (:mod:`billing.errors`: which limit
refused a hold and the amounts; :mod:`catalog.errors`: why routing refused, the reason's code,
the request field). The table below says, for each, which :class:`~config.errors.ApiError`
answers it — the body, the status and the headers (``x-should-retry``) — and nowhere else does.

:func:`api_error` is applied where an exception becomes an answer: the ``/v1`` server
(:mod:`inference.http`), a call's failure record (:func:`inference.stages.
closed_on_failure`) and the management API's handler (:func:`management.api.to_api_error`).
Code that needs a domain refusal's facts (``available_nanos`` for a ``max_tokens`` hint)
catches the domain exception itself and renders it here (:func:`insufficient_quota`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from billing.errors import FundsLimit, InsufficientFunds
from catalog.errors import ModelNotFound, NoRoute, RoutingRefused
from config.errors import ApiError, InsufficientQuota, InvalidRequest, NoRoutableOffering, NotFound
from money.usd import nanos_to_usd_str

# The 402 codes, one per limit (docs/errors.md).
FUNDS_CODES: dict[FundsLimit, str] = {
    FundsLimit.WALLET: "insufficient_quota",
    FundsLimit.PROJECT_BUDGET: "project_budget_exceeded",
    FundsLimit.KEY_BUDGET: "key_budget_exceeded",
}


def _funds_message(exc: InsufficientFunds) -> str:
    if exc.limit is FundsLimit.KEY_BUDGET:
        return (
            "This request would exceed this API key's monthly budget of "
            f"${nanos_to_usd_str(exc.budget_nanos or 0)} "
            f"(${nanos_to_usd_str(exc.available_nanos)} left this month). "
            "Raise the key's budget or wait for the next month."
        )
    if exc.limit is FundsLimit.PROJECT_BUDGET:
        return (
            "This request would exceed the project's monthly budget of "
            f"${nanos_to_usd_str(exc.budget_nanos or 0)}. Raise the project's budget in the "
            "dashboard or wait for the next month."
        )
    return (
        "You exceeded your current quota: this request may cost up to "
        f"${nanos_to_usd_str(exc.needed_nanos)} and your organization's available balance is "
        f"${nanos_to_usd_str(exc.available_nanos)}. Add credit in the dashboard to continue."
    )


def insufficient_quota(exc: InsufficientFunds, *, hint: str = "") -> InsufficientQuota:
    """The 402 answering a refused hold (``x-should-retry: false``), its code naming the limit;
    ``hint`` (a sentence, with its leading space) is appended to the message."""
    return InsufficientQuota(_funds_message(exc) + hint, code=FUNDS_CODES[exc.limit])


def _routing_refused(exc: RoutingRefused) -> InvalidRequest:
    return InvalidRequest(exc.message, code=exc.code, param=exc.param)


def _model_not_found(exc: ModelNotFound) -> NotFound:
    return NotFound(exc.message, code=exc.code, param=exc.param)


def _no_route(exc: NoRoute) -> NoRoutableOffering:
    return NoRoutableOffering(exc.message, code=exc.code, param=exc.param, permanent=exc.permanent)


# Each domain exception and its answer; a subclass of a listed one answers as it does.
_TABLE: dict[type[Exception], Callable[[Any], ApiError]] = {
    InsufficientFunds: insufficient_quota,  # 402
    RoutingRefused: _routing_refused,  # 400
    ModelNotFound: _model_not_found,  # 404
    NoRoute: _no_route,  # 503, x-should-retry: false when permanent
}


def api_error(exc: BaseException) -> ApiError | None:
    """How the API answers ``exc``: ``exc`` itself when it is an :class:`ApiError`, the table's
    error for a domain refusal, ``None`` for anything else (a bug, or an outage that
    :func:`infra.outages.unavailable` answers)."""
    if isinstance(exc, ApiError):
        return exc
    for kind in type(exc).__mro__:
        render = _TABLE.get(kind)
        if render is not None:
            return render(exc)
    return None
