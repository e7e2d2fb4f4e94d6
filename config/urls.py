"""Django URLs (``/v1`` is not here: :mod:`config.asgi` sends it to the API consumer, all but
the management API under ``/v1/organization/``, which is Django REST framework)."""

from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import include, path

import dashboard.urls
import dashboard.views.security
import management.pages
from config.probes import healthz, metrics_view, readyz

urlpatterns = [
    # The admin logs in through the dashboard's two-step login (a code for staff with 2FA).
    path("admin/login/", dashboard.views.security.admin_login, name="admin_login"),
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("readyz", readyz),
    path("metrics", metrics_view),
    path("billing/", include("billing.urls")),
    path("v1/organization/", include("management.urls")),
    # The dashboard's pages and, in its namespace, the admin-keys page: management's, since it
    # needs the admin-key model and management sits above the dashboard.
    path("", include(([*dashboard.urls.urlpatterns, *management.pages.urlpatterns], "dashboard"))),
]

# Admin and dashboard assets under `make run` (DEBUG only; production serves them elsewhere).
urlpatterns += staticfiles_urlpatterns()
