"""Staff views: prices (a change is a new row), collections, projects' stored files and storage
charges (read only)."""

from django.contrib import admin

from infra.admin_widgets import NamedWidgets
from vectors.models import Collection, FileStorage, StorageCharge, VectorPrice


@admin.register(VectorPrice)
class VectorPriceAdmin(NamedWidgets, admin.ModelAdmin):
    list_display = ("effective_from", "per_gb_day_nanos", "per_query_nanos", "source")


@admin.register(Collection)
class CollectionAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "engine", "dimensions", "vector_count", "size_bytes")
    readonly_fields = [f.name for f in Collection._meta.fields]


@admin.register(StorageCharge)
class StorageChargeAdmin(admin.ModelAdmin):
    list_display = ("request_id", "project", "amount_nanos", "charged_nanos", "period_end")
    readonly_fields = [f.name for f in StorageCharge._meta.fields]


@admin.register(FileStorage)
class FileStorageAdmin(admin.ModelAdmin):
    list_display = ("project", "file_count", "size_bytes", "storage_charged_nanos", "metered_at")
    readonly_fields = [f.name for f in FileStorage._meta.fields]
