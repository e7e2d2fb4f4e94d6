"""The packages of the gateway depend on each other one way only (docs/architecture.md).

Read from the source with :mod:`ast` (every ``import``, module-level or inside a function), so
the check needs no Django and no third-party tool. A package may import packages of the layers
*below* its own; packages that share a layer are independent and never import each other.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Bottom to top. A name is a package or a module; a module belongs to the longest name that
# is a prefix of it.
LAYERS: tuple[tuple[str, ...], ...] = (
    # Integer nano-USD arithmetic: prices, usage, the one cost function, conversions.
    ("money",),
    # Settings, URLs, the error hierarchy, the ASGI, Celery and `make run` entry points.
    ("config",),
    # The machinery every app shares: PostgreSQL (hot path, async ORM), Redis, the cache, live
    # pushes, outages, observability hooks, the background-task keeper, JSON, query strings.
    ("infra",),
    # Tenants, users and keys; the catalog of vendors, models, offerings and routing.
    ("accounts", "catalog"),
    # Wallets, the ledger, holds, Stripe.
    ("billing",),
    # The /v1 API: validation, limits, the call pipeline, vendor adapters.
    ("inference",),
    # Vector stores (``/v1/vector_stores``), built on inference's call path.
    ("vectors",),
    # The Batch API (``/v1/batches``): lines of a stored file run through inference's call path.
    ("batches",),
    # The customer dashboard.
    ("dashboard",),
    # The management API (``/v1/organization/…``) reuses the dashboard's tenancy rules.
    ("management",),
)

# The composition root: what starts the web process and wires every app's routes and metrics.
# These may import anything of ours; nothing but one another imports them.
ENTRY_POINTS = (
    "config.asgi",
    "config.urls",
    "config.server",
    # /metrics and /readyz read the apps at scrape time; the hooks every layer calls
    # (counters, spans, the call log line) are infra.observability, in the infra layer.
    "config.probes",
    "config.scrape",
)

# Packages of ours that import nothing of ours and that nothing of ours imports.
ISOLATED = ("gpu_backend",)


def _within(module: str, name: str) -> bool:
    return module == name or module.startswith(name + ".")


def _is_entry_point(module: str) -> bool:
    return any(_within(module, name) for name in ENTRY_POINTS)


def _layer_of(module: str) -> tuple[int, str] | None:
    """(layer index, the name it matched) of ``module``, or None when it is not ours."""
    best: tuple[int, str] | None = None
    for index, names in enumerate((*LAYERS, ENTRY_POINTS)):
        for name in names:
            if _within(module, name) and (best is None or len(name) > len(best[1])):
                best = (index, name)
    return best


def _modules(package: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def _imports(module: str, path: Path) -> Iterator[str]:
    """Every module ``module`` imports, relative imports resolved."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield target
            # ``from billing import services`` imports the module billing.services.
            for alias in node.names:
                submodule = ROOT.joinpath(*target.split("."), alias.name)
                if submodule.with_suffix(".py").is_file() or submodule.is_dir():
                    yield f"{target}.{alias.name}"


def _all_imports() -> Iterator[tuple[str, str]]:
    packages = {name.split(".")[0] for names in LAYERS for name in names} | set(ISOLATED)
    for package in sorted(packages):
        for module, path in _modules(package):
            for imported in _imports(module, path):
                yield module, imported


def _violations() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for module, imported in _all_imports():
        mine, theirs = _layer_of(module), _layer_of(imported)
        if mine is None or theirs is None or mine[1] == theirs[1] or _is_entry_point(module):
            continue
        if theirs[0] >= mine[0]:
            found.add((module, imported))
    return found


def test_every_import_points_down_the_layers() -> None:
    found = sorted(_violations())
    assert not found, "imports against the layers (docs/architecture.md):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in found
    )


def test_isolated_packages_stand_alone() -> None:
    ours = {name.split(".")[0] for names in LAYERS for name in names} | set(ISOLATED)
    crossing = sorted(
        (module, imported)
        for module, imported in _all_imports()
        if (module.split(".")[0] in ISOLATED) != (imported.split(".")[0] in ISOLATED)
        and imported.split(".")[0] in ours
        and module.split(".")[0] != imported.split(".")[0]
    )
    assert not crossing, crossing


def test_money_needs_nothing_but_the_standard_library() -> None:
    outside = sorted(
        (module, imported)
        for module, path in _modules("money")
        for imported in _imports(module, path)
        if imported.split(".")[0] not in {"money", "__future__", *sys.stdlib_module_names}
    )
    assert not outside, outside


def test_vendor_adapters_take_only_wire_facts_from_the_catalog() -> None:
    """``inference.vendors`` translates wire formats: of the catalog it may read the facts it
    shares with the probe (``catalog.vendor_wire``), never the catalog's models or routing."""
    reaching = sorted(
        (module, imported)
        for module, imported in _all_imports()
        if _within(module, "inference.vendors")
        and _within(imported, "catalog")
        and not _within(imported, "catalog.vendor_wire")
    )
    assert reaching == []
    wire = [imported for module, imported in _all_imports() if module == "catalog.vendor_wire"]
    assert not any(_layer_of(imported) for imported in wire)  # nothing of ours


def _module_graph() -> dict[str, set[str]]:
    """Our modules and the modules of ours each one imports (a package is its ``__init__``)."""
    known = {
        module
        for package in {name.split(".")[0] for names in LAYERS for name in names} | set(ISOLATED)
        for module, _ in _modules(package)
    }
    graph: dict[str, set[str]] = {module: set() for module in known}
    for module, imported in _all_imports():
        if imported in known and imported != module:
            graph[module].add(imported)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (Tarjan's
    algorithm, iterative), each sorted; sorted by their first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_module_imports_itself_back() -> None:
    """Inside a package as between them: no module is reached again from what it imports
    (imports inside functions included; a package is its ``__init__``)."""
    assert _cycles(_module_graph()) == []
