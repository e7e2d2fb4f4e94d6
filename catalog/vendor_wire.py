"""Facts of vendors' wire formats that the probe (:mod:`catalog.probes`) and the adapters
(``inference/vendors/``) share: default versions, where an API lives under a base URL, and how
a Bedrock secret is read and signed. Pure functions and constants; nothing of the catalog's
models, so the adapters may import it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ANTHROPIC_VERSION = "2023-06-01"
# The latest GA api-version of Azure OpenAI's dated data-plane inference API (the REST
# reference's "Latest GA release"; specification/cognitiveservices/data-plane/AzureOpenAI/
# inference/stable/2024-10-21 in Azure/azure-rest-api-specs): what the probe and the adapter
# send when the vendor names none.
AZURE_API_VERSION = "2024-10-21"


def azure_resource_path(base_url: str, path: str) -> str:
    """``path`` under an Azure OpenAI resource's ``/openai`` API, relative to ``base_url``: the
    resource root (``https://<resource>.openai.azure.com``) gets ``openai/`` in front; a base URL
    that already ends in ``/openai`` does not."""
    return path if base_url.rstrip("/").endswith("/openai") else f"openai/{path}"


# --- AWS Bedrock: credentials, signing, the control plane --------------------------------
# The signing name of both Bedrock endpoints (runtime and control plane), per botocore's models.
BEDROCK_SIGNING_NAME = "bedrock"
_RUNTIME_HOST = re.compile(r"^bedrock-runtime(-fips)?\.([a-z0-9-]+)\.amazonaws\.com$")


def bedrock_credentials(secret: str) -> Credentials | None:
    """The AWS credentials a Bedrock vendor's secret holds, or ``None`` for a Bedrock API key.

    The format (the one definition; the adapter and the probe both read it): ``"<access key
    id>:<secret access key>"``, or ``"<access key id>:<secret access key>:<session token>"``
    for temporary credentials — signed with SigV4; a value without ``:`` is a Bedrock API key,
    sent as ``Authorization: Bearer``. (Neither key ids, secret keys, session tokens nor API
    keys contain ``:``.) ``ValueError`` for an empty secret or an empty part.
    """
    parts = secret.strip().split(":")
    if not secret.strip() or len(parts) > 3 or not all(parts):
        raise ValueError("Bedrock credentials are '<key id>:<secret>[:<token>]' or an API key")
    if len(parts) == 1:
        return None
    return Credentials(parts[0], parts[1], parts[2] if len(parts) == 3 else None)


def bedrock_region(base_url: str, region: str) -> str:
    """The region to sign for: the vendor's ``region``, else the one in a
    ``bedrock-runtime.<region>.amazonaws.com`` base URL (``ValueError`` when neither says)."""
    if region:
        return region
    match = _RUNTIME_HOST.match(urlsplit(base_url).hostname or "")
    if match is None:
        raise ValueError("a Bedrock vendor needs a region")
    return match.group(2)


def bedrock_auth_headers(
    secret: str,
    *,
    method: str,
    url: str,
    region: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The headers that authenticate one Bedrock request: ``headers`` plus SigV4's
    (``Authorization``, ``X-Amz-Date``, ``X-Amz-Security-Token`` with a session token), signed by
    botocore over ``method``, ``url`` (percent-encoded as it is sent) and ``body`` (the exact
    bytes sent) — or ``Authorization: Bearer`` for an API key (:func:`bedrock_credentials`).
    Send ``headers`` unchanged (they are signed)."""
    credentials = bedrock_credentials(secret)
    if credentials is None:
        return {**(headers or {}), "authorization": f"Bearer {secret.strip()}"}
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    SigV4Auth(credentials, BEDROCK_SIGNING_NAME, region).add_auth(request)
    return dict(request.headers.items())


def bedrock_control_url(base_url: str) -> str:
    """The control plane (``bedrock.<region>.amazonaws.com``) of a ``bedrock-runtime.`` base URL;
    any other base URL (a fake, a proxy) serves both and is used as is."""
    parts = urlsplit(base_url)
    match = _RUNTIME_HOST.match(parts.hostname or "")
    if match is None:
        return base_url.rstrip("/")
    host = f"bedrock{match.group(1) or ''}.{match.group(2)}.amazonaws.com"
    return f"{parts.scheme}://{host}"
