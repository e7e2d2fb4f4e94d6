"""The monthly statement as CSV and PDF (reportlab). Amounts are exact USD decimals.

Names and descriptions come from customers. In the PDF, reportlab's ``Paragraph`` parses its
text as markup (``<img src=…>`` would embed a file from the server's disk, a malformed tag
raises): every customer string is XML-escaped before it goes into one (table cells are plain
text). In the CSV, text cells that a spreadsheet would run as a formula get a leading ``'``.
"""

from __future__ import annotations

import csv
import io
from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.lib.units import mm
from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

from billing.selectors import Statement
from money.usd import nanos_to_usd_str


def statement_csv(statement: Statement) -> str:
    """``date,kind,description,amount_usd`` rows framed by opening and closing balance rows."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["date", "kind", "description", "amount_usd"])
    first = statement.month.isoformat()
    writer.writerow([first, "Opening balance", "", nanos_to_usd_str(statement.opening_nanos)])
    for line in statement.lines:
        writer.writerow(
            [
                line.day.isoformat(),
                csv_text(line.kind),
                csv_text(line.description),
                nanos_to_usd_str(line.amount_nanos),
            ]
        )
    writer.writerow(["", "Closing balance", "", nanos_to_usd_str(statement.closing_nanos)])
    return out.getvalue()


def csv_text(value: str) -> str:
    """``value`` made inert for spreadsheets (a leading ``= + - @`` would start a formula)."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def statement_pdf(statement: Statement) -> bytes:
    """A one-table A4 PDF of the statement."""
    buffer = io.BytesIO()
    doc = SimpleDocTemplate(
        buffer,
        pagesize=A4,
        title=f"infrai statement {statement.month:%Y-%m}",
        leftMargin=18 * mm,
        rightMargin=18 * mm,
    )
    styles = getSampleStyleSheet()
    rows: list[list[str]] = [["Date", "Kind", "Description", "Amount (USD)"]]
    rows.append(
        [
            statement.month.isoformat(),
            "Opening balance",
            "",
            nanos_to_usd_str(statement.opening_nanos),
        ]
    )
    rows += [
        [
            line.day.isoformat(),
            line.kind,
            line.description[:60],
            nanos_to_usd_str(line.amount_nanos),
        ]
        for line in statement.lines
    ]
    rows.append(["", "Closing balance", "", nanos_to_usd_str(statement.closing_nanos)])
    table = Table(rows, colWidths=[25 * mm, 38 * mm, 75 * mm, 32 * mm], repeatRows=1)
    table.setStyle(
        TableStyle(
            [
                ("FONTNAME", (0, 0), (-1, 0), "Helvetica-Bold"),
                ("LINEBELOW", (0, 0), (-1, 0), 0.5, colors.black),
                ("ALIGN", (3, 0), (3, -1), "RIGHT"),
                ("FONTSIZE", (0, 0), (-1, -1), 9),
                ("ROWBACKGROUNDS", (0, 1), (-1, -1), [colors.white, colors.HexColor("#f3f4f6")]),
            ]
        )
    )
    story = [
        Paragraph(f"Statement for {escape(statement.organization_name)}", styles["Title"]),
        Paragraph(f"Month: {statement.month:%B %Y} (UTC)", styles["Normal"]),
        Spacer(1, 6 * mm),
        table,
        Spacer(1, 4 * mm),
        Paragraph(
            f"Credits {nanos_to_usd_str(statement.credits_nanos)} USD · "
            f"debits {nanos_to_usd_str(statement.debits_nanos)} USD",
            styles["Normal"],
        ),
    ]
    doc.build(story)
    return buffer.getvalue()
