"""What a vendor serves, asked in its own wire format: one lister per adapter kind.

A lister reads the vendor's model listing (``GET /models`` for the OpenAI and Anthropic formats)
and returns the upstream model ids it names, sorted — the ids offerings are matched against to
be routable (``Vendor.verified_models``). It raises ``httpx.HTTPError``, ``ValueError`` or
``KeyError`` when the vendor cannot be asked or answers something else; it never logs the
secret it sends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpx

from catalog.models import AdapterKind, Vendor
from catalog.selectors import credentials_value, vendor_base_url

ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True, slots=True)
class ProbeTarget:
    """A vendor as a lister needs it: its base URL, secret (``""``: none), region, version and
    the upstream models its offerings name (for formats with no listing of their own)."""

    name: str
    base_url: str
    secret: str
    region: str
    api_version: str
    offered: tuple[str, ...]


def probe_target(vendor: Vendor) -> ProbeTarget:
    """The probe's view of ``vendor`` (the secret read now)."""
    return ProbeTarget(
        name=vendor.name,
        base_url=vendor_base_url(vendor),
        secret=credentials_value(vendor.credentials_env),
        region=vendor.region,
        api_version=vendor.api_version,
        offered=tuple(vendor.offerings.values_list("upstream_model", flat=True)),
    )


def _ids(items: Iterable[object], key: str = "id") -> tuple[str, ...]:
    return tuple(sorted(str(i[key]) for i in items if isinstance(i, dict) and key in i))


def _data(response: httpx.Response) -> list[object]:
    response.raise_for_status()
    data = response.json().get("data")
    if not isinstance(data, list):
        raise ValueError("the /models answer has no 'data' list")
    return data


def _openai_models(target: ProbeTarget, timeout_s: float) -> tuple[str, ...]:
    headers = {"Authorization": f"Bearer {target.secret}"} if target.secret else {}
    response = httpx.get(target.base_url + "/models", headers=headers, timeout=timeout_s)
    return _ids(_data(response))


def _anthropic_models(target: ProbeTarget, timeout_s: float) -> tuple[str, ...]:
    headers = {"anthropic-version": target.api_version or ANTHROPIC_VERSION}
    if target.secret:
        headers["x-api-key"] = target.secret
    response = httpx.get(
        target.base_url + "/models", headers=headers, params={"limit": 1000}, timeout=timeout_s
    )
    return _ids(_data(response))


def _azure_models(target: ProbeTarget, timeout_s: float) -> tuple[str, ...]:
    raise NotImplementedError("azure probe")


def _gemini_models(target: ProbeTarget, timeout_s: float) -> tuple[str, ...]:
    raise NotImplementedError("gemini probe")


def _bedrock_models(target: ProbeTarget, timeout_s: float) -> tuple[str, ...]:
    raise NotImplementedError("bedrock probe")


LISTERS: dict[str, Callable[[ProbeTarget, float], tuple[str, ...]]] = {
    AdapterKind.OPENAI: _openai_models,
    AdapterKind.ANTHROPIC: _anthropic_models,
    AdapterKind.AZURE: _azure_models,
    AdapterKind.GEMINI: _gemini_models,
    AdapterKind.BEDROCK: _bedrock_models,
}


def served_models(vendor: Vendor, *, timeout_s: float) -> tuple[str, ...]:
    """The upstream model ids ``vendor`` serves now, asked in its wire format."""
    return LISTERS[vendor.adapter_kind](probe_target(vendor), timeout_s)
