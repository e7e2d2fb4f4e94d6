"""What a catalog row must hold to be routable: the known sets and the checks against them.

One set of checks, used twice: the admin's forms refuse a bad value on save, and
:func:`catalog.selectors.build_snapshot` skips (and reports) a row that got into the database
some other way (a raw write, an old migration, a script), so one bad row can never take every
``/v1`` call down. Each check returns a list of problems (empty: valid), worded for staff.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from catalog.models import AdapterKind, Capability, Parameter
from catalog.types import Support

# The task tags ``extra_body.task`` narrows to; a new tag is added here first (routing lists
# the tags the catalog uses as the known ones in its refusal).
KNOWN_TASKS: frozenset[str] = frozenset(
    {
        "agents",
        "chat",
        "coding",
        "math",
        "multilingual",
        "reasoning",
        "retrieval",
        "vision",
        "writing",
    }
)
KNOWN_CAPABILITIES: frozenset[str] = frozenset(Capability.values)
KNOWN_PARAMETERS: frozenset[str] = frozenset(Parameter.values)
KNOWN_SUPPORTS: frozenset[str] = frozenset(Support.values)
KNOWN_ADAPTERS: frozenset[str] = frozenset(AdapterKind.values)


def _tag_list_problems(value: Any, *, what: str, known: frozenset[str] | None) -> list[str]:
    if not isinstance(value, list):
        return [f'{what} must be a list of names, like ["chat"] (got {value!r})']
    problems = []
    for item in value:
        if not isinstance(item, str):
            problems.append(f"{what}: {item!r} is not a name (write it in quotes)")
        elif known is not None and item not in known:
            problems.append(f"{what}: unknown {item!r}; known: {', '.join(sorted(known))}")
    if len(set(map(repr, value))) != len(value):
        problems.append(f"{what}: a name is listed twice")
    return problems


def capabilities_problems(value: Any) -> list[str]:
    """Problems of a model's ``capabilities`` (a list of :class:`Capability` values)."""
    return _tag_list_problems(value, what="capabilities", known=KNOWN_CAPABILITIES)


def tasks_problems(value: Any, *, known: frozenset[str] | None = None) -> list[str]:
    """Problems of a model's ``tasks``: a list of names, each in ``known`` when given (the
    admin passes :data:`KNOWN_TASKS` plus the tags in use; a catalog document may bring new
    tags, which routing handles like any other)."""
    return _tag_list_problems(value, what="tasks", known=known)


def cell_problems(
    *, parameter: Any, support: Any, accepted_values: Any, max_value: Any
) -> list[str]:
    """Problems of one parameter-matrix cell (a :class:`ParameterRule` row's values)."""
    where = f"{parameter}" if isinstance(parameter, str) else repr(parameter)
    problems = []
    if parameter not in KNOWN_PARAMETERS:
        problems.append(f"parameter {where}: unknown; known: {', '.join(sorted(KNOWN_PARAMETERS))}")
    if support not in KNOWN_SUPPORTS:
        problems.append(
            f"{where}: support {support!r} unknown; known: {', '.join(sorted(KNOWN_SUPPORTS))}"
        )
    if not isinstance(accepted_values, list):
        problems.append(f"{where}: accepted values must be a JSON list, like [1.0]")
    if max_value is not None and (
        isinstance(max_value, bool) or not isinstance(max_value, int) or max_value < 0
    ):
        problems.append(f"{where}: the limit must be a whole number ≥ 0")
    return problems


# What a vendor-level rule may say: only the deviations (honoured is every parameter's default).
VENDOR_RULE_SUPPORTS: frozenset[str] = frozenset({Support.FAILS.value, Support.NO_EFFECT.value})
_VENDOR_CELL_KEYS = frozenset({"support", "source", "note", "accepted_values"})


def vendor_rules_problems(value: Any, *, need_sources: bool = True) -> list[str]:
    """Problems of a vendor's ``parameter_rules``: a mapping ``{parameter: cell}``, each cell
    ``{"support": "fails" | "no_effect", "source": "https://…", "note"?: str,
    "accepted_values"?: [values it does take]}`` for a known matrix parameter.

    ``need_sources``: whether every cell must name the documentation it comes from (the
    catalog document and the admin: yes; the routing snapshot checks only what routing reads,
    so a missing source never takes a vendor out of routing).
    """
    if not isinstance(value, Mapping):
        return ['parameter rules must be a mapping like {"n": {"support": "fails", ...}}']
    problems = []
    for parameter, cell in value.items():
        where = f"rule {parameter!r}"
        if parameter not in KNOWN_PARAMETERS:
            problems.append(
                f"{where}: unknown parameter; known: {', '.join(sorted(KNOWN_PARAMETERS))}"
            )
            continue
        if not isinstance(cell, Mapping):
            problems.append(f"{where}: write a mapping with support and source")
            continue
        support = cell.get("support")
        if support not in VENDOR_RULE_SUPPORTS:
            problems.append(f"{where}: support {support!r} unknown; use fails or no_effect")
        unknown = sorted(set(cell) - _VENDOR_CELL_KEYS)
        if unknown:
            problems.append(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}")
        if not isinstance(cell.get("accepted_values", []), list):
            problems.append(f"{where}: accepted_values must be a JSON list, like [1]")
        if not isinstance(cell.get("note", ""), str):
            problems.append(f"{where}: the note must be text")
        source = cell.get("source")
        if need_sources and not (
            isinstance(source, str) and source.startswith(("https://", "http://"))
        ):
            problems.append(f"{where}: a source URL (the vendor's documentation) is required")
    return problems


def vendor_row_problems(*, adapter_kind: Any, parameter_rules: Any) -> list[str]:
    """The problems that keep a vendor row out of routing: an adapter kind no module speaks,
    or parameter rules routing cannot read (their sources are not checked here)."""
    problems = []
    if adapter_kind not in KNOWN_ADAPTERS:
        problems.append(f"unknown adapter {adapter_kind!r}")
    return problems + vendor_rules_problems(parameter_rules, need_sources=False)


def per_image_problems(value: Any) -> list[str]:
    """Problems of a price's ``per_image_nanos`` (``{"<size>/<quality>": nanos}``)."""
    if not isinstance(value, Mapping):
        return ['image prices must be a mapping like {"1024x1024/standard": "0.04"}']
    return [
        f"image price {key!r}: {amount!r} is not a whole number of nano-USD ≥ 0"
        for key, amount in value.items()
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0
    ]


def model_row_problems(*, capabilities: Any, tasks: Any) -> list[str]:
    """The problems that keep a model row out of routing: malformed ``capabilities`` or
    ``tasks`` (not a list of names) or a capability no request can ever need (a typo)."""
    return capabilities_problems(capabilities) + tasks_problems(tasks)
