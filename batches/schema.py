"""The Batch API's part of ``GET /v1/openapi.json`` (``settings.INFRAI_OPENAPI_PARTS``)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

PART_PATH = Path(__file__).resolve().parent / "openapi.yaml"


@functools.cache
def openapi_part() -> dict[str, Any]:
    """``{"paths", "components"}`` of the Batch API's operations."""
    data = yaml.safe_load(PART_PATH.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{PART_PATH} is not a mapping"
    return data
