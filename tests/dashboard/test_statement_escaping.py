"""Customer-controlled names never act as markup in the PDF statement or formulas in the CSV."""

from __future__ import annotations

import base64
import contextlib
import re
import zlib
from datetime import date
from pathlib import Path

import pytest

from billing.selectors import Statement, StatementLine
from dashboard.statements import statement_csv, statement_pdf

SECRET = Path(__file__).resolve().parents[2] / "docs" / "screenshots" / "usage.png"


def _statement(name: str, description: str = "Top-up") -> Statement:
    return Statement(
        organization_name=name,
        month=date(2026, 11, 1),
        opening_nanos=0,
        closing_nanos=5_000_000_000,
        lines=[StatementLine(date(2026, 11, 2), "credit", description, 5_000_000_000)],
    )


def _pdf_text(pdf: bytes) -> bytes:
    """The PDF's page content: each stream ASCII85-decoded and inflated (reportlab's filters)."""
    out = [pdf]
    for raw in re.findall(rb"\bstream\r?\n(.*?)\s*endstream", pdf, re.S):
        with contextlib.suppress(ValueError, zlib.error):
            out.append(zlib.decompress(base64.a85decode(raw.removesuffix(b"~>"))))
    return b"\n".join(out).replace(b") Tj (", b"")  # text runs joined


@pytest.mark.parametrize(
    ("name", "shown"),
    [(f'Evil <img src="{SECRET}" width="100" height="100"/> Corp', b"Statement for Evil <img"),
     ("Broken <b>unclosed <i>tags</b>", b"Broken <b>unclosed <i>tags</b>"),
     ("Ampersand & <font color=red>co</font>", b"Ampersand & <font color=red>co</font>")],
)  # fmt: skip
def test_an_organization_name_is_text_in_the_pdf(name, shown):
    pdf = statement_pdf(_statement(name))
    assert pdf.startswith(b"%PDF")
    assert b"/Subtype /Image" not in pdf  # nothing was embedded from the server's disk
    assert shown in _pdf_text(pdf)  # the markup is shown as the name's text


def test_csv_cells_cannot_start_a_formula():
    csv = statement_csv(_statement("x", description='=HYPERLINK("http://evil","click")'))
    assert "'=HYPERLINK" in csv
    assert csv.rstrip().endswith(",5")  # amounts stay numbers
