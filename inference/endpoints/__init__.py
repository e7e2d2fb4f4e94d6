"""``/v1`` endpoints. Importing this package registers every route with :mod:`inference.http`."""

from inference.endpoints import (  # noqa: F401
    audio,
    chat,
    embeddings,
    images,
    models,
    moderations,
    openapi,
    responses,
)
