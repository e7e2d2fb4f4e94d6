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


@pytest.mark.django_db
def test_jsonb_text_stores_nul_as_the_replacement_character_and_nothing_else_changes() -> None:
    """PostgreSQL's jsonb refuses ``\\u0000``; an escaped backslash before ``u0000`` is text."""
    from django.db import connection

    from infra.jsonio import jsonb_text

    value = {"k\x00": ["a\x00b", "a\\u0000b", "\\\x00", "\ud800"]}
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb", [jsonb_text(value)])
        stored = json.loads(cursor.fetchone()[0])
    assert stored == {"k\ufffd": ["a\ufffdb", "a\\u0000b", "\\\ufffd", "?"]}
