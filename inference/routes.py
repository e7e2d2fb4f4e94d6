"""The ``/v1`` API as one import: importing this module registers every endpoint's routes with
:mod:`inference.http` (the composition root, :mod:`config.asgi`, imports it)."""

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
