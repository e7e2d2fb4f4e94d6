"""The engines behind :class:`vectors.store.VectorStore`."""
