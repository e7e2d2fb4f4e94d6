"""Which adapter speaks each catalog ``adapter_kind`` (:func:`adapter_for`)."""

from __future__ import annotations

from inference.vendors.anthropic import AnthropicAdapter
from inference.vendors.azure import AzureOpenAIAdapter
from inference.vendors.base import Adapter
from inference.vendors.bedrock import BedrockAdapter
from inference.vendors.gemini import GeminiAdapter
from inference.vendors.openai_compat import OpenAICompatibleAdapter

_ADAPTERS: dict[str, Adapter] = {
    "openai": OpenAICompatibleAdapter(),
    "anthropic": AnthropicAdapter(),
    "azure": AzureOpenAIAdapter(),
    "gemini": GeminiAdapter(),
    "bedrock": BedrockAdapter(),
}


def adapter_for(kind: str) -> Adapter:
    """The adapter for a catalog ``adapter_kind`` (KeyError for an unknown kind)."""
    return _ADAPTERS[kind]
