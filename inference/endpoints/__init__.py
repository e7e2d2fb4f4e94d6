"""``/v1`` endpoints, one module each (:mod:`inference.routes` imports them all). The package
itself imports nothing, so its modules can import one another one way."""
