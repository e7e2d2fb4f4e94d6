"""``manage.py billing_audit``: report money drift; exit status 1 when there is any.

Checks, per wallet: balance == sum(ledger); held == sum(open holds); the newest entry's
``balance_after_nanos`` == balance. Per project and month: held == sum(open holds).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from billing.audit import audit_findings


class Command(BaseCommand):
    help = "Check that every wallet equals its ledger and its open holds; non-zero on drift."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="Print drift only.")

    def handle(self, *args: Any, **opts: Any) -> None:
        report = audit_findings()
        for line in report.drift:
            self.stderr.write(f"DRIFT {line}")
        if not opts["quiet"]:
            self.stdout.write(
                f"wallets={report.wallets} entries={report.entries} "
                f"open_holds={report.open_holds} drift={len(report.drift)}"
            )
        if report.drift:
            raise SystemExit(1)
