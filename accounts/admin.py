"""Staff views of users, organizations, memberships, projects and keys (prefix + last four)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html_join

from accounts.models import ApiKey, Membership, Organization, Project, User
from accounts.services import api_key_revoke


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    ordering = ("email",)
    list_display = ("email", "name", "is_staff", "is_active", "email_verified", "date_joined")
    list_filter = ("is_staff", "is_active", "email_verified")
    search_fields = ("email", "name")
    fieldsets = (
        (None, {"fields": ("email", "password")}),
        ("Profile", {"fields": ("name", "email_verified")}),
        ("Permissions", {"fields": ("is_active", "is_staff", "is_superuser", "groups")}),
        ("Dates", {"fields": ("last_login", "date_joined")}),
    )
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("email", "password1", "password2")}),)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "log_prompts", "created_at")
    search_fields = ("slug", "name", "memberships__user__email")
    list_filter = ("log_prompts",)
    readonly_fields = ("related",)
    inlines = [MembershipInline]

    @admin.display(description="see also")
    def related(self, obj: Organization) -> str:
        """Links to the organization's wallet, ledger, keys and members (staff support)."""
        if obj.pk is None:
            return "-"
        # The wallet through its one-to-one relation (billing's admin pages are what we link
        # to; accounts imports nothing of billing).
        wallet = getattr(obj, "wallet", None)
        wallet_id = wallet.pk if wallet is not None else None
        links = []
        if wallet_id is not None:
            links.append((reverse("admin:billing_wallet_change", args=[wallet_id]), "Wallet"))
            ledger = reverse("admin:billing_ledgerentry_changelist")
            links.append((f"{ledger}?wallet__id__exact={wallet_id}", "Ledger"))
        keys = reverse("admin:accounts_apikey_changelist")
        links.append((f"{keys}?organization__id__exact={obj.pk}", "API keys"))
        links.append(("#memberships-group", "Members"))
        return format_html_join(" · ", '<a href="{}">{}</a>', links)


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "organization", "monthly_budget_nanos", "archived_at", "created_at")
    search_fields = ("name", "organization__slug")
    list_filter = ("archived_at",)
    list_select_related = ("organization",)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = (
        "display",
        "name",
        "organization",
        "project",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
    )
    list_filter = ("revoked_at", "expires_at")
    search_fields = ("name", "prefix", "last_four", "organization__slug", "project__name")
    list_select_related = ("organization", "project")
    # The hash is never shown; keys are created through the dashboard or issue_key.
    exclude = ("key_hash",)
    readonly_fields = ("prefix", "last_four", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for api_key in queryset:
            api_key_revoke(api_key=api_key)
        self.message_user(request, f"Revoked {queryset.count()} key(s).", messages.SUCCESS)
