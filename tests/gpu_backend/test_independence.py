"""The model server is a program of its own: it imports nothing of Django or the gateway, and the
gateway imports nothing of it (they meet over HTTP only)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GATEWAY_PACKAGES = ("config", "accounts", "billing", "catalog", "inference", "dashboard")
FORBIDDEN_IN_BACKEND = ("django", "rest_framework", "channels", "celery", *GATEWAY_PACKAGES)


def imported_roots(path: Path) -> set[str]:
    """The top-level package of every absolute import in ``path`` (function-level ones too)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_backend_module_imports_django_or_a_gateway_app() -> None:
    offenders = {
        str(path.relative_to(REPO)): sorted(imported_roots(path) & set(FORBIDDEN_IN_BACKEND))
        for path in (REPO / "gpu_backend").rglob("*.py")
    }
    assert {p: found for p, found in offenders.items() if found} == {}


def test_no_gateway_module_imports_the_backend() -> None:
    offenders = [
        str(path.relative_to(REPO))
        for package in (*GATEWAY_PACKAGES, "management")
        for path in (REPO / package).rglob("*.py")
        if "gpu_backend" in imported_roots(path)
    ]
    assert offenders == []


def test_starting_the_server_loads_no_django_module() -> None:
    """What ``python -m gpu_backend`` imports before serving (app, backend, every loader module)
    pulls in no Django, whatever the installed packages drag along."""
    code = (
        "import json, sys\n"
        "import gpu_backend.app, gpu_backend.backend, gpu_backend.cli, gpu_backend.readiness\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "gpu_backend" in loaded
    assert loaded.isdisjoint(FORBIDDEN_IN_BACKEND), sorted(loaded & set(FORBIDDEN_IN_BACKEND))
