"""The dashboard owns no tables: it reads calls through ``inference.selectors`` and money
through ``billing.selectors``, never their models (type-only imports aside)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("inference.models", "billing.models")


def _runtime_imports(path: Path) -> set[str]:
    """Modules imported outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(), str(path))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(n) for child in node.body for n in ast.walk(child))
    found = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_dashboard_never_imports_request_log_or_billing_models():
    offenders = {
        (str(path.relative_to(ROOT)), name)
        for path in (ROOT / "dashboard").rglob("*.py")
        for name in _runtime_imports(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    }
    assert offenders == set()


def test_the_old_names_for_dashboard_reads_are_gone():
    for old in ("billing_reads.py", "catalog_reads.py", "live.py"):
        assert not (ROOT / "dashboard" / old).exists(), old
