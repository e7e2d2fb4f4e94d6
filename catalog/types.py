"""Plain value types the catalog hands to other apps (no ORM objects cross app borders)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db.models import TextChoices

from money.pricing import PriceSnapshot


class Support(TextChoices):
    """What a model does with a request parameter. A missing matrix cell means *honoured*.

    The one definition: routing compares against it and ``ParameterRule.support`` takes its
    choices from it (a ``TextChoices`` needs no database or settings to import).
    """

    HONOURED = "honoured", "honoured"
    NO_EFFECT = "no_effect", "no effect"
    FAILS = "fails", "fails"


class CircuitState(StrEnum):
    """A vendor's circuit breaker (see :mod:`catalog.health`)."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class ParamRule:
    """One cell of the parameter matrix.

    ``accepted_values``: when not empty, a value outside it *fails*; a ``FAILS`` rule whose
    accepted values contain the request's value accepts it (the value is then honoured as is).
    ``max_value``: the model's limit for the parameter, when it has one — the largest ``n``,
    the largest token id ``logit_bias`` may name (vocabulary size - 1), the largest
    ``dimensions``; a value above it *fails* (:meth:`exceeds`).
    """

    parameter: str
    support: Support
    accepted_values: tuple[Any, ...] = ()
    max_value: int | None = None

    def effect(self, value: Any) -> Support:
        """What happens when a request sets this parameter to ``value``."""
        if self.exceeds(value):
            return Support.FAILS
        if self.accepted_values:
            if not any(_same_value(value, ok) for ok in self.accepted_values):
                return Support.FAILS
            if self.support is Support.FAILS:
                return Support.HONOURED
        return self.support

    def exceeds(self, value: Any) -> bool:
        """Whether ``value`` is above :attr:`max_value` (for a mapping such as ``logit_bias``:
        whether any of its keys, read as integers, is)."""
        if self.max_value is None:
            return False
        return largest(value) > self.max_value


def largest(value: Any) -> int:
    """The number a limit is checked against: an integer itself, the largest integer key of a
    mapping (``logit_bias``), else -1 (nothing to check)."""
    if isinstance(value, bool):
        return -1
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        keys = [int(k) for k in value if str(k).isdigit()]
        return max(keys, default=-1)
    return -1


def _same_value(value: Any, accepted: Any) -> bool:
    if isinstance(value, bool) or isinstance(accepted, bool):
        return value is accepted
    return bool(value == accepted)


@dataclass(frozen=True, slots=True)
class VendorHealth:
    """A vendor's circuit state and recent latency (``None``: no measurement yet)."""

    state: CircuitState = CircuitState.CLOSED
    latency_ms: int | None = None
    consecutive_failures: int = 0


@dataclass(frozen=True, slots=True)
class VendorView:
    """A vendor as the routing snapshot knows it (credentials resolved to configured/not).

    ``parameter_rules``: the request parameters this vendor refuses (``FAILS``: its offerings
    are not used for a request that sets one) or ignores (``NO_EFFECT``: reported in the
    response's ``ignored_params``) whatever the model — cells the same shape as a model's
    matrix (``accepted_values``: the values it does take, Groq's ``n`` of 1).
    """

    name: str
    adapter_kind: str
    base_url: str
    credentials_env: str
    credentials_configured: bool
    region: str
    api_version: str
    parameter_rules: Mapping[str, ParamRule]
    enabled: bool
    verified_models: frozenset[str]
    verified_at: datetime | None


@dataclass(frozen=True, slots=True)
class ModelView:
    """A model as the routing snapshot knows it. ``rules`` omits honoured-by-default cells."""

    model_id: str
    display_name: str
    owned_by: str
    created: int  # unix seconds, OpenAI's ``created``
    capabilities: frozenset[str]
    tasks: frozenset[str]
    context_window: int
    max_output_tokens: int
    quality_tier: int
    embedding_dimensions: int | None
    rules: Mapping[str, ParamRule]
    tokenizer: str = ""
    default_output_tokens: int = 0  # output tokens of a request without a cap (0: the vendor's)

    def rule(self, parameter: str) -> ParamRule:
        """The matrix cell for ``parameter`` (when the matrix has none: honoured, or the
        parameter's :data:`DEFAULT_SUPPORT`)."""
        return self.rules.get(parameter) or ParamRule(
            parameter, DEFAULT_SUPPORT.get(parameter, Support.HONOURED)
        )


