"""Dashboard URLs. Organization pages live under ``/o/<slug>/``; one of them, the admin-keys
page, is :mod:`management.pages`, served in this namespace by :mod:`config.urls`."""

from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path, reverse_lazy
from django.views.generic import RedirectView

from dashboard.views import (
    auth,
    keys,
    orgs,
    playground,
    projects,
    security,
    start,
    status,
    usage,
    wallet,
)
from dashboard.views.audit import audit_log
from dashboard.views.vectors import vector_collections

app_name = "dashboard"

org_patterns = [
    path("", orgs.overview, name="overview"),
    path("start/", start.getting_started, name="getting_started"),
    path("api/", start.api_reference, name="api_reference"),
    path("members/", orgs.members, name="members"),
    path("members/invite/", orgs.member_invite, name="member_invite"),
    path("members/<int:membership_id>/role/", orgs.member_role, name="member_role"),
    path("members/<int:membership_id>/remove/", orgs.member_remove, name="member_remove"),
    path(
        "invitations/<int:invitation_id>/revoke/",
        orgs.invitation_cancel,
        name="invitation_revoke",
    ),
    path("projects/", projects.project_list, name="projects"),
    path("projects/new/", projects.project_create_view, name="project_create"),
    path("projects/<int:project_id>/", projects.project_edit, name="project_edit"),
    path(
        "projects/<int:project_id>/archive/",
        projects.project_archive_toggle,
        name="project_archive",
    ),
    path("keys/", keys.key_list, name="keys"),
    path("keys/new/", keys.key_create, name="key_create"),
    path("keys/<int:key_id>/", keys.key_edit, name="key_edit"),
    path("keys/<int:key_id>/created/", keys.key_created, name="key_created"),
    path("keys/<int:key_id>/revoke/", keys.key_revoke, name="key_revoke"),
    path("wallet/", wallet.wallet, name="wallet"),
    path("wallet/topup/", wallet.topup, name="topup"),
    path("wallet/auto-recharge/", wallet.auto_recharge, name="auto_recharge"),
    path("wallet/statement/", wallet.statement, name="statement"),
    path("wallet/low-balance/", wallet.low_balance, name="low_balance"),
    path("wallet/receipts/<int:entry_id>/", wallet.receipt, name="receipt"),
    path("audit/", audit_log, name="audit_log"),
    path("wallet/card/", wallet.card, name="card"),
    path("wallet/card/replace/", wallet.card_replace, name="card_replace"),
    path("wallet/card/remove/", wallet.card_remove, name="card_remove"),
    path("usage/", usage.usage, name="usage"),
    path("usage/export.csv", usage.usage_export, name="usage_export"),
    path("usage/requests/", usage.request_log, name="request_log"),
    path("usage/requests/export.csv", usage.request_log_export, name="request_log_export"),
    path("usage/requests/<str:request_id>/", usage.request_detail, name="request_detail"),
    path("playground/", playground.playground, name="playground"),
    path("status/", status.model_status, name="model_status"),
    path("vectors/", vector_collections, name="vectors"),
]

urlpatterns: list[URLPattern | URLResolver] = [
    path("", auth.home, name="home"),
    path("favicon.ico", RedirectView.as_view(url=static("dashboard/favicon.svg"), permanent=True)),
    path("signup/", auth.signup, name="signup"),
    path("verify/", auth.verify_pending, name="verify_pending"),
    path("verify/resend/", auth.verify_resend, name="verify_resend"),
    path("verify/<str:token>/", auth.verify_email, name="verify_email"),
    path("orgs/new/", orgs.org_create, name="org_create"),
    path("orgs/switch/", orgs.org_switch, name="org_switch"),
    path("invite/<str:token>/", orgs.invitation_accept_view, name="invitation_accept"),
    path("o/<slug:slug>/", include(org_patterns)),
]

# Django's own auth views with our templates (success URLs point into this namespace).
urlpatterns += [
    path("login/", security.TwoStepLoginView.as_view(), name="login"),
    path("login/code/", security.login_code, name="login_code"),
    path("account/security/", security.security, name="security"),
    path("account/security/setup/", security.setup, name="security_setup"),
    path("account/security/setup/start/", security.setup_start, name="security_setup_start"),
    path("account/security/recovery-codes/", security.recovery_codes, name="security_recovery"),
    path(
        "account/security/recovery-codes/new/",
        security.recovery_regenerate,
        name="security_recovery_new",
    ),
    path("account/security/disable/", security.disable, name="security_disable"),
    path("logout/", auth_views.LogoutView.as_view(next_page="/"), name="logout"),
    path(
        "password-reset/",
        auth_views.PasswordResetView.as_view(
            success_url=reverse_lazy("dashboard:password_reset_done"),
            email_template_name="registration/password_reset_email.txt",
        ),
        name="password_reset",
    ),
    path(
        "password-reset/sent/",
        auth_views.PasswordResetDoneView.as_view(),
        name="password_reset_done",
    ),
    path(
        "password-reset/<uidb64>/<token>/",
        auth_views.PasswordResetConfirmView.as_view(
            success_url=reverse_lazy("dashboard:password_reset_complete")
        ),
        name="password_reset_confirm",
    ),
    path(
        "password-reset/done/",
        auth_views.PasswordResetCompleteView.as_view(),
        name="password_reset_complete",
    ),
]
