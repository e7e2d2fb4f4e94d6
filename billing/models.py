"""Wallets, the append-only ledger, and holds. All money is integer nano-USD (1e-9 USD)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from accounts.models import ApiKey, Organization, Project


class Wallet(models.Model):
    """One per organization. ``balance_nanos`` always equals the sum of its ledger entries;
    ``held_nanos`` is the sum of its open holds. Available = balance - held."""

    organization = models.OneToOneField(
        Organization, on_delete=models.PROTECT, related_name="wallet"
    )
    balance_nanos = models.BigIntegerField(default=0)
    held_nanos = models.BigIntegerField(default=0)
    stripe_customer_id = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(held_nanos__gte=0), name="wallet_held_gte_0"),
        ]

    def __str__(self) -> str:
        return f"wallet of {self.organization_id}"


class EntryKind(models.TextChoices):
    TOPUP = "topup", "Top-up"
    USAGE = "usage", "Usage"
    REFUND = "refund", "Refund"
    DISPUTE = "dispute", "Dispute"
    ADJUSTMENT = "adjustment", "Adjustment"
    AUTO_RECHARGE = "auto_recharge", "Auto-recharge"
    CREDIT = "credit", "Promotional credit"


class LedgerEntry(models.Model):
    """An append-only balance change. Never updated or deleted."""

    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT, related_name="entries")
    kind = models.CharField(max_length=16, choices=EntryKind.choices)
    amount_nanos = models.BigIntegerField(help_text="Signed: credits > 0, debits < 0.")
    balance_after_nanos = models.BigIntegerField()
    idempotency_key = models.CharField(max_length=128, unique=True)
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL)
    api_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL)
    request_id = models.CharField(max_length=40, blank=True, db_index=True)
    description = models.CharField(max_length=255, blank=True)
    created_by = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["wallet", "-created_at"])]
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"{self.kind} {self.amount_nanos}"


class HoldStatus(models.TextChoices):
    OPEN = "open", "Open"
    SETTLED = "settled", "Settled"
    RELEASED = "released", "Released (expired)"


class Hold(models.Model):
    """A reservation of the worst-case cost of one call."""

    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT, related_name="holds")
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL)
    api_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL)
    request_id = models.CharField(max_length=40, unique=True)
    amount_nanos = models.BigIntegerField()
    captured_nanos = models.BigIntegerField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=HoldStatus.choices, default=HoldStatus.OPEN)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "expires_at"])]

    def __str__(self) -> str:
        return f"hold {self.request_id} {self.status}"
