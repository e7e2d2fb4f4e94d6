"""Billing's services import one way: no cycle, and none imports ``billing.tasks`` (which
imports them). Read from the source, function-level imports included, so a new import is
checked too (issue 16)."""

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
