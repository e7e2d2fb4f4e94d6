"""Texts → vectors through the gateway's own ``POST /v1/embeddings`` path.

The vector store does not call vendors itself: it hands the texts to the embeddings endpoint
(:func:`inference.endpoints.embeddings.embeddings`) as a call of the same key under its own
request id, so they are validated, limited, routed, cached, held, billed and logged exactly as
an ``/v1/embeddings`` call (402 on an empty wallet before anything is written).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from inference.endpoints.embeddings import embeddings
from inference.http import ApiRequest, new_request_id


@dataclass(frozen=True, slots=True)
class Embedded:
    """The vectors (in input order), the model that made them and the call's ``infrai``."""

    vectors: list[list[float]]
    model: str
    infrai: dict[str, Any]


async def embed_texts(
    request: ApiRequest, *, texts: list[str], model: str, extra: dict[str, Any] | None = None
) -> Embedded:
    """Embed ``texts`` with ``model`` (a mode, model or ``vendor/model``) as the caller.

    Raises what ``/v1/embeddings`` raises (400 routing, 402, 429, 5xx), with nothing written.
    """
    body = {"model": model, "input": texts, "encoding_format": "float", **(extra or {})}
    sub = ApiRequest(
        method="POST",
        path="/v1/embeddings",
        headers={"content-type": "application/json"},
        body=json.dumps(body).encode(),
        query={},
        request_id=new_request_id(),
        started_ns=time.perf_counter_ns(),
        key=request.caller,
    )
    response = await embeddings(sub)
    answer = json.loads(response.body)
    data = sorted(answer["data"], key=lambda d: d["index"])
    return Embedded(
        vectors=[[float(v) for v in d["embedding"]] for d in data],
        model=str(answer["model"]),
        infrai=answer.get("infrai", {}),
    )
