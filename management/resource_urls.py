"""The management API's resources (the OpenAPI document is generated from these)."""

from __future__ import annotations

from django.urls import path

from management.views import admin_keys, catalog, members, projects, usage, wallet

urlpatterns = [
    path("projects", projects.ProjectList.as_view()),
    path("projects/<str:project_id>", projects.ProjectDetail.as_view()),
    path("projects/<str:project_id>/archive", projects.ProjectArchive.as_view()),
    path("projects/<str:project_id>/api_keys", projects.ApiKeyList.as_view()),
    path("projects/<str:project_id>/api_keys/<str:key_id>", projects.ApiKeyDetail.as_view()),
    path("users", members.UserList.as_view()),
    path("users/<str:user_id>", members.UserDetail.as_view()),
    path("invites", members.InviteList.as_view()),
    path("invites/<str:invite_id>", members.InviteDetail.as_view()),
    path("usage/completions", usage.UsageCompletions.as_view()),
    path("costs", usage.Costs.as_view()),
    path("requests", usage.RequestList.as_view()),
    path("requests/<str:request_id>", usage.RequestDetail.as_view()),
    path("wallet", wallet.Wallet.as_view()),
    path("wallet/ledger", wallet.Ledger.as_view()),
    path("wallet/topups", wallet.TopUps.as_view()),
    path("models", catalog.Models.as_view()),
    path("admin_api_keys", admin_keys.AdminKeyList.as_view()),
    path("admin_api_keys/<str:key_id>", admin_keys.AdminKeyDetail.as_view()),
]
