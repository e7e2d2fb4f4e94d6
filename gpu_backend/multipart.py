"""A minimal ``multipart/form-data`` reader on the standard library's e-mail parser.

Starlette's own form parser needs the ``python-multipart`` package; the backend only needs
fields and one uploaded file, which ``email`` handles without another dependency.
"""

from __future__ import annotations

from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from .errors import invalid


def parse_form(content_type: str, body: bytes) -> tuple[dict[str, Any], dict[str, bytes]]:
    """``(fields, files)`` of a multipart body. Repeated fields (``x[]``) become lists.

    Raises a 400 ``APIError`` when the body is not multipart or is malformed.
    """
    if "multipart/form-data" not in content_type or "boundary=" not in content_type:
        raise invalid(
            "Expected a multipart/form-data body with a boundary.", None, "invalid_request"
        )
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    message = BytesParser(policy=HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise invalid("Malformed multipart/form-data body.", None, "invalid_request")
    fields: dict[str, Any] = {}
    files: dict[str, bytes] = {}
    for part in message.iter_parts():
        _collect(part, fields, files)
    return fields, files


def _collect(part: Message, fields: dict[str, Any], files: dict[str, bytes]) -> None:
    """Add one part to ``fields`` (text) or ``files`` (has a filename)."""
    name = part.get_param("name", header="content-disposition")
    if not isinstance(name, str):
        return
    payload = part.get_payload(decode=True)
    data = payload if isinstance(payload, bytes) else b""
    if part.get_filename() is not None:
        files[name] = data
        return
    text = data.decode(part.get_content_charset() or "utf-8", errors="replace")
    if name in fields:
        existing = fields[name]
        fields[name] = [*existing, text] if isinstance(existing, list) else [existing, text]
    elif name.endswith("[]"):
        fields[name] = [text]
    else:
        fields[name] = text
