"""Vendor adapters: wire formats only (nothing of accounts, billing or the catalog's models).

:func:`adapter_for` maps a catalog adapter kind to its adapter instance.
"""

from __future__ import annotations

from inference.vendors.anthropic import AnthropicAdapter
from inference.vendors.azure import AzureOpenAIAdapter
from inference.vendors.base import Adapter, VendorTarget
from inference.vendors.bedrock import BedrockAdapter
from inference.vendors.errors import VendorError
from inference.vendors.gemini import GeminiAdapter
from inference.vendors.openai_compat import OpenAICompatibleAdapter

_ADAPTERS: dict[str, Adapter] = {
    "openai": OpenAICompatibleAdapter(),
    "anthropic": AnthropicAdapter(),
    "bedrock": BedrockAdapter(),
    "gemini": GeminiAdapter(),
    "azure": AzureOpenAIAdapter(),
}


def adapter_for(kind: str) -> Adapter:
    """The adapter for a catalog ``adapter_kind`` (KeyError for an unknown kind)."""
    return _ADAPTERS[kind]


__all__ = ["Adapter", "VendorError", "VendorTarget", "adapter_for"]
