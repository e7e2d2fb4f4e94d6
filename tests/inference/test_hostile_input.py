"""Hostile input on ``/v1`` against the production server (uvicorn): every refusal is cheap,
early, OpenAI-shaped, and carries the request id the SDKs expose.

Raw sockets where the point is what the server does *before* the body arrives: a test that
gets its answer without having sent the body proves the body was never needed.
"""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from accounts import keys
from accounts.models import ApiKey
from billing.models import Hold, LedgerEntry
from config.errors import InvalidRequest
from inference import multipart
from inference.http import MAX_JSON_DEPTH, json_too_deep

GIB = 1024**3


def _connect(api_base: str) -> socket.socket:
    parts = urlsplit(api_base)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    return sock


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one response (``Content-Length`` framed)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        body += chunk
    return status, headers, body[:length]


def _head(path: str, key: str | None, extra: str) -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
        f"Content-Type: application/json\r\n{extra}\r\n"
    ).encode()


def _assert_openai_error(body: bytes, code: str) -> dict[str, object]:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert error["code"] == code
    return error


# --- body limits before reading ----------------------------------------------------------------
@pytest.mark.parametrize("with_key", [False, True])
def test_a_declared_10_gib_body_is_refused_before_a_byte_of_it_is_sent(
    issue_key, api_base, with_key
):
    key = issue_key() if with_key else None
    with _connect(api_base) as sock:
        sock.sendall(_head("/v1/chat/completions", key, f"Content-Length: {10 * GIB}\r\n"))
        status, headers, body = _read_response(sock)  # not one body byte was sent
        assert status == 413
        assert headers["connection"] == "close"
        assert headers["x-request-id"] == headers["x-infrai-request-id"]
        assert headers["x-request-id"].startswith("req_")
        _assert_openai_error(body, "request_too_large")
        assert sock.recv(1) == b""  # the server closed: the rest is never read


def test_a_chunked_body_is_refused_as_soon_as_its_count_passes_the_limit(
    issue_key, api_base, settings
):
    settings.INFRAI_MAX_BODY_BYTES = 4096
    with _connect(api_base) as sock:
        sock.sendall(_head("/v1/chat/completions", issue_key(), "Transfer-Encoding: chunked\r\n"))
        sent = 0
        for _ in range(5):  # 5 KiB of an endless body; its last chunk is never sent
            sock.sendall(b"400\r\n" + b"[" * 1024 + b"\r\n")
            sent += 1024
        status, headers, body = _read_response(sock)
    assert sent > settings.INFRAI_MAX_BODY_BYTES
    assert status == 413 and headers["connection"] == "close"
    _assert_openai_error(body, "request_too_large")
    assert not Hold.objects.exists()


def test_an_unknown_key_is_refused_without_reading_the_body(api_base):
    with _connect(api_base) as sock:
        sock.sendall(_head("/v1/chat/completions", "ifr_nope", "Content-Length: 100000\r\n"))
        status, _headers, body = _read_response(sock)
    assert status == 401
    _assert_openai_error(body, "invalid_api_key")


def test_an_unknown_path_is_refused_without_reading_the_body(issue_key, api_base):
    with _connect(api_base) as sock:
        sock.sendall(_head("/v1/nowhere", issue_key(), "Content-Length: 100000\r\n"))
        status, headers, body = _read_response(sock)
    assert status == 404 and headers["x-request-id"].startswith("req_")
    _assert_openai_error(body, "unknown_url")


# --- deeply nested JSON ------------------------------------------------------------------------
def test_depth_check_counts_nesting_not_brackets_in_strings():
    assert not json_too_deep(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH)
    assert json_too_deep(b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1))
    assert not json_too_deep(json.dumps({"s": "[" * 10_000, "t": '\\"{' * 1000}).encode())
    wide = json.dumps({"tools": [{"type": "function", "function": {"name": "f"}}] * 10_000})
    assert not json_too_deep(wide.encode())
    # [[],[[],[[],… : each level also holds an empty sibling (no long run of '[').
    assert json_too_deep(b"[[]," * 70 + b"[]" + b"]" * 70)
    assert not json_too_deep(b"[[]," * 60 + b"[]" + b"]" * 60)


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000,
     b"[" * 100_000 + b"]" * 100_000,
     b'{"model":"auto","messages":[{"role":"user","content":"hi"}],"tools":'
     + b"[" * 5000 + b"]" * 5000 + b"}",
     json.dumps({"model": "auto", "messages": [{"role": "user", "content": "hi"}],
                 "metadata": json.loads("[" * 70 + "]" * 70)}).encode()],
    ids=["unclosed", "balanced", "tools", "just-over"],
)  # fmt: skip
def test_deeply_nested_json_is_a_400_invalid_json(issue_key, api_base, body):
    response = httpx.post(
        api_base + "/chat/completions",
        content=body,
        headers={"authorization": f"Bearer {issue_key()}", "content-type": "application/json"},
    )
    assert response.status_code == 400, response.text
    error = _assert_openai_error(response.content, "invalid_json")
    assert "Traceback" not in response.text and "recursion" not in str(error["message"]).lower()
    assert response.headers["x-request-id"] == response.headers["x-infrai-request-id"]
    assert not Hold.objects.exists() and not LedgerEntry.objects.filter(amount_nanos__lt=0).exists()


