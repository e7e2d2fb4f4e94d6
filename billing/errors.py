"""The billing app's refusals, in its own terms: amounts and limits, no HTTP.

Billing never answers a caller. The web layer translates these exceptions where they reach it
(:func:`inference.errors.api_error`: one table, the OpenAI body, status and headers); other
callers read the amounts (:mod:`vectors.metering` holds what the wallet has left).
"""

from __future__ import annotations

from enum import StrEnum


class FundsLimit(StrEnum):
    """The limit that refused a hold."""

    #: The organization's available balance (balance − open holds), or no wallet at all.
    WALLET = "wallet"
    #: The project's monthly budget (month-to-date usage + open holds of the project).
    PROJECT_BUDGET = "project_budget"
    #: The API key's own monthly budget (its holds this UTC month).
    KEY_BUDGET = "key_budget"


class InsufficientFunds(Exception):
    """A hold of ``needed_nanos`` was refused by ``limit``; nothing was written.

    ``available_nanos``: what that limit would still let the caller reserve, in nano-USD — the
    wallet's available balance (:attr:`FundsLimit.WALLET`), the smaller of that balance and
    what is left of the project's budget (``PROJECT_BUDGET``), what is left of the key's budget
    (``KEY_BUDGET``, ≥ 0). ``budget_nanos``: the monthly budget that refused it (``None`` for the
    wallet). The caller must not call the vendor and must not settle.
    """

    def __init__(
        self,
        *,
        limit: FundsLimit,
        needed_nanos: int,
        available_nanos: int,
        budget_nanos: int | None = None,
    ) -> None:
        super().__init__(
            f"{limit.value} refused a hold of {needed_nanos} nano-USD ({available_nanos} available)"
        )
        self.limit = limit
        self.needed_nanos = needed_nanos
        self.available_nanos = available_nanos
        self.budget_nanos = budget_nanos

    def __repr__(self) -> str:
        return (
            f"InsufficientFunds({self.limit.value}, needed={self.needed_nanos}, "
            f"available={self.available_nanos}, budget={self.budget_nanos})"
        )
