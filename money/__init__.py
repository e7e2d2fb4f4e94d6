"""Money arithmetic the apps share: integer nano-USD, prices, usage and the cost of a call.

Pure Python with no dependency — not on Django, not on any app of ours — so ``catalog`` (which
prices routing candidates) and ``billing`` (which holds and settles) both build on it without
importing each other. :mod:`money.pricing` holds the one cost function; :mod:`money.usd`
converts at the edges (USD decimals, Stripe cents, display strings).
"""
