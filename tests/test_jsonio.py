"""``infra.jsonio``: orjson on the hot path, with the standard library's answers for what
orjson refuses, and one canonical form for cache keys."""

from __future__ import annotations

import json
import math

import pytest

from infra import jsonio


def test_dumps_is_compact_utf8_and_survives_what_orjson_refuses() -> None:
    assert jsonio.dumps({"a": [1, "é"]}) == '{"a":[1,"é"]}'.encode()
    assert json.loads(jsonio.dumps({"text": "lone \ud800 surrogate"})) == {
        "text": "lone ? surrogate"
    }
    assert json.loads(jsonio.dumps({1: "non-string key"})) == {"1": "non-string key"}


def test_loads_accepts_what_python_accepts_and_refuses_the_rest() -> None:
    assert math.isnan(jsonio.loads("NaN"))
    assert jsonio.loads(str(2**70)) == 2**70
    with pytest.raises(ValueError):
        jsonio.loads("{not json")


def test_canonical_is_the_same_for_equal_values_in_any_key_order() -> None:
    one = jsonio.canonical([7, {"b": {"y": 1, "x": [2, 1]}, "a": "é"}])
    two = jsonio.canonical([7, {"a": "é", "b": {"x": [2, 1], "y": 1}}])
    assert one == two == '[7,{"a":"é","b":{"x":[2,1],"y":1}}]'.encode()
    assert jsonio.canonical({"x": [1, 2]}) != jsonio.canonical({"x": [2, 1]})
    # What orjson refuses (a key that is not a string) still gets one canonical form.
    assert jsonio.canonical({2: "b", 1: "a"}) == jsonio.canonical({1: "a", 2: "b"})
