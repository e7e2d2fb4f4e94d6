"""Billing and the catalog refuse in their own terms; one table in the web layer answers them.

The table (:func:`inference.errors.api_error`) must give each domain refusal exactly the
OpenAI body, status and headers the API has always sent for it (docs/errors.md); billing and
the catalog must not raise (or import) the HTTP errors of :mod:`config.errors`.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import billing.errors
import catalog.errors
from billing.errors import FundsLimit, InsufficientFunds
from catalog.errors import ModelNotFound, NoRoute, RoutingError, RoutingRefused
from config.errors import ApiError, InvalidRequest
from inference.errors import api_error, insufficient_quota

ROOT = Path(__file__).resolve().parent.parent
USD = 1_000_000_000


def _answer(exc: Exception) -> tuple[int, dict, dict]:
    error = api_error(exc)
    assert error is not None, exc
    return error.status, error.body(), error.headers()


def test_a_wallet_refusal_is_the_402_insufficient_quota_naming_both_amounts():
    exc = InsufficientFunds(limit=FundsLimit.WALLET, needed_nanos=USD + 1, available_nanos=USD)
    assert _answer(exc) == (
        402,
        {
            "error": {
                "message": "You exceeded your current quota: this request may cost up to "
                "$1.000000001 and your organization's available balance is $1. Add credit in "
                "the dashboard to continue.",
                "type": "insufficient_quota",
                "code": "insufficient_quota",
                "param": None,
            }
        },
        {"x-should-retry": "false"},
    )


def test_a_project_budget_refusal_is_the_402_project_budget_exceeded():
    exc = InsufficientFunds(
        limit=FundsLimit.PROJECT_BUDGET,
        needed_nanos=2 * USD,
        available_nanos=0,
        budget_nanos=5 * USD,
    )
    status, body, headers = _answer(exc)
    assert (status, body["error"]["code"], headers) == (
        402,
        "project_budget_exceeded",
        {"x-should-retry": "false"},
    )
    assert body["error"]["message"] == (
        "This request would exceed the project's monthly budget of $5. Raise the project's "
        "budget in the dashboard or wait for the next month."
    )


def test_a_key_budget_refusal_is_the_402_key_budget_exceeded_with_what_is_left():
    exc = InsufficientFunds(
        limit=FundsLimit.KEY_BUDGET,
        needed_nanos=USD,
        available_nanos=USD // 4,
        budget_nanos=3 * USD,
    )
    status, body, _headers = _answer(exc)
    assert (status, body["error"]["type"], body["error"]["code"]) == (
        402,
        "insufficient_quota",
        "key_budget_exceeded",
    )
    assert body["error"]["message"] == (
        "This request would exceed this API key's monthly budget of $3 ($0.25 left this "
        "month). Raise the key's budget or wait for the next month."
    )


def test_a_hint_is_appended_to_the_402_message():
    exc = InsufficientFunds(limit=FundsLimit.WALLET, needed_nanos=2, available_nanos=1)
    error = insufficient_quota(exc, hint=" Lower it.")
    assert error.message.endswith("Add credit in the dashboard to continue. Lower it.")


def test_a_routing_refusal_is_a_400_with_its_code_and_param():
    exc = RoutingRefused(
        "No model here takes 'top_k'.", code="unsupported_parameter", param="top_k"
    )
    assert _answer(exc) == (
        400,
        {
            "error": {
                "message": "No model here takes 'top_k'.",
                "type": "invalid_request_error",
                "code": "unsupported_parameter",
                "param": "top_k",
            }
        },
        {"x-should-retry": "false"},
    )


def test_an_unknown_model_is_the_404_model_not_found():
    status, body, headers = _answer(ModelNotFound("The model 'gpt-7' does not exist."))
    assert (status, body["error"]["code"], body["error"]["param"]) == (
        404,
        "model_not_found",
        "model",
    )
    assert body["error"]["type"] == "invalid_request_error"
    assert headers == {"x-should-retry": "false"}


@pytest.mark.parametrize(
    ("permanent", "headers"), [(True, {"x-should-retry": "false"}), (False, {})]
)
def test_no_route_is_a_503_not_retried_only_when_permanent(permanent, headers):
    exc = NoRoute("Nothing can serve it (a: down).", permanent=permanent, reasons=(("a", "down"),))
    status, body, sent = _answer(exc)
    assert (status, body["error"]["type"], body["error"]["code"]) == (
        503,
        "api_error",
        "no_routable_offering",
    )
    assert body["error"]["message"] == "Nothing can serve it (a: down)."
    assert sent == headers


def test_an_api_error_is_answered_as_it_is_and_anything_else_is_not_the_tables():
    error = InvalidRequest("bad", param="x")
    assert api_error(error) is error
    assert api_error(ValueError("a bug")) is None


def test_every_domain_refusal_has_an_answer_in_the_table():
    kinds = [
        cls
        for module in (billing.errors, catalog.errors)
        for _name, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, Exception) and cls.__module__ == module.__name__
    ]
    assert InsufficientFunds in kinds and NoRoute in kinds
    unanswered = []
    for kind in kinds:
        if kind is RoutingError:
            continue  # the base: every subclass is listed
        sample = (
            InsufficientFunds(limit=FundsLimit.WALLET, needed_nanos=1, available_nanos=0)
            if kind is InsufficientFunds
            else _routing_sample(kind)
        )
        if not isinstance(api_error(sample), ApiError):
            unanswered.append(kind.__name__)
    assert unanswered == []


def _routing_sample(kind: type) -> Exception:
    if kind is ModelNotFound:
        return ModelNotFound("m")
    if kind is NoRoute:
        return NoRoute("m", permanent=False)
    return kind("m", code="invalid_value")


def test_billing_and_the_catalog_raise_no_http_error():
    """Their refusals are their own exceptions: no module of theirs imports config.errors."""
    importing = []
    for package in ("billing", "catalog"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                if any(n == "config.errors" for n in names) or (
                    isinstance(node, ast.ImportFrom)
                    and node.module == "config"
                    and any(a.name == "errors" for a in node.names)
                ):
                    importing.append(str(path.relative_to(ROOT)))
    assert importing == []
