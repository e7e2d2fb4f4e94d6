"""Structured logs: one line per call, JSON in production, plain text under ``make run``.

:func:`call_fields` picks what an operator needs from a request-log row — request id,
organization, project, the key's display prefix (the 8 characters the dashboard shows, never
the key), model, vendor, status, tokens, cost, latency — and never the prompt, the key or an
error message (which may echo the caller's input). :class:`JsonFormatter` renders every record
as one JSON object; a call's record carries its fields under ``call``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

calls = logging.getLogger("infrai.calls")

KEY_PREFIX_CHARS = 8  # what accounts.services.api_key_create stores as the display prefix


def key_prefix(authorization: str | None) -> str:
    """The display prefix of the Bearer key in ``authorization`` ('' when there is none)."""
    if not authorization or authorization[:7].lower() != "bearer ":
        return ""
    return authorization[7:].strip()[:KEY_PREFIX_CHARS]


def text_line(fields: dict[str, Any]) -> str:
    """The plain-text form of a call (``make run``)."""
    return (
        "call {request_id} org={organization_id} key={key_prefix} {endpoint} "
        "model={model} vendor={vendor} status={status} http={http_status} "
        "tokens={input_tokens}/{output_tokens} cost_nanos={cost_nanos} "
        "latency_ms={latency_ms}".format(**fields)
    )


def emit(fields: dict[str, Any]) -> None:
    """Log one call (INFO on ``infrai.calls``)."""
    if calls.isEnabledFor(logging.INFO):
        calls.info(text_line(fields), extra={"call": fields})


class JsonFormatter(logging.Formatter):
    """Every record as one JSON object: ``ts`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message`` (or a call's fields in place of the message), ``exc`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
        }
        fields = getattr(record, "call", None)
        if isinstance(fields, dict):
            out["event"] = "call"
            out.update(fields)
        else:
            out["message"] = record.getMessage()
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, separators=(",", ":"), default=str)
