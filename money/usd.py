"""Conversions at the edges of money: USD decimals, display strings and Stripe cents.

Inside the platform money is integer nano-USD (1e-9 USD); these functions convert to and from
what people type, read and what Stripe counts in.
"""

from __future__ import annotations

from decimal import Decimal

NANOS_PER_USD = 1_000_000_000
NANOS_PER_CENT = 10_000_000


def usd_to_nanos(amount: Decimal) -> int:
    """Exact USD decimal → nano-USD; raises ValueError if it has more than 9 decimals."""
    nanos = amount * NANOS_PER_USD
    if nanos != nanos.to_integral_value():
        raise ValueError(f"{amount} USD is not a whole number of nano-USD")
    return int(nanos)


def nanos_to_usd_str(nanos: int) -> str:
    """Exact decimal rendering of ``nanos`` in USD, trailing zeros trimmed (``"0.000123"``)."""
    sign = "-" if nanos < 0 else ""
    whole, frac = divmod(abs(nanos), NANOS_PER_USD)
    frac_s = f"{frac:09d}".rstrip("0")
    return f"{sign}{whole}.{frac_s}" if frac_s else f"{sign}{whole}"


def nanos_to_usd_display(nanos: int) -> str:
    """``nanos`` as people read an amount: ``"$1,234.50"``, ``"$0.50"``, ``"-$0.000123"``
    (cents always shown, sub-cent digits kept exactly, thousands separated)."""
    text = nanos_to_usd_str(nanos)
    sign = "-" if text.startswith("-") else ""
    whole, _, frac = text.lstrip("-").partition(".")
    frac = (frac + "00")[: max(2, len(frac))]
    return f"{sign}${int(whole):,}.{frac}"


def cents_to_nanos(cents: int) -> int:
    """Stripe's integer cents → nano-USD."""
    return cents * NANOS_PER_CENT


def nanos_to_cents(nanos: int) -> int:
    """nano-USD → Stripe's integer cents; raises ValueError unless it is a whole number of cents."""
    cents, rest = divmod(nanos, NANOS_PER_CENT)
    if rest:
        raise ValueError(f"{nanos} nano-USD is not a whole number of cents")
    return cents
