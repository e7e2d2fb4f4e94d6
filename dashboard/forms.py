"""Dashboard forms. Money is entered in USD and converted to integer nano-USD here."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import password_validation
from django.utils import timezone

from accounts.models import Project, Role, User
from accounts.policy import InvalidKeyLimit, KeyLimits, key_limits_validate
from money.usd import usd_to_nanos

MAX_BUDGET_USD = Decimal("1000000")


class SignupForm(forms.Form):
    email = forms.EmailField(label="E-mail address", max_length=254)
    password = forms.CharField(
        label="Password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text="At least 8 characters, not only digits, not a common password.",
    )
    organization_name = forms.CharField(
        label="Organization name",
        max_length=150,
        help_text="Your company or team. You can invite others and add more later.",
    )

    def __init__(self, *args: Any, invited_email: str = "", **kwargs: Any) -> None:
        """With ``invited_email`` (sign-up from an invitation) no organization is created."""
        super().__init__(*args, **kwargs)
        if invited_email:
            del self.fields["organization_name"]
            self.fields["email"].initial = invited_email

    def clean_email(self) -> str:
        email = self.cleaned_data["email"].strip().lower()
        if User.objects.filter(email=email).exists():
            raise forms.ValidationError(
                "An account with this e-mail address already exists. Log in or reset the password."
            )
        return email

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        password = data.get("password")
        if password:
            try:
                password_validation.validate_password(password, User(email=data.get("email", "")))
            except forms.ValidationError as error:
                self.add_error("password", error)
        return data


class OrganizationForm(forms.Form):
    name = forms.CharField(label="Organization name", max_length=150)


class _GrantsRole(forms.Form):
    """A form whose ``role`` field offers owner only with ``allow_owner`` (only an owner makes
    owners). Declares no field itself, so each form keeps its own field order."""

    def __init__(self, *args: Any, allow_owner: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["role"]
        assert isinstance(field, forms.ChoiceField)
        if not allow_owner:
            field.choices = [c for c in Role.choices if c[0] != Role.OWNER]


class InviteForm(_GrantsRole):
    email = forms.EmailField(label="E-mail address")
    role = forms.ChoiceField(label="Role", choices=Role.choices, initial=Role.MEMBER)


class RoleForm(_GrantsRole):
    role = forms.ChoiceField(label="Role", choices=Role.choices)


def _usd_to_budget_nanos(value: Decimal | None) -> int | None:
    if value is None:
        return None
    try:
        return usd_to_nanos(value)
    except ValueError as error:
        raise forms.ValidationError("Use at most 9 decimal places.") from error


class ProjectForm(forms.Form):
    """Create or edit a project. ``cleaned_data['monthly_budget_nanos']`` is set by ``clean``."""

    name = forms.CharField(label="Project name", max_length=100)
    monthly_budget_usd = forms.DecimalField(
        label="Monthly budget (USD)",
        required=False,
        min_value=Decimal("0.01"),
        max_value=MAX_BUDGET_USD,
        decimal_places=2,
        help_text="Calls that would exceed it in a calendar month are refused. Empty: no limit.",
    )

    def __init__(
        self, *args: Any, organization_id: int, project_id: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._organization_id = organization_id
        self._project_id = project_id

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        clash = Project.objects.filter(organization_id=self._organization_id, name=name)
        if self._project_id is not None:
            clash = clash.exclude(pk=self._project_id)
        if clash.exists():
            raise forms.ValidationError("A project with this name already exists.")
        return name

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        data["monthly_budget_nanos"] = _usd_to_budget_nanos(data.get("monthly_budget_usd"))
        return data


EXPIRY_CHOICES = [
    ("", "Never"),
    ("7", "In 7 days"),
    ("30", "In 30 days"),
    ("90", "In 90 days"),
    ("365", "In a year"),
]


class _ChoosesProject(forms.Form):
    """A form whose ``project`` field offers exactly ``projects`` (a queryset of the caller's
    organization), without an empty choice."""

    def __init__(self, *args: Any, projects: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["project"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = projects
        field.empty_label = None


class ApiKeyCreateForm(_ChoosesProject):
    name = forms.CharField(
        label="Key name",
        max_length=100,
        required=False,
        help_text="Something that tells you where it is used, e.g. “production backend”.",
    )
    project = forms.ModelChoiceField(label="Project", queryset=Project.objects.none())
    expires_in_days = forms.TypedChoiceField(
        label="Expires",
        choices=EXPIRY_CHOICES,
        required=False,
        coerce=int,
        empty_value=None,
    )

    @property
    def expires_at(self) -> datetime | None:
        days = self.cleaned_data.get("expires_in_days")
        return None if days is None else timezone.now() + timedelta(days=days)


class ApiKeyEditForm(forms.Form):
    """A key's name, expiry and limits. The limits are checked by
    :func:`accounts.policy.key_limits_validate`, the management API's own check (same values
    refused, same text); who may raise them is the service's rule (a refusal is shown on the
    field it names)."""

    name = forms.CharField(label="Key name", max_length=100, required=False)
    expires_on = forms.DateField(
        label="Expires on (UTC)",
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="The key stops working at the start of this day. Empty: never.",
    )
    requests_per_minute = forms.IntegerField(
        label="Requests per minute",
        required=False,
        help_text="More in a minute are refused with HTTP 429.",
    )
    tokens_per_minute = forms.IntegerField(
        label="Tokens per minute",
        required=False,
        help_text="Input and output tokens; more in a minute are refused with HTTP 429.",
    )
    monthly_budget_usd = forms.DecimalField(
        label="Monthly budget (USD)",
        required=False,
        max_digits=21,
        decimal_places=9,
        help_text="What this key may spend per UTC calendar month; calls past it get HTTP 402 "
        "(key_budget_exceeded). Empty: no budget of its own.",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        budget = data.get("monthly_budget_usd")
        data["monthly_budget_nanos"] = None if budget is None else usd_to_nanos(budget)
        try:
            key_limits_validate(
                requests_per_minute=data.get("requests_per_minute"),
                tokens_per_minute=data.get("tokens_per_minute"),
                monthly_budget_nanos=data["monthly_budget_nanos"],
            )
        except InvalidKeyLimit as error:
            self.add_error(error.param, error.message)
        return data

    def limits(self, current: KeyLimits) -> KeyLimits:
        """The limits to save: a rate limit left empty, or a budget field not posted at all,
        keeps ``current``'s (an empty budget field is no budget)."""
        data = self.cleaned_data
        return KeyLimits(
            requests_per_minute=data["requests_per_minute"] or current.requests_per_minute,
            tokens_per_minute=data["tokens_per_minute"] or current.tokens_per_minute,
            monthly_budget_nanos=data["monthly_budget_nanos"]
            if "monthly_budget_usd" in self.data
            else current.monthly_budget_nanos,
        )

    def clean_expires_on(self) -> date | None:
        value: date | None = self.cleaned_data.get("expires_on")
        if value is not None and value <= timezone.now().date():
            raise forms.ValidationError("Pick a day after today, or revoke the key instead.")
        return value

    @property
    def expires_at(self) -> datetime | None:
        value = self.cleaned_data.get("expires_on")
        if value is None:
            return None
        return datetime.combine(value, time.min, tzinfo=UTC)


