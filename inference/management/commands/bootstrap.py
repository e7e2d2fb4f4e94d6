"""``manage.py bootstrap``: what `make run` needs on a fresh embedded database.

Loads the seed catalog, creates the demo organization/project with a small credit and a key
(once), and prints the base URL and the key. The demo key is kept in ``var/demo_key`` (mode
600) because only its hash is in the database; a second run reuses both.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from accounts import keys
from accounts.models import ApiKey

DEMO_ORG = "demo"
DEMO_PROJECT = "default"
DEMO_CREDIT_USD = "5"


def _seed_file() -> Path | None:
    path = Path(settings.BASE_DIR) / "catalog" / "seed" / "catalog.yaml"
    return path if path.exists() else None


class Command(BaseCommand):
    help = "Load the seed catalog and create the demo organization and key (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--key-file", default=str(settings.DATA_DIR / "demo_key"))

    def handle(self, *args: Any, **opts: Any) -> None:
        seed = _seed_file()
        if seed is not None:
            call_command("catalog", "load", str(seed), verbosity=0)
        key_file = Path(opts["key_file"])
        raw = key_file.read_text().strip() if key_file.exists() else ""
        if not (raw and ApiKey.objects.filter(key_hash=keys.hash_key(raw)).exists()):
            raw = self._issue_demo_key()
            key_file.parent.mkdir(parents=True, exist_ok=True)
            key_file.write_text(raw + "\n")
            os.chmod(key_file, 0o600)
        self.stdout.write(f"infrai base URL: {settings.INFRAI_PUBLIC_BASE_URL}")
        self.stdout.write(f"demo API key:    {raw}")

    def _issue_demo_key(self) -> str:
        from io import StringIO

        out = StringIO()
        call_command(
            "issue_key",
            org=DEMO_ORG,
            project=DEMO_PROJECT,
            credit_usd=DEMO_CREDIT_USD,
            name="demo (make run)",
            stdout=out,
        )
        return out.getvalue().strip().splitlines()[-1]
