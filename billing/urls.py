"""Billing pages and the Stripe webhook (``/billing/...``)."""

from django.urls import URLPattern

app_name = "billing"

urlpatterns: list[URLPattern] = []