TOPUP_CHOICES_USD = (10, 25, 50, 100)


class TopUpForm(forms.Form):
    """A preset amount or a custom one (whole cents) in USD, within billing's top-up bounds
    (``INFRAI_TOPUP_MIN_USD`` … ``INFRAI_TOPUP_MAX_USD``)."""

    amount = forms.ChoiceField(
        label="Amount",
        choices=[(str(a), f"${a}") for a in TOPUP_CHOICES_USD] + [("custom", "Other amount")],
        initial="25",
        widget=forms.RadioSelect,
    )
    custom_usd = forms.DecimalField(label="Other amount (USD)", required=False, decimal_places=2)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        low, high = Decimal(settings.INFRAI_TOPUP_MIN_USD), Decimal(settings.INFRAI_TOPUP_MAX_USD)
        self.bounds = (low, high)
        self.fields["custom_usd"].help_text = f"Between ${low} and ${high:,}."

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        choice = data.get("amount")
        amount = data.get("custom_usd") if choice == "custom" else Decimal(choice or "0")
        if choice == "custom" and amount is None:
            if "custom_usd" not in self.errors:
                self.add_error("custom_usd", "Enter the amount you want to add.")
            return data
        if amount is None or not choice:
            return data
        low, high = self.bounds
        if not low <= amount <= high:
            field = "custom_usd" if choice == "custom" else "amount"
            self.add_error(field, f"Choose an amount between ${low} and ${high:,}.")
            return data
        data["amount_nanos"] = usd_to_nanos(amount)
        return data


