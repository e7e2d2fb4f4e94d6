"""``/v1`` endpoints. Importing this package registers every route with :mod:`inference.http`."""

from inference.chat import service as chat  # noqa: F401
from inference.endpoints import (  # noqa: F401
    audio,
    embeddings,
    images,
    models,
    moderations,
    openapi,
    responses,
)
