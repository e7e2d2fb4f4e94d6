"""Project-level properties: layout, production settings."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_top_level_package_shadows_a_stdlib_module():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert {"config", "accounts", "billing", "catalog", "inference", "dashboard"} <= packages
    assert not packages & set(sys.stdlib_module_names)


def _production_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "STRIPE_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        DJANGO_SECRET_KEY="x" * 64 + "-production-secret-for-the-check",
        INFRAI_KEY_PEPPER="pepper-for-the-check",
        DJANGO_ALLOWED_HOSTS="api.infrai.cc",
        DATABASE_URL=os.environ.get("DATABASE_URL", "postgres://u@127.0.0.1:5432/infrai"),
        REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/1"),
        STRIPE_SECRET_KEY="sk_test_check",
        STRIPE_WEBHOOK_SECRET="whsec_check",
        **extra,
    )
    return env


def test_production_settings_pass_check_deploy():
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=_production_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_production_settings_refuse_to_start_without_their_secrets():
    env = _production_env()
    del env["DJANGO_SECRET_KEY"]
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_env_example_documents_every_variable_the_settings_read():
    import re

    read = set()
    for path in (ROOT / "config" / "settings").glob("*.py"):
        read |= set(re.findall(r"env(?:\.\w+)?\(\s*\"([A-Z0-9_]+)\"", path.read_text()))
    documented = set(re.findall(r"^([A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))
    assert read, "no settings read from the environment?"
    assert read <= documented, sorted(read - documented)


def test_error_catalog_lists_every_code_the_code_can_produce():
    import re

    documented = set(re.findall(r"`([a-z_]+)`", (ROOT / "docs" / "errors.md").read_text()))
    produced = set()
    for app in ("accounts", "billing", "catalog", "config", "inference", "dashboard"):
        for path in (ROOT / app).rglob("*.py"):
            if "gpu_backend" in path.parts or "migrations" in path.parts:
                continue  # the gpu-backend is a vendor: its errors never reach our callers as-is
            text = path.read_text()
            produced |= set(re.findall(r"\b(?:default_)?code\s*[:=]\s*\"([a-z_]+)\"", text))
            produced |= set(re.findall(r"^CODE_\w+\s*=\s*\"([a-z_]+)\"", text, re.M))
    assert produced, "no codes found?"
    assert produced <= documented, sorted(produced - documented)


def test_the_request_path_never_imports_the_dashboard():
    """``inference`` sits below ``dashboard``: live pushes go through ``config.live``."""
    import re

    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "inference").rglob("*.py")
        if re.search(r"^\s*(from|import) dashboard\b", path.read_text(), re.M)
    ]
    assert offenders == []
