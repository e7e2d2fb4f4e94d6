"""Staff guardrails: what a catalog write would stop serving.

A staff change (a model's capabilities, an offering or a vendor disabled, a vendor's
credentials setting …) is judged by the routing snapshot itself: the snapshot built before the
write is compared with the one built from the database as the uncommitted write leaves it
(:func:`catalog.selectors.build_snapshot`, compared through
:func:`catalog.selectors.capability_coverage`); the admin then keeps or rolls back the write.
There is no second copy of the routing rules here: whatever makes an offering unroutable for
``/v1`` makes it unroutable for this check.

Only capabilities that some model served before and none serves after count as a loss;
a capability that was already unserved does not ask again on every save.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from catalog.models import Capability
from catalog.selectors import capability_coverage
from catalog.types import CatalogSnapshot


@dataclass(frozen=True, slots=True)
class CapabilityLoss:
    """A capability no model serves after the change; ``models``: those that served it."""

    capability: str
    label: str
    models: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Impact:
    """What a change stops serving: capabilities left with no routable offering, and every
    model that was served before and is not after (by id)."""

    losses: tuple[CapabilityLoss, ...]
    models: tuple[str, ...]

    @property
    def harmless(self) -> bool:
        """True when no capability is left without a routable offering (save directly)."""
        return not self.losses

    @property
    def token(self) -> str:
        """Names the lost capabilities; a confirmation is valid only for the same losses."""
        return ",".join(loss.capability for loss in self.losses)


def _label(capability: str) -> str:
    return str(Capability(capability).label) if capability in Capability.values else capability


def impact_of(before: CatalogSnapshot, after: CatalogSnapshot, *, at: datetime) -> Impact:
    """What ``after`` no longer serves that ``before`` did, prices as in force at ``at``."""
    served_before = capability_coverage(before, at=at)
    served_after = capability_coverage(after, at=at)
    losses = tuple(
        CapabilityLoss(capability, _label(capability), tuple(sorted(models)))
        for capability, models in sorted(served_before.items())
        if models and not served_after.get(capability)
    )
    models_before = frozenset().union(*served_before.values())
    models_after = frozenset().union(*served_after.values())
    return Impact(losses=losses, models=tuple(sorted(models_before - models_after)))
