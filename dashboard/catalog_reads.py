"""The model list with prices for the getting-started page and the playground.

The catalog was being built while the dashboard was written, so this module reads it
defensively: it uses ``catalog.selectors`` (``catalog_snapshot_sync`` + ``listed_models``) when
present and returns an empty list otherwise (or if the catalog cannot be read), which the
templates show as "the model list appears here once the catalog is loaded".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

ROUTING_MODES = (
    ("auto", "auto — balanced routing across healthy vendors"),
    ("cheapest", "cheapest — the lowest expected cost"),
    ("smartest", "smartest — the highest quality tier"),
)


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """A routable model and its cheapest current token prices (nano-USD per 1M tokens)."""

    model_id: str
    vendors: tuple[str, ...]
    capabilities: tuple[str, ...]
    context_window: int
    input_per_mtok_nanos: int | None
    output_per_mtok_nanos: int | None


def _current_price(offering: Any) -> Any:
    prices = getattr(offering, "prices", ()) or ()
    return prices[-1][1] if prices else None


def model_prices() -> list[ModelPrice]:
    """Routable models with the lowest input/output price among their offerings."""
    try:
        from catalog import selectors as catalog_selectors

        snapshot = catalog_selectors.catalog_snapshot_sync()
        models = catalog_selectors.listed_models(snapshot)
        out: list[ModelPrice] = []
        for model in models:
            offerings = catalog_selectors.routable_offerings(snapshot, model.model_id)
            prices = [p for p in (_current_price(o) for o in offerings) if p is not None]
            out.append(
                ModelPrice(
                    model_id=model.model_id,
                    vendors=tuple(sorted({o.vendor for o in offerings})),
                    capabilities=tuple(sorted(model.capabilities)),
                    context_window=model.context_window,
                    input_per_mtok_nanos=min(
                        (p.input_per_mtok_nanos for p in prices), default=None
                    ),
                    output_per_mtok_nanos=min(
                        (p.output_per_mtok_nanos for p in prices), default=None
                    ),
                )
            )
        return out
    except Exception:  # the catalog is optional for these pages
        log.warning("catalog not readable for the dashboard model list", exc_info=True)
        return []
