"""Vendor failures as the platform sees them, translated where they enter (see ``translate``).

``retryable`` says whether the next candidate may be tried: connection failures, timeouts,
429, 5xx and the vendor refusing our credentials or model (401/403/404) are; any other 4xx is
about the request itself and is not.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx


class VendorError(Exception):
    """A vendor call that did not produce a usable answer."""

    retryable: bool = True
    kind: str = "vendor_error"

    def __init__(self, message: str, *, status: int | None = None, vendor: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.vendor = vendor


class VendorUnavailable(VendorError):
    """Could not connect, or the connection broke."""

    kind = "vendor_unavailable"


class VendorTimeout(VendorError):
    """Connect, read (stall between chunks) or pool timeout."""

    kind = "vendor_timeout"


class VendorRateLimited(VendorError):
    """The vendor said 429."""

    kind = "vendor_rate_limited"


class VendorServerError(VendorError):
    """The vendor said 5xx (or 408)."""

    kind = "vendor_server_error"


class VendorMisconfigured(VendorError):
    """The vendor refused *us* (401/403) or does not know the upstream model (404): a catalog
    or credentials problem of this vendor, so the next candidate may well succeed."""

    kind = "vendor_misconfigured"


class VendorRejected(VendorError):
    """The vendor refused the request itself (4xx): trying elsewhere would not help."""

    retryable = False
    kind = "vendor_rejected"


class VendorProtocolError(VendorError):
    """The vendor answered something that is not its documented wire format."""

    kind = "vendor_protocol_error"


def from_status(status: int, message: str, *, vendor: str) -> VendorError:
    """The error for a non-2xx vendor status."""
    if status == 429:
        return VendorRateLimited(message, status=status, vendor=vendor)
    if status >= 500 or status == 408:
        return VendorServerError(message, status=status, vendor=vendor)
    if status in (401, 403, 404):
        return VendorMisconfigured(message, status=status, vendor=vendor)
    return VendorRejected(message, status=status, vendor=vendor)


@contextmanager
def translate(vendor: str) -> Iterator[None]:
    """Turn httpx exceptions raised inside the block into :class:`VendorError`."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise VendorTimeout(f"{vendor}: timed out ({type(exc).__name__})", vendor=vendor) from exc
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise VendorUnavailable(
            f"{vendor}: connection failed ({type(exc).__name__})", vendor=vendor
        ) from exc
    except httpx.HTTPError as exc:
        raise VendorUnavailable(f"{vendor}: {type(exc).__name__}", vendor=vendor) from exc
