"""Request bodies of the management API, validated by DRF serializers.

Money comes in as a string of USD (``"25.00"``) and is converted to integer nano-USD here, at
the boundary; a number with more than 9 decimals is refused.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from rest_framework import serializers

from accounts.policy import InvalidKeyLimit, key_limits_validate
from accounts.roles import Role
from money.usd import usd_to_nanos


class UsdField(serializers.DecimalField):
    """A USD amount as a string (or number) → integer nano-USD."""

    def __init__(self, *, signed: bool = False, **kwargs: Any) -> None:
        """``signed``: negative amounts pass (a later check refuses them with its own text)."""
        bound = {} if signed else {"min_value": Decimal(0)}
        super().__init__(max_digits=21, decimal_places=9, **bound, **kwargs)

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
    # Bounds: accounts.policy.key_limits_validate (the dashboard's key form calls it too).
    requests_per_minute = serializers.IntegerField(required=False)
    tokens_per_minute = serializers.IntegerField(required=False)
    monthly_budget_usd = UsdField(required=False, allow_null=True, signed=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:
            key_limits_validate(
                requests_per_minute=attrs.get("requests_per_minute"),
                tokens_per_minute=attrs.get("tokens_per_minute"),
                monthly_budget_nanos=attrs.get("monthly_budget_usd"),
            )
        except InvalidKeyLimit as error:
            raise serializers.ValidationError({error.param: error.message}) from None
        return attrs


class RoleChange(serializers.Serializer[Any]):
    role = serializers.ChoiceField(choices=Role.choices)


class InviteCreate(serializers.Serializer[Any]):
    email = serializers.EmailField()
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)


class TopUpCreate(serializers.Serializer[Any]):
    amount_usd = UsdField()
    success_url = serializers.URLField()
    cancel_url = serializers.URLField()
