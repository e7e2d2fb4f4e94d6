"""``GET /v1/models`` and ``GET /v1/models/{model}`` (filled from the catalog)."""

from __future__ import annotations

from config.errors import NotFound
from inference.http import ApiRequest, Response, json_response, route


async def list_models(request: ApiRequest) -> Response:
    """The OpenAI list shape over every routable model."""
    return json_response({"object": "list", "data": []})


async def retrieve_model(request: ApiRequest) -> Response:
    """One model, or 404 in the OpenAI shape."""
    model = request.path_params["model"]
    raise NotFound(f"The model '{model}' does not exist.", code="model_not_found", param="model")


route("/v1/models", methods={"GET": list_models})
route("/v1/models/{model:path}", methods={"GET": retrieve_model})
