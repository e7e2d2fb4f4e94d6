"""Staff view of the request log: read-only, filtered by organization, status, model, vendor
and date, searched by request id. Prompts are never shown here (a row holds one only when its
organization opted in; support does not need it to follow a call), and a row holds no secret:
keys are named by id, linked to their admin page (prefix and last four only)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from accounts.models import Organization
from catalog.models import Model, Vendor
from inference.models import RequestLog
from money.usd import nanos_to_usd_str


class OrganizationFilter(admin.SimpleListFilter):
    """``?organization=<id>``: the calls of one organization (what its admin page links)."""

    title = "organization"
    parameter_name = "organization"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        rows = Organization.objects.order_by("name").values_list("pk", "name", "slug")
        return [(str(pk), f"{name} ({slug})") for pk, name, slug in rows]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value and value.isdigit():
            return queryset.filter(organization_id=int(value))
        return queryset


class _CatalogNameFilter(admin.SimpleListFilter):
    """Choices from the catalog's names (a small table), not ``DISTINCT`` over the log."""

    field = ""

    def names(self) -> list[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in self.names()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value else queryset


class ModelFilter(_CatalogNameFilter):
    title = "model"
    parameter_name = "model"
    field = "model"

    def names(self) -> list[str]:
        return list(Model.objects.order_by("model_id").values_list("model_id", flat=True))


class VendorFilter(_CatalogNameFilter):
    title = "vendor"
    parameter_name = "vendor"
    field = "vendor"

    def names(self) -> list[str]:
        return list(Vendor.objects.order_by("name").values_list("name", flat=True))


@admin.register(RequestLog)
class RequestLogAdmin(admin.ModelAdmin):
    """Every ``/v1`` call, newest first; nothing here can be added, changed or deleted."""

    list_display = (
        "created_at",
        "request_id",
        "organization",
        "endpoint",
        "model",
        "vendor",
        "status",
        "http_status",
        "cost_usd",
        "latency_ms",
    )
    list_display_links = ("request_id",)
    list_filter = (
        OrganizationFilter,
        "status",
        ModelFilter,
        VendorFilter,
        ("created_at", admin.DateFieldListFilter),
    )
    search_fields = ("=request_id",)  # the exact id (the response's x-request-id)
    ordering = ("-id",)  # the primary key's index: rows are written in time order
    show_full_result_count = False
    fields = (
        "request_id",
        "created_at",
        "organization",
        "project_id",
        "api_key",
        "endpoint",
        "requested_model",
        "model",
        "vendor",
        "region",
        "status",
        "http_status",
        "error_code",
        "error_message",
        "input_tokens",
        "cached_input_tokens",
        "cache_write_tokens",
        "output_tokens",
        "reasoning_tokens",
        "usage_estimated",
        "usage_source",
        "cost_usd",
        "latency_ms",
        "ttft_ms",
        "stream",
        "cache_hit",
        "failovers",
        "routing_shown",
        "ignored_params",
    )  # never "prompt"
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[RequestLog]:
        names = Organization.objects.filter(pk=OuterRef("organization_id"))
        return (
            super()
            .get_queryset(request)
            .defer("prompt")
            .annotate(
                organization_name=Subquery(names.values("name")[:1]),
                organization_slug=Subquery(names.values("slug")[:1]),
            )
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="organization", ordering="organization_name")
    def organization(self, obj: Any) -> str:
        name = getattr(obj, "organization_name", None)
        if name is None:
            return f"#{obj.organization_id} (deleted)"
        return format_html(
            '<a href="{}">{}</a> ({})',
            reverse("admin:accounts_organization_change", args=[obj.organization_id]),
            name,
            obj.organization_slug,
        )

    @admin.display(description="API key")
    def api_key(self, obj: RequestLog) -> str:
        if obj.api_key_id is None:
            return "-"
        url = reverse("admin:accounts_apikey_change", args=[obj.api_key_id])
        return format_html('<a href="{}">key #{}</a>', url, obj.api_key_id)

    @admin.display(description="cost (USD)", ordering="cost_nanos")
    def cost_usd(self, obj: RequestLog) -> str:
        return nanos_to_usd_str(obj.cost_nanos)

    @admin.display(description="routing")
    def routing_shown(self, obj: RequestLog) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.routing, indent=2, sort_keys=True))
