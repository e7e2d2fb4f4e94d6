"""Production: every secret is required; missing ones fail at import, not at the first request.

Beyond the secrets, :func:`config.checks.deployment_problems` must find nothing (Redis, a real
pepper and webhook secret, explicit hosts, an e-mail backend that delivers): the process
refuses to start otherwise, and ``manage.py check --deploy`` reports the same rules.
"""

from django.core.exceptions import ImproperlyConfigured

from config.checks import deployment_problems
from config.settings.base import *  # noqa: F403
from config.settings.base import DATABASES, env

DEBUG = False
SECRET_KEY = env("DJANGO_SECRET_KEY")
INFRAI_KEY_PEPPER = env("INFRAI_KEY_PEPPER")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS")
# The primary from the environment, never a data directory's. Only its entry is replaced: base.py's
# "replica" alias (DATABASE_REPLICA_URL) stays, and so do the options it set other than the pool
# (prepare_threshold under INFRAI_DB_POOLER=transaction).
_options = {k: v for k, v in DATABASES["default"]["OPTIONS"].items() if k != "pool"}
DATABASES["default"] = env.db("DATABASE_URL")
DATABASES["default"]["OPTIONS"] = {
    **_options,
    "pool": {"min_size": 2, "max_size": 32, "timeout": 10, "reconnect_timeout": 2},  # see base.py
}
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True  # see base.py
STRIPE_SECRET_KEY = env("STRIPE_SECRET_KEY")
STRIPE_WEBHOOK_SECRET = env("STRIPE_WEBHOOK_SECRET")
# Required: the cache, rate limits, channel layer and Celery are shared through Redis (base.py
# builds them from it).
REDIS_URL = env("REDIS_URL")
EMAIL_BACKEND = env("EMAIL_BACKEND", default="django.core.mail.backends.smtp.EmailBackend")

# One JSON object per log line (infra/observability/logs.py); INFRAI_LOG_FORMAT=text overrides.
LOGGING["handlers"] = {  # noqa: F405
    "console": {
        "class": "logging.StreamHandler",
        "formatter": env("INFRAI_LOG_FORMAT", default="json"),
    }
}

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
SECURE_REDIRECT_EXEMPT = [r"^v1/", r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True

_problems = deployment_problems(globals())
if _problems:
    raise ImproperlyConfigured(
        "Production settings are incomplete:\n"
        + "\n".join(f"  {check_id}: {message}" for check_id, message in _problems)
    )
