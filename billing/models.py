"""Wallets, the append-only ledger, holds, project spend counters and Stripe records.

All money is integer nano-USD (1e-9 USD) in ``BigIntegerField``s. Rows here are written only by
:mod:`billing.services`; nothing else updates a balance.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from accounts.models import ApiKey, Organization, Project
from money.usd import nanos_to_usd_str


class Wallet(models.Model):
    """One per organization ("one wallet, one bill").

    Invariants (checked by ``manage.py billing_audit``): ``balance_nanos`` equals the sum of the
    wallet's ledger entries; ``held_nanos`` equals the sum of its open holds. Available =
    balance - held. The balance may go below zero only through refunds, disputes or staff
    adjustments, never through holds.
    """

    organization = models.OneToOneField(
        Organization, on_delete=models.PROTECT, related_name="wallet"
    )
    balance_nanos = models.BigIntegerField(default=0)
    held_nanos = models.BigIntegerField(default=0)
    stripe_customer_id = models.CharField(max_length=64, blank=True)
    # Auto-recharge: charge ``amount`` off-session on the saved method when the balance falls
    # below ``threshold``. ``armed`` makes it once per crossing: cleared when a charge is tried,
    # set again when the balance is back at or above the threshold.
    auto_recharge_enabled = models.BooleanField(default=False)
    auto_recharge_threshold_nanos = models.BigIntegerField(default=0)
    auto_recharge_amount_nanos = models.BigIntegerField(default=0)
    auto_recharge_payment_method_id = models.CharField(max_length=64, blank=True)
    auto_recharge_armed = models.BooleanField(default=True)
    auto_recharge_attempts = models.PositiveIntegerField(
        default=0, help_text="Charges tried so far; part of each charge's idempotency key."
    )
    auto_recharge_last_error = models.CharField(max_length=255, blank=True)
    # Low-balance e-mail: sent once when a ledger entry leaves the available balance (balance -
    # held) below ``threshold`` (0 = never). ``armed`` makes it once per crossing: cleared by
    # the notifier that wins it (billing.services.notify), set again only by a credit that
    # leaves the available balance at or above the threshold.
    low_balance_threshold_nanos = models.BigIntegerField(
        default=1_000_000_000, db_default=1_000_000_000
    )
    low_balance_armed = models.BooleanField(default=True, db_default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(held_nanos__gte=0), name="wallet_held_gte_0"),
        ]

    def __str__(self) -> str:
        # Named by its organization (staff pages load it with the wallet: select_related).
        return f"wallet of {self.organization.name}"


class EntryKind(models.TextChoices):
    TOPUP = "topup", "Top-up"
    USAGE = "usage", "Usage"
    REFUND = "refund", "Refund"
    DISPUTE = "dispute", "Dispute"
    DISPUTE_WON = "dispute_won", "Dispute won (reinstated)"
    ADJUSTMENT = "adjustment", "Adjustment"
    AUTO_RECHARGE = "auto_recharge", "Auto-recharge"
    CREDIT = "credit", "Promotional credit"
    STARTER_CREDIT = "starter_credit", "Starter credit"
    HOLD_EXPIRED = "hold_expired", "Hold expired (released)"


#: The ledger kinds that are a customer's payment (each has a receipt, ``billing.receipts``).
PAYMENT_KINDS = frozenset({EntryKind.TOPUP, EntryKind.AUTO_RECHARGE})


class LedgerEntry(models.Model):
    """An append-only balance change. Never updated, deleted or truncated: a PostgreSQL trigger
    refuses all three, except the nulling of ``project``/``api_key``/
    ``created_by`` when those rows are deleted (migration 0003)."""

    # Indexed by (wallet, -id) below, which also serves lookups by wallet alone.
    wallet = models.ForeignKey(
        Wallet, on_delete=models.PROTECT, related_name="entries", db_index=False
    )
    kind = models.CharField(max_length=16, choices=EntryKind.choices)
    amount_nanos = models.BigIntegerField(help_text="Signed: credits > 0, debits < 0.")
    balance_after_nanos = models.BigIntegerField()
    idempotency_key = models.CharField(max_length=128)  # unique: Meta.constraints
    # Who the entry is attributed to. No database constraint (Django still nulls them when the
    # row is deleted): each would be checked, and its row share-locked, on every settlement.
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False
    )
    request_id = models.CharField(max_length=40, blank=True)  # indexed: Meta.indexes
    external_ref = models.CharField(
        max_length=64, blank=True, help_text="Stripe object (charge, session …)."
    )
    description = models.CharField(max_length=255, blank=True)
    created_by = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        # Indexes and unique constraints declared here rather than with db_index/unique on
        # the fields: PostgreSQL then gets no second, LIKE-only (varchar_pattern_ops) index
        # per text column — nothing queries these by prefix, and every index is written on
        # every call's settlement.
        indexes = [
            models.Index(fields=["wallet", "-id"]),
            models.Index(fields=["request_id"], name="ledger_request_id_idx"),
            models.Index(fields=["external_ref"], name="ledger_external_ref_idx"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["idempotency_key"], name="uniq_ledger_idempotency"),
        ]
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"{self.kind} {nanos_to_usd_str(self.amount_nanos)} USD"


class HoldStatus(models.TextChoices):
    OPEN = "open", "Open"
    SETTLED = "settled", "Settled"
    EXPIRED = "expired", "Expired (released by the sweeper)"


class Hold(models.Model):
    """A reservation of the worst-case cost of one call (see :mod:`billing.services.holds`)."""

    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT, related_name="holds")
    # Attribution without a database constraint, as on LedgerEntry (checked on every hold).
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False
    )
    request_id = models.CharField(max_length=40)  # unique: Meta.constraints
    amount_nanos = models.BigIntegerField()
    captured_nanos = models.BigIntegerField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=HoldStatus.choices, default=HoldStatus.OPEN)
    month = models.DateField(help_text="First day of the UTC month the hold was opened in.")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    # The process that opened the hold (:class:`Process`), and what its call had delivered at
    # the last checkpoint (the renewal records it): what an expiry charges.
    process = models.CharField(max_length=64, blank=True, default="", db_default="")
    delivered_nanos = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        indexes = [models.Index(fields=["status", "expires_at"])]
        # Not unique=True on the field: no LIKE-only index beside it (see LedgerEntry).
        constraints = [models.UniqueConstraint(fields=["request_id"], name="uniq_hold_request")]

    def __str__(self) -> str:
        return f"hold {self.request_id} {self.status}"


class Process(models.Model):
    """A process that opens holds, and when it was last seen alive (its hold renewer's tick).

    What tells a hold that expired because its process died from one that expired while its
    process lived on (a renewal or a settlement that could not reach the database): the
    audit's ``expired_alive`` check.
    """

    token = models.CharField(max_length=64, primary_key=True)
    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"process {self.token}"


class ProjectSpend(models.Model):
    """Per project and UTC month: settled usage and open holds, in nano-USD.

    The counter the project budget is enforced against (one conditional upsert on the hot
    path instead of summing the ledger). A call counts in the month its hold was opened.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    month = models.DateField()
    used_nanos = models.BigIntegerField(default=0)
    held_nanos = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "month"], name="uniq_project_spend_month")
        ]

    def __str__(self) -> str:
        return f"spend {self.project_id} {self.month:%Y-%m}"


