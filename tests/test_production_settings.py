"""Production cannot start half-configured, ``check --deploy`` names what is missing, and a
``make run`` instance signs with a secret key of its own."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from config.checks import DEVELOPMENT_SECRET_KEY, deployment_problems

ROOT = Path(__file__).resolve().parent.parent
SMTP = "django.core.mail.backends.smtp.EmailBackend"


def _production_env(**changes: str | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "STRIPE_", "INFRAI_", "EMAIL_", "CELERY_"))
        and k not in ("REDIS_URL",)
    }
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        DJANGO_SECRET_KEY="x" * 64 + "-production-secret-for-the-check",
        INFRAI_KEY_PEPPER="pepper-for-the-check-0123456789",
        DJANGO_ALLOWED_HOSTS="api.infrai.cc",
        DATABASE_URL=os.environ.get("DATABASE_URL", "postgres://u@127.0.0.1:5432/infrai"),
        REDIS_URL="redis://127.0.0.1:6379/9",
        STRIPE_SECRET_KEY="sk_test_check",
        STRIPE_WEBHOOK_SECRET="whsec_check",
    )
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``manage.py *args`` in a fresh interpreter with exactly ``env``; output captured."""
    return _python(env, "manage.py", *args)


def _python(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_complete_production_settings_pass_check_deploy():
    result = _manage(_production_env(), "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("changes", "named"),
    [({"DJANGO_SECRET_KEY": None}, "DJANGO_SECRET_KEY"),
     ({"REDIS_URL": None}, "REDIS_URL"),
     ({"INFRAI_KEY_PEPPER": ""}, "INFRAI_KEY_PEPPER"),
     ({"STRIPE_WEBHOOK_SECRET": ""}, "STRIPE_WEBHOOK_SECRET"),
     ({"DJANGO_ALLOWED_HOSTS": "*"}, "DJANGO_ALLOWED_HOSTS"),
     ({"EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend"}, "EMAIL_BACKEND")],
    ids=["no-secret-key", "no-redis", "empty-pepper", "empty-webhook-secret", "any-host",
         "console-mail"],
)  # fmt: skip
def test_production_refuses_to_start_half_configured(changes, named):
    result = _manage(_production_env(**changes), "check")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and named in result.stderr


def test_check_deploy_reports_each_rule_on_settings_that_break_them(tmp_path):
    env = _production_env(
        DJANGO_SETTINGS_MODULE="config.settings.local",
        INFRAI_DATA_DIR=str(tmp_path),
        CELERY_TASK_ALWAYS_EAGER="true",  # E001: tasks would run in the web process
        INFRAI_KEY_PEPPER="",
        STRIPE_WEBHOOK_SECRET="",
        DJANGO_ALLOWED_HOSTS="*",
    )
    result = _manage(env, "check", "--deploy")
    assert result.returncode != 0
    for check_id in ("infrai.E001", "infrai.E002", "infrai.E003", "infrai.E004", "infrai.E005"):
        assert check_id in result.stderr, result.stderr


def test_deployment_rules():
    good = {
        "REDIS_URL": "redis://r:6379/0",
        "CACHES": {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache"}},
        "CHANNEL_LAYERS": {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer"}},
        "CELERY_TASK_ALWAYS_EAGER": False,
        "CELERY_BROKER_URL": "redis://r:6379/0",
        "INFRAI_KEY_PEPPER": "p" * 32,
        "STRIPE_WEBHOOK_SECRET": "whsec_x",
        "ALLOWED_HOSTS": ["api.infrai.cc", ".infrai.cc"],
        "EMAIL_BACKEND": SMTP,
        "SECRET_KEY": "s" * 50,
    }
    assert deployment_problems(good) == []
    broken = {
        "CELERY_TASK_ALWAYS_EAGER": True,
        "INFRAI_KEY_PEPPER": "   ",
        "ALLOWED_HOSTS": ["api.infrai.cc", "*"],
        "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
        "SECRET_KEY": DEVELOPMENT_SECRET_KEY,
    }
    ids = [check_id for check_id, _ in deployment_problems({**good, **broken})]
    assert ids == ["infrai.E001", "infrai.E002", "infrai.E004", "infrai.E005", "infrai.E006"]
    assert [i for i, _ in deployment_problems({**good, "ALLOWED_HOSTS": []})] == ["infrai.E004"]
    replica = {
        "DATABASE_REPLICA_URL": "postgres://u@replica:5432/infrai",
        "INFRAI_REPLICA_MAX_LAG_S": 5.0,
        "INFRAI_REPLICA_CHECK_S": 1.0,
    }
    assert deployment_problems({**good, **replica, "INFRAI_READ_YOUR_WRITES_S": 6.0}) == []
    short = deployment_problems({**good, **replica, "INFRAI_READ_YOUR_WRITES_S": 5.5})
    assert [i for i, _ in short] == ["infrai.E007"]
    assert deployment_problems({**good, "INFRAI_READ_YOUR_WRITES_S": 0.0}) == []  # no replica


def _local_secret_key(data_dir: Path) -> str:
    env = _production_env(
        DJANGO_SETTINGS_MODULE="config.settings.local",
        DJANGO_SECRET_KEY=None,
        INFRAI_DATA_DIR=str(data_dir),
    )
    result = _python(env, "-c", "from django.conf import settings; print(settings.SECRET_KEY)")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_local_instance_generates_its_secret_key_once(tmp_path):
    first = _local_secret_key(tmp_path)
    assert first != DEVELOPMENT_SECRET_KEY and len(first) >= 50
    key_file = tmp_path / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert _local_secret_key(tmp_path) == first  # kept across restarts
    assert _local_secret_key(tmp_path / "other") != first  # each instance its own


def test_production_keeps_the_replica_and_the_poolers_options():
    """Production replaces only the primary's entry of base.py's databases: a configured read
    replica and INFRAI_DB_POOLER=transaction's unprepared statements stay in force."""
    env = _production_env(
        DATABASE_REPLICA_URL="postgres://u@replica.internal:5432/infrai",
        INFRAI_DB_POOLER="transaction",
    )
    show = (
        "import json; from django.conf import settings; d = settings.DATABASES;"
        " print(json.dumps({a: [d[a]['HOST'], d[a]['OPTIONS']] for a in d}))"
    )
    result = _python(env, "-c", show)
    assert result.returncode == 0, result.stderr
    databases = json.loads(result.stdout)
    assert databases["replica"][0] == "replica.internal"
    for alias in ("default", "replica"):
        assert databases[alias][1]["prepare_threshold"] is None
    assert databases["default"][1]["pool"]["max_size"] == 32
