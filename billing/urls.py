"""Billing pages and the Stripe webhook (``/billing/...``)."""

from django.urls import URLPattern, path

from billing import views

app_name = "billing"

urlpatterns: list[URLPattern] = [
    path("stripe/webhook", views.stripe_webhook, name="stripe_webhook"),
    path("topup/<slug:org_slug>/start", views.topup_start, name="topup_start"),
    path("topup/success", views.topup_success, name="topup_success"),
    path("topup/cancel", views.topup_cancel, name="topup_cancel"),
]