class TopUpStatus(models.TextChoices):
    OPEN = "open", "Checkout open"
    PENDING = "pending", "Payment processing"
    PAID = "paid", "Paid (credited)"
    FAILED = "failed", "Payment failed"
    EXPIRED = "expired", "Checkout expired"


class TopUp(models.Model):
    """A Stripe Checkout session we created. Credit comes only from the webhook."""

    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT, related_name="topups")
    checkout_session_id = models.CharField(max_length=128, unique=True)
    amount_nanos = models.BigIntegerField()
    status = models.CharField(max_length=10, choices=TopUpStatus.choices, default=TopUpStatus.OPEN)
    payment_intent_id = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    paid_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"top-up {self.checkout_session_id} {self.status}"


class StripeEventStatus(models.TextChoices):
    PROCESSED = "processed", "Processed"
    IGNORED = "ignored", "Ignored (not relevant)"
    FAILED = "failed", "Failed (needs staff)"
    REFUSED = "refused", "Refused (invalid amount or currency)"


class StripeEvent(models.Model):
    """Every verified webhook event, stored once by its id, with what we did about it."""

    event_id = models.CharField(max_length=128, unique=True)
    type = models.CharField(max_length=64)
    status = models.CharField(max_length=10, choices=StripeEventStatus.choices)
    livemode = models.BooleanField(default=False)
    stripe_created = models.DateTimeField(help_text="When Stripe created the event.")
    payload = models.JSONField()
    detail = models.CharField(max_length=255, blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"
