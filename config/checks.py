"""What a production deployment must have, as one list of problems and as system checks.

:func:`deployment_problems` is the one place the rules live: ``config.settings.production``
refuses to start when it returns anything, and the ``--deploy`` system checks below report the
same problems for whatever settings are loaded (``manage.py check --deploy``).

The rules: Redis behind the cache, the channel layer and Celery (a per-process cache would
give every web process its own rate limits and key cache, an in-memory channel layer would
reach only the process's own dashboards, eager Celery on an in-memory broker would run the
sweepers nowhere); a real API-key pepper and Stripe webhook secret; explicit allowed hosts;
an e-mail backend that delivers (the console backend prints password-reset links to stdout);
a secret key that is not the repository's development constant; with a read replica, a
read-your-writes window longer than the lag the replica may be used at plus one check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register

# E-mail backends that deliver nothing to anyone.
UNDELIVERING_EMAIL_BACKENDS = frozenset(
    {
        "django.core.mail.backends.console.EmailBackend",
        "django.core.mail.backends.locmem.EmailBackend",
        "django.core.mail.backends.dummy.EmailBackend",
        "django.core.mail.backends.filebased.EmailBackend",
    }
)
# The development key in ``config.settings.base`` (public: it is in the repository).
DEVELOPMENT_SECRET_KEY = "insecure-local-only-key-change-me-0123456789abcdef"
MIN_SECRET_LENGTH = 16


def deployment_problems(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(check id, message)`` for each production rule the settings ``values`` break."""
    problems: list[tuple[str, str]] = []
    cache = values.get("CACHES", {}).get("default", {}).get("BACKEND", "")
    layer = values.get("CHANNEL_LAYERS", {}).get("default", {}).get("BACKEND", "")
    if (
        not values.get("REDIS_URL")
        or "redis" not in cache.lower()
        or "redis" not in layer.lower()
        or values.get("CELERY_TASK_ALWAYS_EAGER")
        or str(values.get("CELERY_BROKER_URL", "")).startswith("memory://")
    ):
        problems.append(
            (
                "infrai.E001",
                "REDIS_URL must be set: the cache, rate limits, channel layer and Celery need "
                "Redis shared by every process (Celery must not run eagerly).",
            )
        )
    if len(str(values.get("INFRAI_KEY_PEPPER") or "").strip()) < MIN_SECRET_LENGTH:
        problems.append(
            (
                "infrai.E002",
                f"INFRAI_KEY_PEPPER must be a secret of at least {MIN_SECRET_LENGTH} characters.",
            )
        )
    if not str(values.get("STRIPE_WEBHOOK_SECRET") or "").strip():
        problems.append(("infrai.E003", "STRIPE_WEBHOOK_SECRET must be set (not empty)."))
    hosts = list(values.get("ALLOWED_HOSTS") or [])
    if not hosts or any(host.strip() in ("*", "") for host in hosts):
        problems.append(
            (
                "infrai.E004",
                "DJANGO_ALLOWED_HOSTS must list the site's host names explicitly (no '*').",
            )
        )
    if values.get("EMAIL_BACKEND") in UNDELIVERING_EMAIL_BACKENDS:
        problems.append(
            (
                "infrai.E005",
                f"EMAIL_BACKEND {values.get('EMAIL_BACKEND')} delivers no mail (password resets "
                "and invitations would be lost or printed); use SMTP or another real backend.",
            )
        )
    if values.get("DATABASE_REPLICA_URL") and float(
        values.get("INFRAI_READ_YOUR_WRITES_S") or 0
    ) < float(values.get("INFRAI_REPLICA_MAX_LAG_S") or 0) + float(
        values.get("INFRAI_REPLICA_CHECK_S") or 0
    ):
        problems.append(
            (
                "infrai.E007",
                "INFRAI_READ_YOUR_WRITES_S must be at least INFRAI_REPLICA_MAX_LAG_S plus "
                "INFRAI_REPLICA_CHECK_S: a client that wrote would otherwise read the replica "
                "again before it can have replayed the write.",
            )
        )
    if values.get("SECRET_KEY") in ("", None, DEVELOPMENT_SECRET_KEY):
        problems.append(
            (
                "infrai.E006",
                "DJANGO_SECRET_KEY must be set to a secret of its own (not the development key).",
            )
        )
    return problems


def _settings_values(names: Iterable[str]) -> dict[str, Any]:
    from django.conf import settings

    return {name: getattr(settings, name, None) for name in names}


_NAMES = (
    "REDIS_URL",
    "CACHES",
    "CHANNEL_LAYERS",
    "CELERY_TASK_ALWAYS_EAGER",
    "CELERY_BROKER_URL",
    "INFRAI_KEY_PEPPER",
    "STRIPE_WEBHOOK_SECRET",
    "ALLOWED_HOSTS",
    "EMAIL_BACKEND",
    "SECRET_KEY",
    "DATABASE_REPLICA_URL",
    "INFRAI_READ_YOUR_WRITES_S",
    "INFRAI_REPLICA_MAX_LAG_S",
    "INFRAI_REPLICA_CHECK_S",
)


@register(Tags.security, deploy=True)
def check_deployment(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``manage.py check --deploy``: every production rule the loaded settings break."""
    return [
        Error(message, id=check_id)
        for check_id, message in deployment_problems(_settings_values(_NAMES))
    ]
