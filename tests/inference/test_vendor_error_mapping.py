"""Vendor 4xx bodies mapped to OpenAI's code and param at the adapter boundary (pure)."""

from __future__ import annotations

import pytest

from inference.vendors.errors import VendorRejected, VendorServerError, error_fields, from_status


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # Anthropic's Messages API
        ({"type": "error", "error": {"type": "invalid_request_error",
                                     "message": "prompt is too long: 210000 tokens > 200000"}},
         ("context_length_exceeded", "messages")),
        # OpenAI, code given
        ({"error": {"message": "too long", "code": "context_length_exceeded", "param": "messages"}},
         ("context_length_exceeded", "messages")),
        # SGLang / vLLM wording under "error"
        ({"error": {"message": "The input (9000 tokens) is longer than the model's context length "
                               "(8192 tokens).", "code": 400}},
         ("context_length_exceeded", "messages")),
        # A vendor's own param passes through
        ({"error": {"message": "bad", "code": "invalid_value", "param": "top_p"}},
         ("invalid_value", "top_p")),
        # Nothing said: nothing invented
        ({"error": {"message": "something else is wrong"}}, (None, None)),
        ("not an object", (None, None)),
    ],
)  # fmt: skip
def test_error_fields(body, expected):
    _message, code, param = error_fields(body)
    assert (code, param) == expected


def test_only_request_refusals_carry_code_and_param():
    rejected = from_status(400, "x", vendor="v", code="context_length_exceeded", param="messages")
    assert isinstance(rejected, VendorRejected)
    assert (rejected.code, rejected.param, rejected.retryable) == (
        "context_length_exceeded",
        "messages",
        False,
    )
    assert isinstance(from_status(500, "x", vendor="v", code="c", param="p"), VendorServerError)
