"""Request bodies of the management API, validated by DRF serializers.

Money comes in as a string of USD (``"25.00"``) and is converted to integer nano-USD here, at
the boundary; a number with more than 9 decimals is refused.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from rest_framework import serializers

from accounts.roles import Role
from money.usd import usd_to_nanos


class UsdField(serializers.DecimalField):
    """A USD amount as a string (or number) → integer nano-USD."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_digits=21, decimal_places=9, min_value=Decimal(0), **kwargs)

    def to_internal_value(self, data: Any) -> int:  # type: ignore[override]
        return usd_to_nanos(super().to_internal_value(data))


class ProjectCreate(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100)
    monthly_budget_usd = UsdField(required=False, allow_null=True)


class ProjectUpdate(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100, required=False)
    monthly_budget_usd = UsdField(required=False, allow_null=True)


class ApiKeyWrite(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)
    expires_at = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=253402300799
    )
    requests_per_minute = serializers.IntegerField(required=False, min_value=1, max_value=1_000_000)
    tokens_per_minute = serializers.IntegerField(
        required=False, min_value=1, max_value=2_000_000_000
    )
    monthly_budget_usd = UsdField(required=False, allow_null=True)


class RoleChange(serializers.Serializer[Any]):
    role = serializers.ChoiceField(choices=Role.choices)


class InviteCreate(serializers.Serializer[Any]):
    email = serializers.EmailField()
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)


class TopUpCreate(serializers.Serializer[Any]):
    amount_usd = UsdField()
    success_url = serializers.URLField()
    cancel_url = serializers.URLField()
