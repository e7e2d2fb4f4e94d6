"""Rows the dashboard reads but other apps write (request log, ledger), made directly."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from inference.models import RequestLog, RequestStatus

_seq = itertools.count(1)


def request_log_row(*, organization_id: int, save: bool = True, **fields: Any) -> RequestLog:
    """A request-log row with plausible defaults; ``fields`` override them."""
    n = next(_seq)
    values: dict[str, Any] = {
        "request_id": f"req_test{n:020d}",
        "organization_id": organization_id,
        "created_at": timezone.now(),
        "endpoint": "chat.completions",
        "requested_model": "auto",
        "model": "gpt-4o-mini",
        "vendor": "openai",
        "status": RequestStatus.OK,
        "http_status": 200,
        "input_tokens": 10,
        "output_tokens": 20,
        "cost_nanos": 1_000,
        "latency_ms": 100,
        **fields,
    }
    row = RequestLog(**values)
    if save:
        row.save()
    return row


def at(year: int, month: int, day: int, hour: int = 12) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)
