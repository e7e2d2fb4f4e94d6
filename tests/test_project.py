"""Project-level properties: layout, documented settings and error codes, import boundaries.

The production settings have their own module, ``tests/test_production_settings.py``.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_top_level_package_shadows_a_stdlib_module():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert {"config", "accounts", "billing", "catalog", "inference", "dashboard"} <= packages
    assert not packages & set(sys.stdlib_module_names)


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
    for app in ("accounts", "billing", "catalog", "config", "inference", "dashboard", "batches"):
        for path in (ROOT / app).rglob("*.py"):
            if "gpu_backend" in path.parts or "migrations" in path.parts:
                continue  # the gpu-backend is a vendor: its errors never reach our callers as-is
            text = path.read_text()
            produced |= set(re.findall(r"\b(?:default_)?code\s*[:=]\s*\"([a-z_]+)\"", text))
            produced |= set(re.findall(r"^CODE_\w+\s*=\s*\"([a-z_]+)\"", text, re.M))
    assert produced, "no codes found?"
    assert produced <= documented, sorted(produced - documented)


def test_the_request_path_never_imports_the_dashboard():
    """``inference`` sits below ``dashboard``: live pushes go through ``infra.live``."""
    import re

    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "inference").rglob("*.py")
        if re.search(r"^\s*(from|import) dashboard\b", path.read_text(), re.M)
    ]
    assert offenders == []
