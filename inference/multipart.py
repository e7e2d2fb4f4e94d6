"""``multipart/form-data`` request bodies (file uploads), parsed under caps.

A streaming parser (python-multipart) with the part count, field sizes and part headers capped,
so a body of many small parts is refused after :data:`MAX_PARTS` of them instead of costing a
parse of every one. The parse is plain CPU work: async callers run it in a worker thread
(:func:`aparse`), never on the event loop. Every refusal is a 400 naming ``file`` (or the
field): the caps', and whatever python-multipart raises, from its constructor (a boundary over
256 bytes) to ``finalize``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from email.message import Message
from typing import Any, NamedTuple

from python_multipart.multipart import MultipartParser, parse_options_header

from config.errors import InvalidRequest
from infra.querystring import encodable

# Parts (fields and files together) one body may hold.
MAX_PARTS = 16
# Largest value of a plain (non-file) field, in bytes.
MAX_FIELD_BYTES = 64 * 1024
# Headers of one part: how many, and the longest.
MAX_PART_HEADERS = 8
MAX_PART_HEADER_BYTES = 4096


class Upload(NamedTuple):
    """An uploaded file; as a tuple it is the ``(name, bytes, content type)`` an adapter's
    ``transcribe`` takes (:data:`~inference.vendors.base.FileUpload`)."""

    filename: str
    content: bytes
    content_type: str


class _Refused(Exception):
    """Raised inside a parser callback to stop the parse at once."""


def _malformed(detail: str) -> InvalidRequest:
    return InvalidRequest(f"Malformed multipart/form-data body: {detail}.", param="file")


@dataclass
class _Collector:
    """Parser callbacks: collects parts, refusing the first one over a cap."""

    max_parts: int
    fields: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Upload] = field(default_factory=dict)
    parts: int = 0
    _header_field: bytearray = field(default_factory=bytearray)
    _header_value: bytearray = field(default_factory=bytearray)
    _headers: list[tuple[str, str]] = field(default_factory=list)
    _data: list[bytes] = field(default_factory=list)
    _size: int = 0
    _is_file: bool = False
    ended: bool = False
    refusal: InvalidRequest | None = None

    def refuse(self, error: InvalidRequest) -> None:
        self.refusal = error
        raise _Refused

    def on_part_begin(self) -> None:
        self.parts += 1
        if self.parts > self.max_parts:
            self.refuse(
                InvalidRequest(
                    f"A multipart body may hold at most {self.max_parts} parts.", param="file"
                )
            )
        self._headers, self._data, self._size, self._is_file = [], [], 0, False

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]
        if len(self._header_field) + len(self._header_value) > MAX_PART_HEADER_BYTES:
            self.refuse(_malformed("a part header is too long"))

    def on_header_end(self) -> None:
        name = self._header_field.decode("latin-1").strip().lower()
        self._headers.append((name, self._header_value.decode("utf-8", "replace").strip()))
        self._header_field.clear()
        self._header_value.clear()
        if len(self._headers) > MAX_PART_HEADERS:
            self.refuse(_malformed("a part has too many headers"))

    def on_headers_finished(self) -> None:
        self._is_file = self._filename() is not None

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        self._size += end - start
        if not self._is_file and self._size > MAX_FIELD_BYTES:
            self.refuse(
                InvalidRequest(
                    f"A form field may hold at most {MAX_FIELD_BYTES} bytes.",
                    param=self._name() or "file",
                )
            )
        self._data.append(data[start:end])

    def on_part_end(self) -> None:
        name = self._name()
        if name is None:
            return
        content = b"".join(self._data)
        self._data = []
        filename = self._filename()
        if filename is not None:
            if not encodable(filename):  # RFC 2231: ``filename*=unicode_escape''%5Cud800``
                self.refuse(_malformed("a part's filename is not valid Unicode"))
            self.files[name] = Upload(filename, content, self._content_type())
            return
        text = content.decode("utf-8", errors="replace")
        existing = self.fields.get(name)
        if existing is None:
            self.fields[name] = text
        elif isinstance(existing, list):
            existing.append(text)
        else:
            self.fields[name] = [existing, text]

    def on_end(self) -> None:
        self.ended = True

    # --- the current part's headers ------------------------------------------------------
    def _disposition(self) -> Message:
        message = Message()
        for name, value in self._headers:
            if name in ("content-disposition", "content-type"):
                message[name] = value
        return message

    def _name(self) -> str | None:
        name = self._disposition().get_param("name", header="content-disposition")
        return name if isinstance(name, str) else None

    def _filename(self) -> str | None:
        return self._disposition().get_filename()

    def _content_type(self) -> str:
        return self._disposition().get_content_type()


def _feed(collector: _Collector, content_type: str, body: bytes) -> None:
    """Run the parser over ``body`` into ``collector``. Everything python-multipart may raise,
    from the constructor (a boundary over 256 bytes) to ``finalize``, propagates to
    :func:`parse`, which turns it into a 400."""
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise _malformed("no boundary")
    callbacks: Any = {
        f"on_{name}": getattr(collector, f"on_{name}")
        for name in (
            "part_begin",
            "part_data",
            "part_end",
            "header_field",
            "header_value",
            "header_end",
            "headers_finished",
            "end",
        )
    }
    parser = MultipartParser(boundary, callbacks)
    parser.write(body)
    parser.finalize()


def parse(
    content_type: str, body: bytes, *, max_parts: int = MAX_PARTS
) -> tuple[dict[str, Any], dict[str, Upload]]:
    """``(fields, files)`` of a ``multipart/form-data`` body; repeated fields become lists.

    400 (param ``file``, or the field) for a body that is not well-formed multipart, holds more
    than ``max_parts`` parts, a field over :data:`MAX_FIELD_BYTES`, or oversized part headers.
    CPU-bound: async code calls :func:`aparse`.
    """
    collector = _Collector(max_parts=max_parts)
    try:
        _feed(collector, content_type, body)
    except _Refused:
        assert collector.refusal is not None
        raise collector.refusal from None
    except InvalidRequest:
        raise
    except Exception:  # FormParserError, ValueError …: they name offsets and states, not useful
        raise _malformed("it could not be parsed") from None
    if collector.parts == 0 or not collector.ended:
        raise _malformed("it holds no parts" if collector.parts == 0 else "it is incomplete")
    return collector.fields, collector.files


async def aparse(
    content_type: str, body: bytes, *, max_parts: int = MAX_PARTS
) -> tuple[dict[str, Any], dict[str, Upload]]:
    """:func:`parse` in a worker thread (the event loop keeps serving other requests)."""
    return await asyncio.to_thread(parse, content_type, body, max_parts=max_parts)
