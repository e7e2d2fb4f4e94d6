"""``manage.py billing_audit``: report every broken money invariant; exit status 1 if any.

What it checks is the docstring of :mod:`billing.audit` (wallet = ledger sum, the
``balance_after`` chain, held = open holds, project spend, holds stuck past expiry, settled
holds vs their usage entry, request logs vs usage entries both ways, negative costs).

The whole books by default (the full audit: ~25 s for 5 M calls on the bench machine, growing
with the history); ``--since`` audits only what was written from then on, and the books'
present state, as the ``billing.audit`` beat task does every 5 minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from billing.audit import audit_findings


def _moment(text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


class Command(BaseCommand):
    help = "Check wallets, ledger, holds and request logs; exit 1 on any finding."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="Print findings only.")
        parser.add_argument(
            "--since",
            type=_moment,
            help="Audit what was written from this ISO 8601 time on (UTC unless it says), "
            "and the books' present state, instead of the whole books.",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        report = audit_findings(since=opts["since"])
        for finding in report.findings:
            self.stderr.write(f"DRIFT {finding}")
        if not opts["quiet"]:
            if report.window is not None:
                self.stdout.write(f"window: {report.window}")
            self.stdout.write(
                f"wallets={report.wallets} entries={report.entries} "
                f"open_holds={report.open_holds} drift={len(report.findings)}"
            )
        if report.findings:
            raise SystemExit(1)
