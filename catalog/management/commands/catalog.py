"""``manage.py catalog dump|load FILE|seed|probe`` — the catalog as one YAML document.

- ``dump [--output FILE]``: the whole catalog (vendors, models, matrix, offerings, price
  history) as YAML; probe state is left out.
- ``load FILE``: upsert a YAML/JSON document (idempotent, deletes nothing).
- ``seed``: load the shipped ``catalog/seed/catalog.yaml``.
- ``probe [--vendor NAME ...]``: GET each vendor's ``/models`` now, record the verified models.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.documents import (
    SEED_PATH,
    CatalogDocumentError,
    catalog_dump,
    catalog_load,
    dump_yaml,
    read_document,
)
from catalog.services import vendors_probe_all


class Command(BaseCommand):
    help = "Dump, load, seed or probe the model catalog."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        dump = sub.add_parser("dump", help="Write the catalog as YAML.")
        dump.add_argument("--output", "-o", help="File to write (default: stdout).")
        load = sub.add_parser("load", help="Upsert a catalog YAML/JSON file.")
        load.add_argument("file")
        sub.add_parser("seed", help="Load the shipped seed catalog.")
        probe = sub.add_parser("probe", help="Probe vendors' /models now.")
        probe.add_argument("--vendor", action="append", default=[], help="Only this vendor.")
        probe.add_argument(
            "--wait",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="Retry unreachable vendors every 2 s for up to SECONDS (a backend starting).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "dump":
            text = dump_yaml(catalog_dump())
            if options.get("output"):
                Path(options["output"]).write_text(text, encoding="utf-8")
            else:
                self.stdout.write(text, ending="")
        elif action in ("load", "seed"):
            path = Path(options["file"]) if action == "load" else SEED_PATH
            try:
                result = catalog_load(read_document(path))
            except (OSError, CatalogDocumentError) as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(
                f"loaded {path}: {result.vendors} vendors, {result.models} models, "
                f"{result.offerings} offerings, {result.prices} prices, {result.rules} cells"
            )
        elif action == "probe":
            self._probe(names=options["vendor"], wait_s=options["wait"])

    def _probe(self, *, names: list[str], wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        pending: list[str] | None = names or None
        while True:
            results = vendors_probe_all(names=pending)
            for found in results:
                status = found.error or f"ok, {len(found.models or ())} models"
                self.stdout.write(f"{found.vendor}: {status}")
            unreachable = [r.vendor for r in results if r.models is None and r.unreachable]
            if not unreachable or time.monotonic() >= deadline:
                return
            pending = unreachable
            time.sleep(2.0)
