"""axe-core in a Playwright page: the accessibility check of the browser tests.

The engine is Deque's own ``axe-core`` npm package, pinned exactly in ``tests/js/package.json``
and its lockfile and installed by ``scripts/install_test_tools.sh`` (``npm ci`` in ``tests/js``,
which ``make test`` runs). Chosen over a PyPI wrapper such as axe-playwright-python because that
one bundles an older copy (axe 4.12 when this was written) behind a thin ``page.evaluate``
wrapper that adds nothing: here the version is the one the issue's audit ran (4.14), upgrades
are one line in package.json, and the file read is the unmodified ``axe.min.js`` of the
release.

Use::

    from tests.axe import serious_violations

    page.goto(url)
    assert serious_violations(page) == []

A failing assertion prints each violation as ``{"id", "impact", "help", "nodes": [...]}`` with
the offending elements' selectors and HTML, enough to find the template.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from playwright.sync_api import Page

AXE_JS = Path(__file__).resolve().parent / "js" / "node_modules" / "axe-core" / "axe.min.js"

#: The impacts that fail a test. axe also reports "minor" and "moderate"; those are advice.
FAILING_IMPACTS = ("serious", "critical")

#: WCAG 2.0/2.1/2.2 A and AA plus axe's best practices: what the issue's audit ran.
RUN_TAGS = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice")


@cache
def axe_source() -> str:
    """The text of ``axe.min.js``; raises ``FileNotFoundError`` naming the install step."""
    if not AXE_JS.is_file():
        raise FileNotFoundError(
            f"{AXE_JS} is missing: run `bash scripts/install_test_tools.sh` (npm ci in tests/js)"
        )
    return AXE_JS.read_text(encoding="utf-8")


def axe_version(page: Page) -> str:
    """The version of axe-core injected into ``page`` (injecting it if needed)."""
    _inject(page)
    return str(page.evaluate("() => window.axe.version"))


def violations(page: Page, *, context: str | None = None) -> list[dict[str, Any]]:
    """Every axe violation on ``page`` as it is now (all impacts), as axe reports them.

    ``context`` is a CSS selector limiting the run to part of the page (default: the document).
    The page is not reloaded or changed except for the injected ``window.axe``.
    """
    _inject(page)
    result: dict[str, Any] = page.evaluate(
        """async ([context, tags]) => {
            const options = {runOnly: {type: "tag", values: tags}, resultTypes: ["violations"]};
            return await window.axe.run(context ? document.querySelector(context) : document,
                                        options);
        }""",
        [context, list(RUN_TAGS)],
    )
    return list(result["violations"])


def serious_violations(page: Page, *, context: str | None = None) -> list[dict[str, Any]]:
    """The serious and critical axe violations on ``page``, trimmed for an assertion message.

    Each item is ``{"id", "impact", "help", "nodes"}`` where ``nodes`` lists, per offending
    element, its ``target`` selector, its ``html`` and axe's ``summary`` of what to fix. An empty
    list means the page passes.
    """
    return [
        {
            "id": violation["id"],
            "impact": violation["impact"],
            "help": violation["help"],
            "nodes": [
                {
                    "target": node.get("target"),
                    "html": node.get("html", "")[:300],
                    "summary": node.get("failureSummary", ""),
                }
                for node in violation["nodes"]
            ],
        }
        for violation in violations(page, context=context)
        if violation.get("impact") in FAILING_IMPACTS
    ]


def _inject(page: Page) -> None:
    """Load axe-core into the page once per document (a navigation clears it)."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        # Evaluated through the DevTools protocol, not as a <script>: a page's
        # Content-Security-Policy cannot refuse it and the page's DOM is left as it was.
        page.evaluate(axe_source())