def test_nested_tools_through_the_sdk_are_a_bad_request(issue_key, client_for):
    nested: object = {}
    for _ in range(200):  # what the SDK can still encode
        nested = {"x": nested}
    with pytest.raises(openai.BadRequestError) as info:
        client_for(issue_key()).chat.completions.create(
            model="auto",
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "function", "function": {"name": "f", "parameters": nested}}],
        )
    assert info.value.body["code"] == "invalid_json"
    assert info.value.request_id and info.value.request_id.startswith("req_")


# --- request ids and headers on every response -------------------------------------------------
def test_the_sdk_sees_the_request_id_on_success_and_on_errors(issue_key, client_for, settings):
    client = client_for(issue_key())
    raw = client.models.with_raw_response.list()
    assert raw.request_id == raw.headers["x-infrai-request-id"]
    assert raw.parse()._request_id == raw.request_id
    assert raw.headers["x-content-type-options"] == "nosniff"
    with pytest.raises(openai.NotFoundError) as info:
        client.get("/nope", cast_to=object)
    assert info.value.request_id == info.value.response.headers["x-infrai-request-id"]
    settings.INFRAI_MAX_BODY_BYTES = 64
    with pytest.raises(openai.APIStatusError) as info:
        client.embeddings.create(model="auto", input="x" * 1000)
    assert info.value.status_code == 413
    assert info.value.request_id and info.value.request_id.startswith("req_")
    with pytest.raises(openai.AuthenticationError) as info:
        client_for("ifr_wrong").models.list()
    assert info.value.request_id and info.value.request_id.startswith("req_")
    assert info.value.response.headers["x-content-type-options"] == "nosniff"


# --- daphne keeps working ----------------------------------------------------------------------
def test_daphne_still_serves_the_app(daphne_url, issue_key, transactional_db):
    client = openai.OpenAI(base_url=daphne_url + "/v1", api_key=issue_key(), max_retries=0)
    assert client.models.list().object == "list"
    assert httpx.get(daphne_url + "/healthz").status_code == 200
    big = httpx.post(
        daphne_url + "/v1/chat/completions",
        content=b"[" * 100_000,
        headers={"authorization": f"Bearer {issue_key()}"},
    )
    assert big.status_code == 400 and big.json()["error"]["code"] == "invalid_json"


# --- token estimates no key could ever admit --------------------------------------------------
def _key_with_tpm(issue_key, tokens_per_minute: int) -> str:
    key = issue_key()
    ApiKey.objects.filter(key_hash=keys.hash_key(key)).update(tokens_per_minute=tokens_per_minute)
    return key


def test_a_request_larger_than_the_keys_minute_is_a_400_not_a_retry(
    issue_key, client_for, fake_catalog
):
    client = client_for(_key_with_tpm(issue_key, 1000))
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="test-large", messages=[{"role": "user", "content": "hi"}], max_tokens=2000
        )
    assert "can never pass" in info.value.body["message"]
    assert info.value.response.headers["x-should-retry"] == "false"
    assert "retry-after" not in info.value.response.headers
    assert not Hold.objects.exists()
    # A request that fits the minute still passes.
    ok = client.chat.completions.create(
        model="test-large", messages=[{"role": "user", "content": "hi"}], max_tokens=100
    )
    assert ok.choices[0].message.content


