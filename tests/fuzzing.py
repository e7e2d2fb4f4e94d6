"""The hypothesis run the schema fuzz tests share (``tests/test_fuzz_v1.py``, the management
API's ``tests/management/test_fuzz.py``): bounded and reproducible."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable


def run_cases(strategy: Any, check: Callable[[Any], None], *, max_examples: int) -> bool:
    """``check`` on up to ``max_examples`` cases drawn from ``strategy``: derandomized, no example
    database, no deadline, no health check, no shrinking. Returns False when nothing could be
    generated (hypothesis' ``Unsatisfiable``); whatever ``check`` raises propagates."""

    @settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def one(case: Any) -> None:
        check(case)

    try:
        one()
    except Unsatisfiable:
        return False
    return True
