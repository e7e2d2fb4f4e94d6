"""The admin's forms for catalog rows: values checked against the known sets on save
(:mod:`catalog.validation`), prices typed in USD and stored as integer nano-USD."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms

from catalog import validation
from catalog.models import (
    MODEL_FIELDS,
    USD_PRICES,
    VENDOR_FIELDS,
    Capability,
    Model,
    ParameterRule,
    Price,
    Vendor,
)
from money.usd import nanos_to_usd_str, usd_to_nanos


def _known_tasks() -> frozenset[str]:
    """The task tags the admin offers: :data:`~catalog.validation.KNOWN_TASKS` and every tag
    the catalog already uses (so editing a model never drops a tag a document brought)."""
    in_use = {
        t
        for tasks in Model.objects.values_list("tasks", flat=True)
        if isinstance(tasks, list)
        for t in tasks
        if isinstance(t, str)
    }
    return validation.KNOWN_TASKS | in_use


class ModelForm(forms.ModelForm):
    """A model row: capabilities and tasks are picked from the known sets (never typed)."""

    capabilities = forms.MultipleChoiceField(
        choices=Capability.choices, widget=forms.CheckboxSelectMultiple, required=False
    )
    tasks = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False)

    class Meta:
        model = Model
        fields = ("model_id", *MODEL_FIELDS, "created_at")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.known_tasks = _known_tasks()
        tasks = self.fields["tasks"]
        assert isinstance(tasks, forms.MultipleChoiceField)
        tasks.choices = [(t, t) for t in sorted(self.known_tasks)]

    def clean_capabilities(self) -> list[str]:
        value = list(self.cleaned_data.get("capabilities") or [])
        problems = validation.capabilities_problems(value)
        if problems:
            raise forms.ValidationError(problems)
        return value

    def clean_tasks(self) -> list[str]:
        value = list(self.cleaned_data.get("tasks") or [])
        problems = validation.tasks_problems(value, known=self.known_tasks)
        if problems:
            raise forms.ValidationError(problems)
        return value


class VendorForm(forms.ModelForm):
    """A vendor row; its ``parameter_rules`` are JSON checked like a catalog document's
    (:func:`catalog.validation.vendor_rules_problems`: a known parameter, support ``fails`` or
    ``no_effect``, and the vendor's documentation URL as ``source`` for every cell)."""

    class Meta:
        model = Vendor
        fields = ("name", *VENDOR_FIELDS)
        help_texts = {
            "parameter_rules": (
                'What this vendor refuses or ignores whatever the model, e.g. {"logit_bias": '
                '{"support": "fails", "source": "https://…"}, "n": {"support": "fails", '
                '"accepted_values": [1], "source": "https://…"}}. Refused: its offerings are '
                "not used for a request that sets it; ignored: reported in ignored_params."
            ),
        }

    def clean_parameter_rules(self) -> dict[str, Any]:
        value = self.cleaned_data.get("parameter_rules")
        if value in (None, ""):
            return {}
        problems = validation.vendor_rules_problems(value)
        if problems:
            raise forms.ValidationError(problems)
        assert isinstance(value, dict)
        return value


class ParameterRuleForm(forms.ModelForm):
    """One matrix cell; the parameter and support come from their choices, the accepted
    values must be a JSON list of plain values."""

    class Meta:
        model = ParameterRule
        fields = ("parameter", "support", "accepted_values", "max_value", "note")
        # One line each: a table row of the model page, which must fit 1280 px.
        widgets = {
            "accepted_values": forms.TextInput(attrs={"size": 14}),
            "max_value": forms.NumberInput(attrs={"style": "width: 8em"}),
            "note": forms.TextInput(attrs={"size": 24}),
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "parameter" in data and "support" in data:
            problems = validation.cell_problems(
                parameter=data["parameter"],
                support=data["support"],
                accepted_values=data.get("accepted_values") or [],
                max_value=data.get("max_value"),
            )
            if problems:
                raise forms.ValidationError(problems)
        return data


USD_FIELD_NAMES = (*(p.name for p in USD_PRICES), "per_image_usd")
_USD = {p.name: p for p in USD_PRICES}


def _usd_field(name: str) -> forms.DecimalField:
    """The form field of the flat price ``name`` (:data:`~catalog.models.USD_PRICES`); an
    optional price may be left empty (the catalog's default applies)."""
    optional = _USD[name].optional
    return forms.DecimalField(
        label=_USD[name].label,
        min_value=Decimal(0),
        max_digits=18,
        decimal_places=9,
        required=not optional,
        initial=None if optional else Decimal(0),
    )


class PriceForm(forms.ModelForm):
    """A new price row, typed in USD (up to nine decimals: exact in nano-USD)."""

    input_per_mtok_usd = _usd_field("input_per_mtok_usd")
    cached_input_per_mtok_usd = _usd_field("cached_input_per_mtok_usd")
    cache_write_5m_per_mtok_usd = _usd_field("cache_write_5m_per_mtok_usd")
    cache_write_1h_per_mtok_usd = _usd_field("cache_write_1h_per_mtok_usd")
    output_per_mtok_usd = _usd_field("output_per_mtok_usd")
    reasoning_per_mtok_usd = _usd_field("reasoning_per_mtok_usd")
    per_mchar_usd = _usd_field("per_mchar_usd")
    per_audio_second_usd = _usd_field("per_audio_second_usd")
    per_image_usd = forms.JSONField(
        label="Images, USD each",
        required=False,
        initial=dict,
        help_text='{"1024x1024/standard": "0.04", "*": "0.08"} — "*" is any other size/quality.',
    )

    class Meta:
        model = Price
        fields = ("offering", "effective_from", "source")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            for p in USD_PRICES:
                nanos = getattr(self.instance, p.column)
                self.initial[p.name] = None if nanos is None else nanos_to_usd_str(nanos)
            self.initial["per_image_usd"] = self.instance.per_image_usd()

    def clean_per_image_usd(self) -> dict[str, int]:
        """``{"<size>/<quality>": "0.04"}`` → nano-USD per image."""
        value = self.cleaned_data.get("per_image_usd") or {}
        if not isinstance(value, dict):
            raise forms.ValidationError('Write a mapping like {"1024x1024/standard": "0.04"}.')
        out: dict[str, int] = {}
        for key, amount in value.items():
            try:
                nanos = usd_to_nanos(Decimal(str(amount)))
            except (ValueError, ArithmeticError):
                raise forms.ValidationError(f"{key}: {amount!r} is not an amount in USD") from None
            if nanos < 0:
                raise forms.ValidationError(f"{key}: a price cannot be negative")
            out[str(key)] = nanos
        return out

    def save(self, commit: bool = True) -> Price:
        price: Price = super().save(commit=False)
        for p in USD_PRICES:
            usd = self.cleaned_data.get(p.name)
            setattr(price, p.column, None if usd is None else usd_to_nanos(usd))
        price.per_image_nanos = self.cleaned_data.get("per_image_usd") or {}
        if commit:
            price.save()
        return price
