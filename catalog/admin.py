"""Staff pages for the catalog: vendors (with health and routable offerings), models, offerings,
prices (history: add-only) and the parameter-matrix editor (models × parameters, one form).

Every save here bumps the catalog version so all processes rebuild their routing snapshot.
Values are checked against the known sets on save (:mod:`catalog.forms`); prices are typed in
USD. Rows that got into the database invalid anyway are left out of routing and listed as a
warning on every catalog list page.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.forms import BaseModelFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html_join

from catalog import guardrails, health
from catalog.forms import USD_FIELD_NAMES, ModelForm, ParameterRuleForm, PriceForm, VendorForm
from catalog.models import Model, Offering, Parameter, ParameterRule, Price, Vendor
from catalog.selectors import build_snapshot, credentials_configured, vendor_base_url
from catalog.services import Cell, catalog_changed, matrix_cells, matrix_update, vendor_probe
from catalog.types import CatalogSnapshot, Support
from catalog.validation import cell_problems
from infra.admin_widgets import NamedWidgets
from money.usd import nanos_to_usd_str

# The snapshot one changelist page shows (built once per page, not once per row).
_page_snapshot: ContextVar[CatalogSnapshot | None] = ContextVar("_page_snapshot", default=None)


@contextmanager
def _one_snapshot() -> Iterator[CatalogSnapshot]:
    """Build the catalog snapshot once for the page being rendered inside this block."""
    snapshot = build_snapshot()
    token = _page_snapshot.set(snapshot)
    try:
        yield snapshot
    finally:
        _page_snapshot.reset(token)


def _snapshot() -> CatalogSnapshot:
    """The page's snapshot when one was built for it, else a fresh one (a change form)."""
    return _page_snapshot.get() or build_snapshot()


# The snapshot from before the write being saved (the change form's POST).
_before_write: ContextVar[CatalogSnapshot | None] = ContextVar("_before_write", default=None)

#: The POST field a confirmation of a capability loss carries (:attr:`Impact.token`).
CONFIRM_FIELD = "_confirm_capability_loss"


class CatalogChangeMixin:
    """Bump the catalog version after every admin write; list pages warn about catalog rows
    left out of routing because they are invalid, and build the snapshot once per page.

    Guardrail: a save that would leave a capability with no routable offering
    (:mod:`catalog.guardrails`) is rolled back and answered with a page naming what stops
    working; it is saved only when that page is confirmed (the same POST again, with
    :data:`CONFIRM_FIELD` naming the same losses). Deleting cannot stop routing: whatever
    serves has a price, and prices are history nobody deletes (the delete page refuses).
    """

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: Any = None,
    ) -> HttpResponse:
        if request.method != "POST":
            return super().changeform_view(request, object_id, form_url, extra_context)  # type: ignore[misc, no-any-return]
        token = _before_write.set(build_snapshot())
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)  # type: ignore[misc, no-any-return]
        finally:
            _before_write.reset(token)

    def response_add(
        self, request: HttpRequest, obj: Any, post_url_continue: str | None = None
    ) -> HttpResponse:
        held = self._unless_confirmed(request, obj, adding=True)
        return held or super().response_add(request, obj, post_url_continue)  # type: ignore[misc, no-any-return]

    def response_change(self, request: HttpRequest, obj: Any) -> HttpResponse:
        held = self._unless_confirmed(request, obj, adding=False)
        return held or super().response_change(request, obj)  # type: ignore[misc, no-any-return]

    def _unless_confirmed(
        self, request: HttpRequest, obj: Any, *, adding: bool
    ) -> HttpResponse | None:
        """Called after the save, inside the admin's transaction: ``None`` to keep it, else
        the transaction is marked for rollback and the confirmation page is returned."""
        before = _before_write.get()
        if before is None:
            return None
        impact = guardrails.impact_of(before, build_snapshot(), at=timezone.now())
        if impact.harmless or request.POST.get(CONFIRM_FIELD) == impact.token:
            return None
        transaction.set_rollback(True)  # nothing of this save is kept: rows, history, bump
        opts = self.model._meta  # type: ignore[attr-defined]
        context = {
            **self.admin_site.each_context(request),  # type: ignore[attr-defined]
            "title": "Confirm: this change stops routing",
            "opts": opts,
            "original": None if adding else obj,
            "impact": impact,
            "confirm_field": CONFIRM_FIELD,
            "hidden": [
                (name, value)
                for name, values in request.POST.lists()
                if name not in ("csrfmiddlewaretoken", CONFIRM_FIELD)
                for value in values
            ],
            "cancel_url": request.get_full_path(),
        }
        return TemplateResponse(request, "admin/catalog/confirm_capability_loss.html", context)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        with _one_snapshot() as snapshot:
            for problem in snapshot.problems:
                messages.warning(request, f"Invalid catalog row: {problem}")
            response = super().changelist_view(request, extra_context)  # type: ignore[misc]
            if hasattr(response, "render"):
                response.render()  # inside the block: the rows read the page's snapshot
            return response

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)  # type: ignore[misc]
        catalog_changed()

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        super().delete_model(request, obj)  # type: ignore[misc]
        catalog_changed()

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        super().delete_queryset(request, queryset)  # type: ignore[misc]
        catalog_changed()

    def save_related(
        self, request: HttpRequest, form: Any, formsets: list[BaseModelFormSet], change: bool
    ) -> None:
        super().save_related(request, form, formsets, change)  # type: ignore[misc]
        catalog_changed()


