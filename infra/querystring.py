"""Query values the platform refuses before any view sees them: 400 naming the parameter.

A query value reaches PostgreSQL as a filter (``?model=…``, ``?after=req_…``), a form field or a
stored string. PostgreSQL text cannot hold a NUL (``%00``: psycopg raises ``ValueError`` — a
500), and nothing can encode a lone UTF-16 surrogate as UTF-8 (``UnicodeEncodeError`` — a 500).
So a value or a name holding either is refused where the query string is parsed, once per
stack, not in each view:

- ``/v1`` (:mod:`inference.http`): :func:`unstorable_param` over the parsed query, 400
  ``invalid_value`` in the OpenAI shape;
- everything Django serves (the management API, the dashboard, billing, the admin):
  :class:`QueryValueMiddleware` over ``request.GET`` — the OpenAI-shaped 400 under ``/v1/``,
  a 400 page elsewhere.

Percent-decoding is the parsers' own (UTF-8, undecodable bytes become U+FFFD), so ``%ff`` is not
refused here: it arrives as U+FFFD, which PostgreSQL stores. The check costs one scan per value
and nothing for a request without a query string.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.template import engines
from django.utils.decorators import sync_and_async_middleware

from config.errors import InvalidRequest

_PAGE = """{% extends "base.html" %}
{% block title %}Bad request{% endblock %}
{% block content %}
<div class="error-page">
<p class="code" aria-hidden="true">400</p>
<h1>Bad request</h1>
<p>The query parameter <code data-param>{{ param }}</code> holds a character that cannot be
processed (a NUL character or invalid Unicode).</p>
<p><a class="button" href="/">Back to the dashboard</a></p>
</div>
{% endblock %}
"""


def encodable(text: str) -> bool:
    """Whether UTF-8 can encode ``text`` (it holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unstorable(text: str) -> bool:
    """Whether ``text`` holds a NUL or a character UTF-8 cannot encode (a lone surrogate)."""
    return "\x00" in text or not encodable(text)


def _shown(name: str) -> str:
    """A parameter's name as an error may carry it: a NUL as ``\\x00``, a lone surrogate as
    ``\\udc80``."""
    if not unstorable(name):
        return name
    return name.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def unstorable_param(params: Iterable[tuple[str, list[str]]]) -> str | None:
    """The name of the first parameter (``(name, values)`` pairs, as ``dict.items()`` of
    ``parse_qs`` or ``QueryDict.lists()``) whose name or any value is :func:`unstorable`, with
    such characters of the name escaped; ``None`` when every one is fine."""
    for name, values in params:
        if unstorable(name) or any(unstorable(value) for value in values):
            return _shown(name)
    return None


# Digits of the largest id a query value may name: 18 fit PostgreSQL's bigint (19 may not).
MAX_ID_DIGITS = 18


def query_id(value: str) -> int | None:
    """A database id given as a query value (``?project=12``), or ``None`` for anything else:
    only ASCII digits (``"²".isdigit()`` is true and ``int("²")`` raises), at most
    :data:`MAX_ID_DIGITS` of them (``int()`` refuses more than 4,300 digits with a
    ``ValueError``; PostgreSQL more than a bigint)."""
    if value.isascii() and value.isdigit() and len(value) <= MAX_ID_DIGITS:
        return int(value)
    return None


def query_value_error(param: str) -> InvalidRequest:
    """The 400 for an :func:`unstorable` query parameter."""
    return InvalidRequest(
        f"Invalid value for query parameter '{param}': it holds a NUL character or invalid "
        "Unicode.",
        param=param,
    )


@sync_and_async_middleware
def QueryValueMiddleware(get_response: Any) -> Any:
    """Refuses a request whose query string holds an :func:`unstorable` name or value before
    any view runs: under ``/v1/`` (the management API) the OpenAI-shaped 400, elsewhere a 400
    page naming the parameter. Sync and async alike (no thread hop under ASGI); a request
    without a query string costs one dictionary lookup."""

    def refused(request: HttpRequest) -> str | None:
        if not request.META.get("QUERY_STRING"):
            return None
        return unstorable_param(request.GET.lists())

    if iscoroutinefunction(get_response):

        async def amiddleware(request: HttpRequest) -> Any:
            param = refused(request)
            if param is None:
                return await get_response(request)
            # The page reads the session and the user (the database): not on the event loop.
            return await sync_to_async(refusal)(request, param)

        return amiddleware

    def middleware(request: HttpRequest) -> Any:
        param = refused(request)
        return get_response(request) if param is None else refusal(request, param)

    return middleware


def refusal(request: HttpRequest, param: str) -> HttpResponse:
    """The 400 :class:`QueryValueMiddleware` answers for ``param``."""
    if request.path.startswith("/v1/"):
        error = query_value_error(param)
        return JsonResponse(error.body(), status=error.status, headers=error.headers())
    page = engines["django"].from_string(_PAGE)
    return HttpResponseBadRequest(page.render({"param": param}, request))
