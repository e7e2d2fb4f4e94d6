"""What every dialect's response carries about its call: the ``infrai`` object and the
``X-Infrai-*`` headers, read from the call's record (:class:`inference.call.Call`).

Renderers only read: the money was settled (or is held, for a stream's first headers) before
they run. Each dialect's body — a chat completion, a ``response`` object, an embedding list, a
Responses event stream — is rendered by its endpoint from these.
"""

from __future__ import annotations

from typing import Any

from inference.call import Call
from money.usd import nanos_to_usd_str


def infrai(call: Call) -> dict[str, Any]:
    """The ``infrai`` object of the response."""
    served = call.answer
    cost = nanos_to_usd_str(call.cost_nanos)
    out: dict[str, Any] = {
        "cost_usd": float(cost),
        "cost_nanos": call.cost_nanos,
        "vendor": served.vendor or None,
        "model": served.model or None,
        "region": served.region or None,
        "cache": call.cache_hit,
        "request_id": call.request_id,
        "routing": served.routing or None,
        "ignored_params": list(served.ignored_params),
        "failovers": call.failovers,
    }
    if call.usage_estimated:
        out["usage_estimated"] = True
    return out


def headers(call: Call, *, final: bool = True) -> dict[str, str]:
    """``X-Infrai-*`` and rate-limit headers. Streams (``final=False``) send the reserved
    maximum as ``X-Infrai-Max-Cost-Usd``; their cost is in the last chunk."""
    served = call.answer
    out = {**call.limit_headers}
    if served.vendor:
        out["x-infrai-vendor"] = served.vendor
        out["x-infrai-model"] = served.model
    if served.ignored_params:
        out["x-infrai-ignored-params"] = ",".join(served.ignored_params)
    if call.cache_hit:
        out["x-infrai-cache"] = "hit"
    if final:
        out["x-infrai-cost-usd"] = nanos_to_usd_str(call.cost_nanos)
    else:
        out["x-infrai-max-cost-usd"] = nanos_to_usd_str(call.hold_nanos)
    return out


def stream_headers(call: Call, *, final: bool) -> dict[str, str]:
    """The headers of an event stream: the call's, and no caching or proxy buffering."""
    return {**headers(call, final=final), "cache-control": "no-cache", "x-accel-buffering": "no"}
