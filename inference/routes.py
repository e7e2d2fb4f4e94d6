"""The ``/v1`` route table of the inference endpoints, in one place (the composition root,
:mod:`config.asgi`, adds the vector store's and builds the app from it)."""

from inference.endpoints import (
    audio,
    chat,
    embeddings,
    images,
    messages,
    models,
    moderations,
    openapi,
    responses,
)
from inference.http import Route

ROUTES: tuple[Route, ...] = (
    *chat.ROUTES,
    *responses.ROUTES,
    *messages.ROUTES,
    *embeddings.ROUTES,
    *moderations.ROUTES,
    *images.ROUTES,
    *audio.ROUTES,
    *models.ROUTES,
    *openapi.ROUTES,
)
