"""``manage.py billing_audit``: report every broken money invariant; exit status 1 if any.

What it checks is the docstring of :mod:`billing.audit` (wallet = ledger sum, the
``balance_after`` chain, held = open holds, project spend, holds stuck past expiry, settled
holds vs their usage entry, request logs vs usage entries both ways, negative costs).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from billing.audit import audit_findings


class Command(BaseCommand):
    help = "Check wallets, ledger, holds and request logs; exit 1 on any finding."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="Print findings only.")

    def handle(self, *args: Any, **opts: Any) -> None:
        report = audit_findings()
        for finding in report.findings:
            self.stderr.write(f"DRIFT {finding}")
        if not opts["quiet"]:
            self.stdout.write(
                f"wallets={report.wallets} entries={report.entries} "
                f"open_holds={report.open_holds} drift={len(report.findings)}"
            )
        if report.findings:
            raise SystemExit(1)
