"""The chat-shaped call: its validation (:mod:`.validation`) and the vendor leg every chat dialect
shares (:mod:`.leg`); the chat completions handler is :mod:`inference.endpoints.chat`."""
