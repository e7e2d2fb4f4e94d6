"""Azure OpenAI's data-plane inference API: OpenAI's wire format at deployment-scoped URLs.

Taken from Azure's REST reference (``azure-rest-api-specs``, data-plane ``AzureOpenAI/inference``
stable ``2024-10-21``) and from the official ``openai`` SDK's ``AzureOpenAI`` client
(``openai/lib/azure.py``). What differs from OpenAI's own API, and how the adapter treats it:

- The vendor's base URL is the resource's ``https://<resource>.openai.azure.com`` (the SDK's
  ``azure_endpoint``, as the portal shows it) or the same with ``/openai``; an operation lives
  at ``{resource}/openai/deployments/{deployment}/{operation}?api-version={version}``. The
  deployment is the offering's upstream model: the name staff gave the deployment on Azure, not
  the model's name. ``version`` is the vendor's ``api_version`` (default :data:`API_VERSION`).
- The key travels in the ``api-key`` header, never as ``Authorization: Bearer``.
- Answers carry content-filter annotations (``prompt_filter_results``, each choice's
  ``content_filter_results``), passed through. A stream may begin with a chunk whose
  ``choices`` is empty and that carries only ``prompt_filter_results``: it is relayed like any
  chunk (the gateway's relay skips chunks without choices).
- A prompt the content filter refuses is a 400 with error code ``content_filter`` (its
  ``innererror.content_filter_result`` names the categories): :class:`VendorRejected` with
  code ``content_filter``. An answer the filter cuts ends with finish reason
  ``content_filter``, passed through.
- 429 says when to retry in ``retry-after`` (seconds) and ``retry-after-ms``: a
  :class:`VendorRateLimited` whose message says whether the limit or the quota was hit and the
  wait. 401/403 (the key) and 404 (``DeploymentNotFound``, or an api-version Azure does not
  serve) are :class:`VendorMisconfigured`, so the next vendor is tried.

Chat (plain, streamed, tools, vision, JSON output), embeddings, images and transcriptions are
deployment operations of the GA api-version; speech is one in preview api-versions only; Azure
has no moderations endpoint.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, NoReturn
from urllib.parse import quote, urlencode

from catalog.vendor_wire import AZURE_API_VERSION, azure_resource_path
from inference.vendors import errors, http
from inference.vendors.base import JSON, VendorTarget
from inference.vendors.openai_compat import OpenAICompatibleAdapter

# The api-version sent when the vendor names none (its source: catalog.vendor_wire; the probe sends
# it too).
API_VERSION = AZURE_API_VERSION
_QUOTA = re.compile(r"\bquota\b", re.IGNORECASE)


def deployment_path(target: VendorTarget, operation: str) -> str:
    """``[openai/]deployments/<deployment>/<operation>?api-version=<v>``, relative to the base
    URL (``openai/`` when the base URL is the resource's root, as the portal shows it)."""
    query = urlencode({"api-version": target.api_version or API_VERSION})
    deployment = quote(target.upstream_model, safe="")
    return azure_resource_path(target.base_url, f"deployments/{deployment}/{operation}?{query}")


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """The wait Azure asks for, in seconds: ``retry-after-ms`` when present (the finer one, as
    the SDK reads it), else ``retry-after``; ``None`` when neither is a number."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            wait = float(headers.get(name) or "")
        except ValueError:
            continue
        if math.isfinite(wait) and wait >= 0:
            return wait / scale
    return None


def filtered_categories(body: Any) -> list[str]:
    """The content-filter categories an Azure error body says were filtered, as
    ``"<category> (<severity>)"``: from ``error.innererror.content_filter_result`` as the
    service sends it (the REST reference spells it ``inner_error.content_filter_results``;
    both are read)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return []
    inner = error.get("innererror") or error.get("inner_error") or {}
    if not isinstance(inner, dict):
        return []
    results = inner.get("content_filter_result") or inner.get("content_filter_results") or {}
    if not isinstance(results, dict):
        return []
    out = []
    for category, result in sorted(results.items()):
        if isinstance(result, dict) and result.get("filtered"):
            severity = result.get("severity")
            out.append(f"{category} ({severity})" if isinstance(severity, str) else category)
    return out


def azure_error(target: VendorTarget, response: http.VendorResponse) -> errors.VendorError:
    """The ``VendorError`` for an Azure error answer (status ≥ 400); its message holds Azure's
    own message and codes, never our request or key."""
    try:
        body = response.json()
    except ValueError:
        body = None
    message, code, param = errors.error_fields(body)
    message = str(message or response.reason or "error")[:400]
    status, vendor = response.status, target.vendor
    if status == 429:
        quota = code == "insufficient_quota" or bool(_QUOTA.search(message))
        wait = retry_after_s(response.headers)
        which = "quota exhausted" if quota else "rate limited"
        after = f", retry after {wait:g} s" if wait is not None else ""
        return errors.VendorRateLimited(
            f"{vendor} {which} (429{after}): {message}", status=status, vendor=vendor
        )
    if code == "content_filter" and 400 <= status < 500:
        flagged = ", ".join(filtered_categories(body)) or "no category named"
        return errors.VendorRejected(
            f"{vendor} refused the request: its content filter flagged the prompt ({flagged})",
            status=status,
            vendor=vendor,
            code="content_filter",
            param=param,
        )
    return errors.from_status(
        status,
        f"{vendor} returned {status}: {message}",
        vendor=vendor,
        code=code,
        param=param,
        retry_after=response.headers.get("retry-after"),
    )


class AzureOpenAIAdapter(OpenAICompatibleAdapter):
    """Adapter for an Azure OpenAI resource (see the module docstring): the OpenAI-compatible
    adapter with Azure's URLs, key header and errors."""

    def auth_headers(self, target: VendorTarget) -> dict[str, str]:
        return {"api-key": target.api_key} if target.api_key else {}

    def path(self, target: VendorTarget, operation: str) -> str:
        return deployment_path(target, operation)

    def raise_for_status(self, target: VendorTarget, response: http.VendorResponse) -> None:
        if response.status >= 400:
            raise azure_error(target, response)

    async def moderate(self, target: VendorTarget, payload: JSON) -> NoReturn:
        raise errors.VendorRejected(
            f"{target.vendor} does not serve moderations (Azure OpenAI has no such endpoint)",
            vendor=target.vendor,
        )
