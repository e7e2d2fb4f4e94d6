"""Billing's services import one way (no cycle, none imports ``billing.tasks``), and billing,
accounts and management use no other app's models or another module's private names (issue
16). Read from the source, function-level imports included, so a new import is checked too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path, *, runtime_only: bool = True) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import in ``path`` (function-level ones included), except
    those under ``if TYPE_CHECKING:`` when ``runtime_only``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    if runtime_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped |= {id(child) for child in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names]
    return out


def test_billing_services_and_tasks_import_one_way():
    modules = [*(ROOT / "billing" / "services").glob("*.py"), ROOT / "billing" / "tasks.py"]
    graph = {
        _module(p): {
            m for m, _ in _imports(p) if m.startswith(("billing.services", "billing.tasks"))
        }
        for p in modules
    }
    for name, deps in graph.items():
        if name.startswith("billing.services"):
            assert "billing.tasks" not in deps, f"{name} imports billing.tasks"
    # No cycle (the package's __init__ re-exports its modules; it is a door, not a layer).
    inner = {n: {d for d in deps if d != "billing.services"} for n, deps in graph.items()}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " → ".join((*path, name))
        if name in done:
            return
        for dep in inner.get(name, ()):
            visit(dep, (*path, name))
        done.add(name)

    for name in inner:
        visit(name, ())


APPS = ("billing", "accounts", "management")
OURS = ("accounts", "billing", "catalog", "inference", "management", "money", "vectors")
# Run-time imports of another app's models still there, each with why and what removes it.
TOLERATED = {
    # The Organization admin page looks the wallet up to link to it (a function-level import).
    # Goes when billing supplies the link (see tests/test_layers.py).
    ("accounts.admin", "billing.models"),
    # The request-log list (request-id cursor, optional time range) and the usage buckets
    # query the request log here; inference.selectors has no reads of that shape yet.
    ("management.views.usage", "inference.models"),
    ("management.selectors", "inference.models"),
}


def _sources(app: str) -> list[Path]:
    """The app's modules but its migrations and ``models.py`` (foreign keys name other apps'
    models by design)."""
    paths = (ROOT / app).rglob("*.py")
    return [p for p in paths if "migrations" not in p.parts and p.name != "models.py"]


def test_no_private_names_or_other_apps_models_across_modules():
    """billing, accounts and management reach other apps through their front doors
    (``services``/``selectors``, enums such as ``accounts.roles``): no other app's
    ``models`` at run time (annotations import them under ``TYPE_CHECKING``) and no private
    name of another module."""
    found = []
    for app in APPS:
        for path in _sources(app):
            here = _module(path)
            for module, names in _imports(path):
                top = module.split(".")[0]
                if top not in OURS:
                    continue
                private = [n for n in names if n.startswith("_")]
                if private and module != here:
                    found.append(f"{here}: {module}.{', '.join(private)}")
                other_models = module.endswith(".models") and top != app
                if other_models and (here, module) not in TOLERATED:
                    found.append(f"{here}: {module} ({', '.join(names)})")
    assert found == []
