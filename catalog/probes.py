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
from typing import Any

import httpx
from botocore.utils import percent_encode_sequence

from catalog.models import AdapterKind, Vendor
from catalog.selectors import credentials_value, vendor_base_url
from catalog.vendor_wire import (
    ANTHROPIC_VERSION,
    AZURE_API_VERSION,
    azure_resource_path,
    bedrock_auth_headers,
    bedrock_control_url,
    bedrock_region,
)


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
    """Azure OpenAI: prove the key and the endpoint, then vouch for the offerings' deployments.

    Azure's data plane lists the resource's *models* (``GET {base}/models?api-version=…``, the
    authoring API's Models_List, answered with an ``api-key``) but not its *deployments*, which
    only the control plane (Azure Resource Manager, with Entra credentials) lists. The probe
    asks what it can: a 2xx with a ``data`` list proves the key, the resource and the
    api-version. It then returns the deployment names the offerings name (``target.offered``) as
    verified: a deployment that does not exist shows up on its first call as a 404
    ``DeploymentNotFound``, which fails over to the next vendor and trips this vendor's circuit.
    """
    response = httpx.get(
        target.base_url + "/" + azure_resource_path(target.base_url, "models"),
        headers={"api-key": target.secret} if target.secret else {},
        params={"api-version": target.api_version or AZURE_API_VERSION},
        timeout=timeout_s,
    )
    _data(response)
    return tuple(sorted(set(target.offered)))


def _gemini_models(target: ProbeTarget, timeout_s: float) -> tuple[str, ...]:
    """Gemini's ``GET models`` (``{"models": [{"name": "models/…"}], "nextPageToken"}``),
    every page; the ids are the names without ``models/``."""
    headers = {"x-goog-api-key": target.secret} if target.secret else {}
    names: list[str] = []
    params: dict[str, str | int] = {"pageSize": 1000}
    for _page in range(100):  # a listing longer than that is a vendor looping on its token
        response = httpx.get(
            target.base_url + "/models", headers=headers, params=params, timeout=timeout_s
        )
        response.raise_for_status()
        body = response.json()
        models = body.get("models", [])
        if not isinstance(models, list):
            raise ValueError("the models answer has no 'models' list")
        names += [str(m["name"]).removeprefix("models/") for m in models if "name" in m]
        token = body.get("nextPageToken")
        if not token:
            return tuple(sorted(names))
        params = {"pageSize": 1000, "pageToken": str(token)}
    raise ValueError("the models listing did not end after 100 pages")


# Inference profiles are listed a page at a time; a listing longer than this is not Bedrock's.
_MAX_PROFILE_PAGES = 50


def _bedrock_get(target: ProbeTarget, url: str, timeout_s: float) -> Any:
    region = bedrock_region(target.base_url, target.region)
    headers = bedrock_auth_headers(target.secret, method="GET", url=url, region=region)
    response = httpx.get(url, headers=headers, timeout=timeout_s)
    response.raise_for_status()
    return response.json()


def _bedrock_models(target: ProbeTarget, timeout_s: float) -> tuple[str, ...]:
    """Bedrock: the foundation models (``ListFoundationModels``) and the inference profiles
    (``ListInferenceProfiles``, every page) of the vendor's region, by id — both are upstream
    model ids Converse takes. Signed GETs of the control plane (:func:`bedrock_control_url`)."""
    base = bedrock_control_url(target.base_url)
    found = _bedrock_get(target, base + "/foundation-models", timeout_s).get("modelSummaries")
    if not isinstance(found, list):
        raise ValueError("the foundation-models answer has no 'modelSummaries' list")
    ids = list(_ids(found, "modelId"))
    token: str | None = None
    for _page in range(_MAX_PROFILE_PAGES):
        query = percent_encode_sequence(
            {"maxResults": 1000, **({"nextToken": token} if token else {})}
        )
        page = _bedrock_get(target, f"{base}/inference-profiles?{query}", timeout_s)
        profiles = page.get("inferenceProfileSummaries")
        if not isinstance(profiles, list):
            raise ValueError("the inference-profiles answer has no 'inferenceProfileSummaries'")
        ids.extend(_ids(profiles, "inferenceProfileId"))
        token = page.get("nextToken")
        if not token:
            return tuple(sorted(set(ids)))
    raise ValueError(f"more than {_MAX_PROFILE_PAGES} pages of inference profiles")


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
