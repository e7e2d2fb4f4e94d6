"""Staff views of users, organizations, memberships, projects and keys (prefix + last four)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.db.models import Model, QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html_join

from accounts.audit import (
    AuditAction,
    AuditEvent,
    Via,
    audit_record,
    diff,
    key_snapshot,
)
from accounts.models import ApiKey, Membership, Organization, Project, Role, User
from accounts.policy import Actor
from accounts.services import api_key_audit_change, api_key_cache_forget, api_key_revoke
from infra.admin_widgets import NamedWidgets


def _staff(request: HttpRequest) -> Actor:
    """The staff member acting in the admin, as the audit log records them."""
    user = request.user if isinstance(request.user, User) else None
    return Actor(user=user, role=Role.OWNER, via=Via.ADMIN)


@admin.register(User)
class UserAdmin(NamedWidgets, DjangoUserAdmin):
    ordering = ("email",)
    # A plain multiple select: the two-pane widget's script adds a tooltip span whose
    # aria-label its role does not allow (axe-core: serious).
    filter_horizontal = ()
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


class MembershipInline(NamedWidgets, admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(Organization)
class OrganizationAdmin(NamedWidgets, admin.ModelAdmin):
    list_display = ("slug", "name", "log_prompts", "response_retention_days", "created_at")
    search_fields = ("slug", "name", "memberships__user__email")
    list_filter = ("log_prompts",)
    readonly_fields = ("related",)
    inlines = [MembershipInline]

    def save_formset(
        self, request: HttpRequest, form: forms.ModelForm[Any], formset: Any, change: bool
    ) -> None:
        """Memberships edited here are audited like the dashboard's (same transaction)."""
        if formset.model is Membership:
            _audit_memberships(request, formset)
        super().save_formset(request, form, formset, change)

    @admin.display(description="see also")
    def related(self, obj: Organization) -> str:
        """Links to the organization's wallet, ledger, keys, calls and members (staff
        support)."""
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
        calls = reverse("admin:inference_requestlog_changelist")
        links.append((f"{calls}?organization={obj.pk}", "Calls (request log)"))
        links.append(("#memberships-group", "Members"))
        return format_html_join(" · ", '<a href="{}">{}</a>', links)


def _audit_memberships(request: HttpRequest, formset: BaseInlineFormSet[Any, Any, Any]) -> None:
    for inline in formset.forms:
        member: Membership = inline.instance
        if inline in formset.deleted_forms and member.pk is not None:
            changes: dict[str, Any] = {"role": member.role}
            action = AuditAction.MEMBER_REMOVE
        elif member.pk is None and inline.has_changed():
            action, changes = AuditAction.MEMBER_ADD, {"role": inline.cleaned_data.get("role")}
        elif member.pk is not None and "role" in inline.changed_data:
            old = inline.initial.get("role")
            action, changes = AuditAction.MEMBER_ROLE, {"role": [old, inline.cleaned_data["role"]]}
        else:
            continue
        user = inline.cleaned_data.get("user") or member.user
        audit_record(
            organization_id=formset.instance.pk,
            action=action,
            actor=_staff(request),
            target=f"member {user.email}",
            changes=changes,
        )


@admin.register(Project)
class ProjectAdmin(NamedWidgets, admin.ModelAdmin):
    list_display = ("name", "organization", "monthly_budget_nanos", "archived_at", "created_at")
    search_fields = ("name", "organization__slug")
    list_filter = ("archived_at",)
    list_select_related = ("organization",)

    def save_model(
        self, request: HttpRequest, obj: Project, form: forms.ModelForm[Any], change: bool
    ) -> None:
        """A name or budget changed here is audited (in the admin's transaction)."""
        fields = ("name", "monthly_budget_nanos")
        before = dict(Project.objects.values(*fields).get(pk=obj.pk)) if change else {}
        super().save_model(request, obj, form, change)
        changes = diff(before, {f: getattr(obj, f) for f in fields})
        if changes:
            audit_record(
                organization_id=obj.organization_id,
                action=AuditAction.PROJECT_UPDATE if change else AuditAction.PROJECT_CREATE,
                actor=_staff(request),
                target=f"project {obj.name}",
                changes=changes,
            )


@admin.register(ApiKey)
class ApiKeyAdmin(NamedWidgets, admin.ModelAdmin):
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

    def save_model(
        self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm[Any], change: bool
    ) -> None:
        """A key edited here (name, expiry, limits, budget) is audited like the dashboard's,
        in the admin's transaction, and its cached ``/v1`` lookup is dropped."""
        before = key_snapshot(ApiKey.objects.get(pk=obj.pk))
        super().save_model(request, obj, form, change)
        api_key_audit_change(api_key=obj, before=before, actor=_staff(request))
        api_key_cache_forget(key_hash=obj.key_hash)

    @admin.action(description="Revoke selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for api_key in queryset:
            api_key_revoke(api_key=api_key, actor=_staff(request))
        self.message_user(request, f"Revoked {queryset.count()} key(s).", messages.SUCCESS)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """The audit log, read-only for staff: nothing is added, changed or deleted here."""

    list_display = ("created_at", "organization", "who", "via", "action", "target")
    list_filter = ("via", "action")
    search_fields = ("organization__slug", "actor_email", "target")
    list_select_related = ("organization",)
    readonly_fields = [f.name for f in AuditEvent._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False
