"""``manage.py issue_key --org SLUG --project NAME --credit-usd AMOUNT``.

Creates the organization and project when needed, credits the wallet by AMOUNT (0 allowed),
and prints the new key alone on the last line of stdout (scripts and tests rely on that).
"""

from __future__ import annotations

import secrets
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.selectors import organization_get_by_slug, project_get_by_name
from accounts.services import api_key_create, organization_create, project_create
from billing.services.wallet import wallet_fund
from money.usd import usd_to_nanos


class Command(BaseCommand):
    help = "Create (if needed) an organization and project, credit the wallet, print a new key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--org", required=True, help="Organization slug.")
        parser.add_argument("--project", required=True, help="Project name.")
        parser.add_argument("--credit-usd", default="0", help="Credit to add, in USD (e.g. 5.00).")
        parser.add_argument("--name", default="", help="Key name.")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            credit = usd_to_nanos(Decimal(opts["credit_usd"]))
        except (InvalidOperation, ValueError) as exc:
            raise CommandError(f"--credit-usd must be a non-negative amount: {exc}") from None
        if credit < 0:
            raise CommandError("--credit-usd must be a non-negative amount.")
        org = organization_get_by_slug(slug=opts["org"])
        if org is None:
            org = organization_create(name=opts["org"], slug=opts["org"])
        project = project_get_by_name(organization=org, name=opts["project"])
        if project is None:
            project = project_create(organization=org, name=opts["project"])
        wallet_fund(
            organization=org,
            amount_nanos=credit,
            idempotency_key=f"issue_key:{secrets.token_hex(8)}",
            description="Credit from manage.py issue_key",
        )
        _, raw = api_key_create(project=project, name=opts["name"] or "issued by manage.py")
        self.stdout.write(
            f"organization={org.slug} project={project.name} credit_usd={opts['credit_usd']}"
        )
        self.stdout.write(raw)
