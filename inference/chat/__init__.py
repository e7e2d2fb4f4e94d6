"""``/v1/chat/completions`` request validation; the handler is :mod:`inference.endpoints.chat`."""
