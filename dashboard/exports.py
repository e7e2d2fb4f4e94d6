"""CSV exports of usage and of the request log. Amounts are exact USD decimals; text cells that
a spreadsheet would run as a formula are made inert (:func:`dashboard.statements.csv_text`).

The request log is streamed row by row (keyset pages of :data:`PAGE` rows), capped at
:data:`MAX_ROWS` so one download cannot hold a worker for minutes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import date, datetime

from dashboard.statements import csv_text
from inference import selectors
from inference.selectors import Dimension, LogFilters, UsageRow
from money.usd import nanos_to_usd_str

PAGE = 1000
MAX_ROWS = 100_000

LOG_HEADER = [
    "created_at_utc",
    "request_id",
    "endpoint",
    "requested_model",
    "model",
    "vendor",
    "status",
    "http_status",
    "error_code",
    "error_message",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "cost_usd",
    "latency_ms",
    "project_id",
    "api_key_id",
    # Appended, so the earlier columns keep their positions for existing readers.
    "cache_write_tokens",
    "reasoning_tokens",
]


class _Echo:
    """A file-like object whose ``write`` returns the line (for streaming ``csv.writer``)."""

    def write(self, value: str) -> str:
        return value


def request_log_csv(
    *, organization_id: int, start: datetime, end: datetime, filters: LogFilters
) -> Iterator[str]:
    """The filtered request log, newest first, as CSV lines (header first)."""
    writer = csv.writer(_Echo())
    yield writer.writerow(LOG_HEADER)
    before: int | None = None
    sent = 0
    while sent < MAX_ROWS:
        rows = selectors.request_log(
            organization_id=organization_id,
            start=start,
            end=end,
            filters=filters,
            before_id=before,
            limit=min(PAGE, MAX_ROWS - sent),
        )
        for r in rows:
            yield writer.writerow(
                [
                    r.created_at.isoformat(),
                    r.request_id,
                    r.endpoint,
                    csv_text(r.requested_model),
                    csv_text(r.model),
                    csv_text(r.vendor),
                    r.status,
                    r.http_status,
                    csv_text(r.error_code),
                    csv_text(r.error_message),
                    r.input_tokens,
                    r.cached_input_tokens,
                    r.output_tokens,
                    nanos_to_usd_str(r.cost_nanos),
                    r.latency_ms,
                    r.project_id or "",
                    r.api_key_id or "",
                    r.cache_write_tokens,
                    r.reasoning_tokens,
                ]
            )
        sent += len(rows)
        if len(rows) < PAGE:
            return
        before = min(r.pk for r in rows)


def usage_csv(
    *,
    organization_id: int,
    start: date,
    end: date,
    by: Dimension | None,
) -> str:
    """Usage of the range: per day (``by=None``) or per model/vendor/project/key."""
    out = io.StringIO()
    writer = csv.writer(out)
    first = "date" if by is None else by
    writer.writerow(
        [
            first,
            "requests",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            # Parts of input_tokens / output_tokens; last, so earlier columns keep their place.
            "cached_input_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
        ]
    )
    rows: list[UsageRow]
    if by is None:
        rows = selectors.usage_by_day(organization_id=organization_id, start=start, end=end)
    else:
        lo, hi = selectors.day_bounds(start, end)
        rows = selectors.usage_by(
            organization_id=organization_id, dimension=by, start=lo, end=hi, limit=10_000
        )
    for row in rows:
        writer.writerow(
            [
                csv_text(row.label),
                row.requests,
                row.input_tokens,
                row.output_tokens,
                nanos_to_usd_str(row.cost_nanos),
                row.cached_input_tokens,
                row.cache_write_tokens,
                row.reasoning_tokens,
            ]
        )
    return out.getvalue()
