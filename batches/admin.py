"""The Batch API in the admin: batches read-only (their money moves only through billing)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from batches.models import Batch


@admin.register(Batch)
class BatchAdmin(admin.ModelAdmin):
    list_display = (
        "public_id",
        "organization",
        "endpoint",
        "status",
        "total",
        "completed",
        "failed",
        "created_at",
    )
    list_filter = ("status", "endpoint")
    search_fields = ("public_id", "input_file_id")
    readonly_fields = tuple(f.name for f in Batch._meta.fields)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