class AutoRechargeForm(forms.Form):
    enabled = forms.BooleanField(label="Recharge automatically", required=False)
    threshold_usd = forms.DecimalField(
        label="When the balance falls below (USD)",
        min_value=Decimal("1"),
        decimal_places=2,
    )
    amount_usd = forms.DecimalField(label="Add (USD)", min_value=Decimal("1"), decimal_places=2)


class LowBalanceForm(forms.Form):
    """The low-balance e-mail threshold. Its ids are ``id_low_balance_<field>``: the wallet page
    also shows the auto-recharge form, whose ``threshold_usd`` has Django's default id."""

    threshold_usd = forms.DecimalField(
        label="E-mail when the available balance falls below (USD)",
        min_value=Decimal("0"),
        max_value=MAX_BUDGET_USD,
        decimal_places=2,
        help_text="Owners and billing members get one e-mail each time it does. 0: never.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "id_low_balance_%s")
        super().__init__(*args, **kwargs)


class DateRangeForm(forms.Form):
    """An inclusive UTC date range of at most 366 days; defaults to the last 30 days."""

    start = forms.DateField(label="From", required=False, widget=forms.DateInput({"type": "date"}))
    end = forms.DateField(label="To", required=False, widget=forms.DateInput({"type": "date"}))
    MAX_DAYS = 366

    def __init__(self, data: Any = None, *args: Any, **kwargs: Any) -> None:
        today = timezone.now().date()
        kwargs.setdefault("initial", {"start": today - timedelta(days=29), "end": today})
        super().__init__(data, *args, **kwargs)

    def range(self) -> tuple[date, date]:
        """The validated range, or the default when the form is invalid or empty."""
        today = timezone.now().date()
        data = self.cleaned_data if self.is_valid() else {}
        end = data.get("end") or today
        start = data.get("start") or end - timedelta(days=29)
        return start, end

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("start"), data.get("end")
        if start and end:
            if start > end:
                raise forms.ValidationError("The start date must be on or before the end date.")
            if (end - start).days >= self.MAX_DAYS:
                raise forms.ValidationError("Pick a range of at most a year.")
        return data


class LogFilterForm(DateRangeForm):
    status = forms.ChoiceField(label="Status", required=False)
    model = forms.CharField(label="Model", required=False, max_length=120)
    vendor = forms.CharField(label="Vendor", required=False, max_length=64)
    key = forms.TypedChoiceField(label="Key", required=False, coerce=int, empty_value=None)
    before = forms.IntegerField(required=False, widget=forms.HiddenInput, min_value=1)

    def __init__(self, *args: Any, keys: Any, statuses: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        status_field = self.fields["status"]
        assert isinstance(status_field, forms.ChoiceField)
        status_field.choices = [("", "Any status"), *statuses]
        key_field = self.fields["key"]
        assert isinstance(key_field, forms.ChoiceField)
        key_field.choices = [("", "Any key")] + [
            (k.pk, f"{k.name or 'unnamed'} ({k.display})") for k in keys
        ]


class StatementForm(forms.Form):
    month = forms.DateField(
        label="Month",
        input_formats=["%Y-%m"],
        widget=forms.DateInput({"type": "month"}, format="%Y-%m"),
    )
    format = forms.ChoiceField(choices=[("csv", "CSV"), ("pdf", "PDF")])


class PlaygroundForm(_ChoosesProject):
    project = forms.ModelChoiceField(label="Project", queryset=Project.objects.none())