@pytest.mark.parametrize("max_tokens", [10**30, 2**63, 2**64 + 1])
def test_astronomical_max_tokens_is_a_400_never_a_500(
    issue_key, api_base, fake_catalog, max_tokens
):
    response = httpx.post(
        api_base + "/chat/completions",
        content=json.dumps(
            {
                "model": "test-large",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": max_tokens,
            }
        ),
        headers={"authorization": f"Bearer {issue_key()}", "content-type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert response.headers.get("retry-after") is None
    assert not Hold.objects.exists()


# --- multipart bodies the parser refuses (every refusal a 400 naming ``file``) -----------------
def _upload_body(boundary: str, disposition: str = 'name="file"; filename="a.txt"') -> bytes:
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nassistants\r\n'
        f"--{boundary}\r\nContent-Disposition: form-data; {disposition}\r\n"
        f"Content-Type: text/plain\r\n\r\nhello\r\n--{boundary}--\r\n"
    ).encode()


HOSTILE_MULTIPART = {
    # python-multipart's constructor raises FormParserError past 256 characters.
    "a 300-character boundary": ("b" * 300, _upload_body("b" * 300)),
    "a 10,000-character boundary": ("b" * 10_000, _upload_body("b" * 10_000)),
    "an empty boundary": ("", _upload_body("x")),
    # RFC 2231 lets the part name its own codec: this one decodes to a lone surrogate.
    "a filename that decodes to a surrogate": (
        "x",
        _upload_body("x", "name=\"file\"; filename*=unicode_escape''%5Cud800.txt"),
    ),
    "a part header without a colon": ("x", b"--x\r\nContent-Disposition\r\n\r\nhi\r\n--x--\r\n"),
    "a body cut inside a part's headers": ("x", b"--x\r\nContent-Disposition: form-da"),
}


@pytest.mark.parametrize("path", ["/audio/transcriptions", "/files"])
@pytest.mark.parametrize("case", list(HOSTILE_MULTIPART))
def test_a_malformed_multipart_body_is_a_400_naming_file(issue_key, api_base, path, case):
    boundary, body = HOSTILE_MULTIPART[case]
    response = httpx.post(
        api_base + path,
        content=body,
        headers={
            "authorization": f"Bearer {issue_key()}",
            "content-type": f"multipart/form-data; boundary={boundary}",
        },
        timeout=30,
    )
    assert response.status_code == 400, response.text
    error = _assert_openai_error(response.content, "invalid_value")
    assert error["param"] == "file"
    assert error["type"] == "invalid_request_error"


def test_the_multipart_parser_raises_nothing_but_a_400_on_any_prefix_or_boundary():
    """Every prefix of a valid body, under boundaries from 1 to 300 characters and broken
    content types: parsed, or refused with ``InvalidRequest`` — never another exception."""
    outcomes = {"parsed": 0, "refused": 0}
    for boundary in ("x", "b" * 70, "b" * 256, "b" * 257, "b" * 300, "a b;c", "é"):
        body = _upload_body(boundary)
        content_types = [
            f"multipart/form-data; boundary={boundary}",
            f'multipart/form-data; boundary="{boundary}"; charset=\x00',
            "multipart/form-data; boundary",
            "multipart/form-data; boundary*=utf-8''%ff",
        ]
        for content_type in content_types:
            for end in range(0, len(body) + 1, 7):
                try:
                    multipart.parse(content_type, body[:end])
                    outcomes["parsed"] += 1
                except InvalidRequest as exc:
                    assert exc.param == "file", exc
                    outcomes["refused"] += 1
            try:
                multipart.parse(content_type, body)
                outcomes["parsed"] += 1
            except InvalidRequest:
                outcomes["refused"] += 1
    assert outcomes["parsed"] > 0 and outcomes["refused"] > 0, outcomes


@pytest.mark.parametrize(
    "name",
    ["55\U00094879G3", "a\r\nset-cookie: owned=1", "é", "\x00"],
    ids=["astral", "crlf", "latin-1", "nul"],
)
def test_a_hostile_field_name_in_reasoning_is_a_400_naming_it(
    issue_key, api_base, fake_catalog, name
):
    """A name the caller chose never reaches a response header (it once did, through the
    ignored-parameters header: a 500, no request id); OpenAI refuses an unknown field of
    ``reasoning``, and so does infrai, naming it."""
    body = {"model": "test-large", "input": "hi", "reasoning": {name: True, "summary": "auto"}}
    resp = httpx.post(
        api_base + "/responses",
        json=body,
        headers={"authorization": f"Bearer {issue_key()}"},
        timeout=30,
    )
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert (error["code"], error["param"]) == ("unknown_parameter", f"reasoning.{name}")
    assert resp.headers["x-infrai-request-id"]
    assert "set-cookie" not in resp.headers
    assert not fake_catalog["primary"].requests and not Hold.objects.exists()


def test_header_values_are_always_well_formed():
    """Whatever a value holds, the header stays one line of visible ASCII."""
    from inference.http import header_value

    assert header_value("reasoning.summary,top_k") == b"reasoning.summary,top_k"
    for hostile in ("a\r\nset-cookie: x=1", "55\U00094879", "é", "\x00\x7f"):
        encoded = header_value(hostile)
        assert all(0x20 <= b < 0x7F for b in encoded), encoded
        assert b"\r" not in encoded and b"\n" not in encoded
