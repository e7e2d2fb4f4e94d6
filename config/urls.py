"""Django URLs (``/v1`` is not here: :mod:`config.asgi` sends it to the API consumer, all but
the management API under ``/v1/organization/``, which is Django REST framework)."""

from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import include, path

from config.observability.views import healthz, metrics_view, readyz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("readyz", readyz),
    path("metrics", metrics_view),
    path("billing/", include("billing.urls")),
    path("v1/organization/", include("management.urls")),
    path("", include("dashboard.urls")),
]

# Admin and dashboard assets under `make run` (DEBUG only; production serves them elsewhere).
urlpatterns += staticfiles_urlpatterns()