def _in_usd(column: str, description: str) -> Callable[[Any, Any], str]:
    """An admin column showing the nano-USD field ``column`` as exact USD, sorted by it."""

    @admin.display(description=description, ordering=column)
    def show(self: Any, obj: Any) -> str:
        nanos = getattr(obj, column)
        return "default" if nanos is None else nanos_to_usd_str(nanos)

    return show


class OfferingInline(NamedWidgets, admin.TabularInline):
    """The offerings of a vendor or model page. The vendor and model selects list their
    choices from one query each per page, not one per offering row."""

    model = Offering
    extra = 0
    fields = ("vendor", "model", "upstream_model", "priority", "enabled", "batch_discount_percent")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Offering]:
        return super().get_queryset(request).select_related("vendor", "model")  # row titles

    def formfield_for_foreignkey(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> forms.ModelChoiceField[Any] | None:
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if isinstance(field, forms.ModelChoiceField):
            # Evaluated once here; every row's copy of the field reuses the list.
            field.choices = list(field.iterator(field))
        return field


class ParameterRuleInline(NamedWidgets, admin.TabularInline):
    model = ParameterRule
    form = ParameterRuleForm
    extra = 0
    fields = ("parameter", "support", "accepted_values", "max_value", "note")


class PriceInUsd:
    """An existing price row shown read-only in USD: these name the USD fields of
    :class:`~catalog.forms.PriceForm`, which a read-only page looks up on its admin."""

    input_per_mtok_usd = _in_usd("input_per_mtok_nanos", "input $/1M tok")
    cached_input_per_mtok_usd = _in_usd("cached_input_per_mtok_nanos", "cached input $/1M tok")
    cache_write_5m_per_mtok_usd = _in_usd(
        "cache_write_5m_per_mtok_nanos", "cache write 5m $/1M tok"
    )
    cache_write_1h_per_mtok_usd = _in_usd(
        "cache_write_1h_per_mtok_nanos", "cache write 1h $/1M tok"
    )
    output_per_mtok_usd = _in_usd("output_per_mtok_nanos", "output $/1M tok")
    reasoning_per_mtok_usd = _in_usd("reasoning_per_mtok_nanos", "reasoning $/1M tok")
    per_mchar_usd = _in_usd("per_mchar_nanos", "speech $/1M chars")
    per_audio_second_usd = _in_usd("per_audio_second_nanos", "audio $/s")

    @admin.display(description="images $ each")
    def per_image_usd(self, obj: Price) -> str:
        return json.dumps(obj.per_image_usd())


class PriceInline(NamedWidgets, PriceInUsd, admin.TabularInline):
    """Existing prices are history (read-only); a price change is a new row."""

    model = Price
    form = PriceForm
    extra = 0
    fields = ("effective_from", *USD_FIELD_NAMES, "source")
    ordering = ("-effective_from",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ()  # existing rows render read-only through the formset (no change permission)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Vendor)
class VendorAdmin(CatalogChangeMixin, NamedWidgets, admin.ModelAdmin):
    form = VendorForm
    list_display = (
        "name",
        "adapter_kind",
        "region",
        "enabled",
        "vendor_rules",
        "credentials",
        "circuit",
        "verified_at",
        "routable_offerings",
    )
    list_filter = ("adapter_kind", "enabled", "region")
    search_fields = ("name", "display_name")
    readonly_fields = (
        "effective_base_url",
        "vendor_rules",
        "credentials",
        "circuit",
        "verified_models",
        "verified_at",
        "last_probe_error",
        "routable_offerings",
    )
    actions = ("probe_now", "reset_circuit")
    inlines = (OfferingInline,)

    @admin.display(description="parameter rules")
    def vendor_rules(self, obj: Vendor) -> str:
        """The vendor's refusals and ignored parameters, one phrase each (``-``: none)."""
        rules = obj.parameter_rules if isinstance(obj.parameter_rules, dict) else {}
        phrases = []
        for parameter, cell in sorted(rules.items()):
            support = cell.get("support", "?") if isinstance(cell, dict) else "?"
            accepted = cell.get("accepted_values") if isinstance(cell, dict) else None
            only = f" (only {', '.join(map(json.dumps, accepted))})" if accepted else ""
            phrases.append(f"{parameter}: {support}{only}")
        return "; ".join(phrases) or "-"

    @admin.display(description="credentials")
    def credentials(self, obj: Vendor) -> str:
        if not obj.credentials_env:
            return "none needed"
        state = "configured" if credentials_configured(obj.credentials_env) else "NOT configured"
        return f"{obj.credentials_env}: {state}"

    @admin.display(description="circuit / latency")
    def circuit(self, obj: Vendor) -> str:
        found = health.health_of([obj.name])[obj.name]
        latency = f"{found.latency_ms} ms" if found.latency_ms is not None else "no data"
        return f"{found.state.value}, {latency}, {found.consecutive_failures} recent failures"

    @admin.display(description="base URL in use")
    def effective_base_url(self, obj: Vendor) -> str:
        return vendor_base_url(obj)

    @admin.display(description="routable offerings")
    def routable_offerings(self, obj: Vendor) -> str:
        snapshot = _snapshot()
        offerings = [o for o in snapshot.offerings if o.vendor == obj.name]
        if not offerings:
            return "-"
        return format_html_join(
            "",
            "<div>{}: {}</div>",
            (
                (o.model_id, "routable" if o.routable else f"not routable — {o.unroutable_detail}")
                for o in offerings
            ),
        )

    @admin.action(description="Probe /models now")
    def probe_now(self, request: HttpRequest, queryset: QuerySet[Vendor]) -> None:
        for vendor in queryset:
            found = vendor_probe(vendor=vendor)
            level = messages.ERROR if found.error else messages.SUCCESS
            text = found.error or f"{len(found.models or ())} models listed"
            self.message_user(request, f"{vendor.name}: {text}", level)

    @admin.action(description="Reset circuit breaker")
    def reset_circuit(self, request: HttpRequest, queryset: QuerySet[Vendor]) -> None:
        for vendor in queryset:
            health.reset(vendor.name)
        self.message_user(request, "Circuits reset.", messages.SUCCESS)


@admin.register(Model)
class ModelAdmin(CatalogChangeMixin, NamedWidgets, admin.ModelAdmin):
    form = ModelForm
    list_display = ("model_id", "owned_by", "quality_tier", "capability_list", "context_window")
    search_fields = ("model_id", "display_name", "owned_by")
    list_filter = ("owned_by", "quality_tier")
    inlines = (ParameterRuleInline, OfferingInline)
    change_list_template = "admin/catalog/model/change_list.html"

    @admin.display(description="capabilities")
    def capability_list(self, obj: Model) -> str:
        return ", ".join(obj.capabilities or ())

    def get_urls(self) -> list[URLPattern]:
        matrix = path(
            "matrix/",
            self.admin_site.admin_view(self.matrix_view),
            name="catalog_model_matrix",
        )
        return [matrix, *super().get_urls()]

    def matrix_view(self, request: HttpRequest) -> HttpResponse:
        """The parameter matrix: chat models as rows, parameters as columns, saved at once.

        A POST with a bad cell saves nothing and shows the form again as it was posted: every
        edit kept, each bad cell marked with its error."""
        if not request.user.has_perm("catalog.change_parameterrule"):
            raise PermissionDenied
        models = [
            m
            for m in Model.objects.order_by("model_id")
            if {"chat", "responses"} & set(m.capabilities or ())
        ]
        shown: dict[tuple[str, str], tuple[str, str]] = {
            key: (cell.support.value, _accepted_text(cell)) for key, cell in matrix_cells().items()
        }
        errors: dict[tuple[str, str], list[str]] = {}
        if request.method == "POST":
            cells, errors = _cells_from_post(request.POST, models)
            if errors:
                shown.update(_posted_cells(request.POST, models))
                count = sum(len(v) for v in errors.values())
                messages.error(
                    request, f"Nothing saved: {count} cell(s) need fixing (marked below)."
                )
            else:
                changes = matrix_update(user=request.user, cells=cells)  # type: ignore[arg-type]
                count = sum(len(v) for v in changes.values())
                messages.success(request, f"Matrix saved: {count} cell(s) changed.")
                return HttpResponseRedirect(reverse("admin:catalog_model_matrix"))
        honoured = (Support.HONOURED.value, "")
        rows = [
            {
                "model": m,
                "cells": [
                    _cell_context(
                        m,
                        p,
                        *shown.get((m.model_id, p), honoured),
                        errors.get((m.model_id, p), []),
                    )
                    for p in Parameter.values
                ],
            }
            for m in models
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "Parameter matrix",
            "opts": self.model._meta,
            "parameters": Parameter.values,
            "supports": Support.choices,
            "rows": rows,
            "error_count": sum(len(v) for v in errors.values()),
        }
        return TemplateResponse(request, "admin/catalog/matrix.html", context)


def _accepted_text(cell: Cell) -> str:
    return json.dumps(list(cell.accepted_values)) if cell.accepted_values else ""


def _cell_context(
    model: Model, parameter: str, support: str, accepted: str, errors: list[str]
) -> dict[str, Any]:
    """One matrix cell as the template shows it (``support`` / ``accepted`` as posted or
    stored; ``errors``: why the posted cell was refused)."""
    return {
        "id": f"cell-{model.pk}-{parameter}",
        "name": f"cell-{model.pk}-{parameter}",
        "accepted_name": f"accepted-{model.pk}-{parameter}",
        "parameter": parameter,
        "support": support,
        "accepted": accepted,
        "errors": errors,
    }


def _posted_cells(data: Any, models: list[Model]) -> dict[tuple[str, str], tuple[str, str]]:
    """Every cell of the POST as typed (support, accepted text), to show the form again."""
    posted: dict[tuple[str, str], tuple[str, str]] = {}
    for model in models:
        for parameter in Parameter.values:
            support = data.get(f"cell-{model.pk}-{parameter}")
            if support is not None:
                accepted = data.get(f"accepted-{model.pk}-{parameter}") or ""
                posted[(model.model_id, parameter)] = (support, accepted)
    return posted


def _cells_from_post(
    data: Any, models: list[Model]
) -> tuple[dict[tuple[str, str], Cell], dict[tuple[str, str], list[str]]]:
    """The posted cells keyed ``(model_id, parameter)``, and the problems of the bad ones
    under the same keys (a cell absent from the POST is left as it is)."""
    cells: dict[tuple[str, str], Cell] = {}
    errors: dict[tuple[str, str], list[str]] = {}
    for model in models:
        for parameter in Parameter.values:
            key = (model.model_id, parameter)
            support = data.get(f"cell-{model.pk}-{parameter}")
            if support is None:
                continue
            raw = (data.get(f"accepted-{model.pk}-{parameter}") or "").strip()
            try:
                accepted = json.loads(raw) if raw else []
            except ValueError:
                accepted = None
            problems = cell_problems(
                parameter=parameter, support=support, accepted_values=accepted, max_value=None
            )
            if problems or not isinstance(accepted, list):
                errors[key] = problems
                continue
            cells[key] = Cell(Support(support), tuple(accepted))
    return cells, errors


@admin.register(Offering)
class OfferingAdmin(CatalogChangeMixin, NamedWidgets, admin.ModelAdmin):
    list_display = (
        "__str__",
        "upstream_model",
        "priority",
        "enabled",
        "batch_discount_percent",
        "routable",
    )
    list_select_related = ("vendor", "model")  # __str__ names both
    list_filter = ("vendor", "enabled")
    search_fields = ("model__model_id", "upstream_model", "vendor__name")
    inlines = (PriceInline,)

    @admin.display(description="routable now")
    def routable(self, obj: Offering) -> str:
        for offering in _snapshot().offerings:
            if offering.offering_id == obj.pk:
                return "yes" if offering.routable else f"no — {offering.unroutable_detail}"
        return "-"


@admin.register(Price)
class PriceAdmin(CatalogChangeMixin, NamedWidgets, PriceInUsd, admin.ModelAdmin):
    """Add-only: a price change is a new row, so the price of any past call can be found."""

    form = PriceForm
    list_display = ("offering", "effective_from", "input_usd", "output_usd", "source")
    list_select_related = ("offering__vendor", "offering__model")
    list_filter = ("offering__vendor",)
    search_fields = ("offering__model__model_id", "source")
    date_hierarchy = "effective_from"

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    input_usd = _in_usd("input_per_mtok_nanos", "input $/1M tokens")
    output_usd = _in_usd("output_per_mtok_nanos", "output $/1M tokens")
