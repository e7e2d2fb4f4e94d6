"""``/v1/chat/completions``: validation and the call path."""