# Parameters OpenAI accepts that a model ignores unless its matrix row says otherwise: the
# gateway does not forward them, so they have no effect anywhere today and are reported in
# ``ignored_params`` (``reasoning_effort`` / ``verbosity`` steer OpenAI's reasoning models;
# ``prediction`` is a latency hint; ``web_search_options`` needs a search-enabled model).
DEFAULT_SUPPORT: Mapping[str, Support] = {
    "reasoning_effort": Support.NO_EFFECT,
    "verbosity": Support.NO_EFFECT,
    "prediction": Support.NO_EFFECT,
    "web_search_options": Support.NO_EFFECT,
}


@dataclass(frozen=True, slots=True)
class OfferingAddress:
    """Where an offering is served: its vendor (by name), how to reach the vendor and which wire
    format it speaks (``adapter_kind``) and in which version (``api_version``, empty: the
    adapter's default), the name of its credentials setting, its region, and the model's name
    there (``upstream_model``)."""

    offering_id: int
    vendor: str
    adapter_kind: str
    base_url: str
    credentials_env: str
    region: str
    api_version: str
    upstream_model: str


@dataclass(frozen=True, slots=True)
class OfferingView(OfferingAddress):
    """An offering with its price history (oldest first) and whether it can be routed to.

    ``unroutable_reason`` is ``None`` for a routable offering, else a sentence customers may
    read (vendor disabled, not configured, not verified yet …) — it never names operator
    settings; ``unroutable_detail`` is the staff version (which environment variable is
    missing). ``unroutable_permanent``: the reason lasts until an operator acts (disabled, no
    credentials, no price), so a refusal because of it must not be retried by clients; a
    vendor not verified yet (its first probe still pending) is not permanent. Circuit health is
    not part of it: that changes per call and is passed to routing separately.
    ``vendor_rules``: the vendor's own parameter rules (:attr:`VendorView.parameter_rules`),
    which routing applies on top of the model's matrix for this offering only.
    """

    model_id: str
    priority: int
    prices: tuple[tuple[datetime, PriceSnapshot], ...]
    unroutable_reason: str | None
    unroutable_detail: str = ""
    unroutable_permanent: bool = False
    vendor_rules: Mapping[str, ParamRule] = field(default_factory=dict)

    @property
    def routable(self) -> bool:
        return self.unroutable_reason is None

    def price_at(self, moment: datetime) -> PriceSnapshot | None:
        """The price in force at ``moment`` (the latest row whose ``effective_from`` ≤ it)."""
        current: PriceSnapshot | None = None
        for effective_from, price in self.prices:
            if effective_from <= moment:
                current = price
        return current


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    """The whole catalog, immutable, as the ``/v1`` hot path reads it (no DB per call).

    Invalid rows are not in it: they are named in ``problems`` instead."""

    version: str
    built_at: datetime
    vendors: Mapping[str, VendorView]
    models: Mapping[str, ModelView]
    offerings: tuple[OfferingView, ...]
    # Catalog rows left out because they are invalid (for staff: which row, what is wrong);
    # see :func:`catalog.selectors.build_snapshot`.
    problems: tuple[str, ...] = ()

    def offerings_of(self, model_id: str) -> tuple[OfferingView, ...]:
        """Every offering of ``model_id`` (routable or not), in priority order."""
        return tuple(o for o in self.offerings if o.model_id == model_id)

    def find_model(self, model_id: str) -> ModelView | None:
        """The model named ``model_id`` (exact, else case-insensitive), or ``None``."""
        found = self.models.get(model_id)
        if found is not None:
            return found
        folded = model_id.casefold()
        for candidate in self.models.values():
            if candidate.model_id.casefold() == folded:
                return candidate
        return None
