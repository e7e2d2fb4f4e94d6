"""Receipts: one per payment, i.e. per ``topup`` or ``auto_recharge`` ledger entry.

A receipt is read from the append-only ledger, never stored apart: its number is
``INF-<entry id, 8 digits>`` (unique, never reused, in the order payments were credited), its
amount, date and Stripe payment reference (``external_ref``: the PaymentIntent or Checkout
session id — references, not secrets) are the entry's. The PDF is drawn with reportlab like
the monthly statement (``dashboard.statements``); the organization's name is customer text and
is XML-escaped before it goes into a ``Paragraph``.
"""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import dataclass
from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.lib.units import mm
from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

from billing.models import PAYMENT_KINDS, EntryKind, LedgerEntry
from money.usd import nanos_to_usd_str

_METHOD = {EntryKind.TOPUP: "Card (Stripe Checkout)", EntryKind.AUTO_RECHARGE: "Auto-recharge"}


@dataclass(frozen=True, slots=True)
class Receipt:
    """One payment as its receipt shows it (nano-USD)."""

    entry_id: int
    number: str
    organization_id: int
    organization_name: str
    organization_slug: str
    paid_at: dt.datetime
    amount_nanos: int
    method: str
    reference: str
    description: str

    @property
    def filename(self) -> str:
        return f"infrai-receipt-{self.number}"


def receipt_number(entry_id: int) -> str:
    """``INF-00000042`` for ledger entry 42."""
    return f"INF-{entry_id:08d}"


def _receipt(entry: LedgerEntry) -> Receipt:
    org = entry.wallet.organization
    return Receipt(
        entry_id=entry.pk,
        number=receipt_number(entry.pk),
        organization_id=org.pk,
        organization_name=org.name,
        organization_slug=org.slug,
        paid_at=entry.created_at,
        amount_nanos=entry.amount_nanos,
        method=_METHOD.get(EntryKind(entry.kind), entry.kind),
        reference=entry.external_ref,
        description=entry.description,
    )


def receipt_for_entry(*, entry_id: int) -> Receipt | None:
    """The receipt of ledger entry ``entry_id`` (None when it is no payment)."""
    entry = (
        LedgerEntry.objects.filter(pk=entry_id, kind__in=PAYMENT_KINDS)
        .select_related("wallet__organization")
        .first()
    )
    return None if entry is None else _receipt(entry)


def receipt_get(*, organization_id: int, entry_id: int) -> Receipt | None:
    """The receipt ``entry_id`` of ``organization_id``; None for another tenant's payment, an
    entry that is no payment or none at all (the caller answers 404 alike)."""
    entry = (
        LedgerEntry.objects.filter(
            pk=entry_id, kind__in=PAYMENT_KINDS, wallet__organization_id=organization_id
        )
        .select_related("wallet__organization")
        .first()
    )
    return None if entry is None else _receipt(entry)


def receipts_for_organization(*, organization_id: int, limit: int = 50) -> list[Receipt]:
    """The organization's payments, newest first."""
    entries = (
        LedgerEntry.objects.filter(kind__in=PAYMENT_KINDS, wallet__organization_id=organization_id)
        .select_related("wallet__organization")
        .order_by("-pk")[:limit]
    )
    return [_receipt(e) for e in entries]


def receipt_pdf(receipt: Receipt) -> bytes:
    """A one-page A4 PDF of ``receipt``."""
    buffer = io.BytesIO()
    doc = SimpleDocTemplate(
        buffer,
        pagesize=A4,
        title=f"infrai receipt {receipt.number}",
        leftMargin=18 * mm,
        rightMargin=18 * mm,
    )
    styles = getSampleStyleSheet()
    rows = [
        ["Receipt number", receipt.number],
        ["Date (UTC)", receipt.paid_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M")],
        ["Organization", receipt.organization_name[:80]],
        ["Paid with", receipt.method],
        ["Payment reference", receipt.reference or "—"],
        ["Description", receipt.description[:80]],
        ["Amount (USD)", nanos_to_usd_str(receipt.amount_nanos)],
    ]
    table = Table(rows, colWidths=[45 * mm, 125 * mm])
    table.setStyle(
        TableStyle(
            [
                ("FONTNAME", (0, 0), (0, -1), "Helvetica-Bold"),
                ("FONTNAME", (1, -1), (1, -1), "Helvetica-Bold"),
                ("FONTSIZE", (0, 0), (-1, -1), 10),
                ("LINEABOVE", (0, -1), (-1, -1), 0.5, colors.black),
                ("ROWBACKGROUNDS", (0, 0), (-1, -2), [colors.white, colors.HexColor("#f3f4f6")]),
            ]
        )
    )
    story = [
        Paragraph("Receipt", styles["Title"]),
        Paragraph(f"infrai · paid by {escape(receipt.organization_name)}", styles["Normal"]),
        Spacer(1, 6 * mm),
        table,
        Spacer(1, 6 * mm),
        Paragraph(
            "Prepaid credit added to the organization's infrai wallet. Paid in full.",
            styles["Normal"],
        ),
    ]
    doc.build(story)
    return buffer.getvalue()
