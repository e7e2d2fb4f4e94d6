"""The fake Bedrock, driven by the official SDK (``boto3`` ``bedrock-runtime`` and ``bedrock``).

If botocore parses what the fake answers (JSON bodies, event streams, AWS error shapes) and the
fake accepts what botocore sends (SigV4 over percent-encoded model ids, the service model's
request shapes), the fake is a faithful partner for the adapter's tests
(``tests/inference/test_vendor_bedrock.py``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from botocore.exceptions import ClientError, EventStreamError

from tests.fakes.bedrock import (
    ACCESS_KEY_ID,
    GUARDRAIL_TEXT,
    REGION,
    RUNTIME_MODEL,
    SECRET_KEY,
    SESSION_TOKEN,
    TEMP_KEY_ID,
    FakeBedrock,
    InvalidRequest,
    check_shape,
    encode_message,
    event_message,
)

CLAUDE = "us.anthropic.claude-3-5-sonnet-20241022-v2:0"
PROFILE_ARN = f"arn:aws:bedrock:{REGION}:123456789012:inference-profile/{CLAUDE}"
TITAN = "amazon.titan-embed-text-v2:0"
HELLO = [{"role": "user", "content": [{"text": "hello there"}]}]
TOOLS = {
    "tools": [
        {
            "toolSpec": {
                "name": "get_weather",
                "inputSchema": {"json": {"type": "object", "properties": {"city": {}}}},
            }
        }
    ],
    "toolChoice": {"any": {}},
}


@pytest.fixture(scope="module")
def _server() -> Iterator[FakeBedrock]:
    with FakeBedrock() as server:
        yield server


@pytest.fixture
def bedrock(_server: FakeBedrock) -> FakeBedrock:
    _server.reset()
    return _server


def client(
    server: FakeBedrock,
    service: str = "bedrock-runtime",
    *,
    key_id: str = ACCESS_KEY_ID,
    secret: str = SECRET_KEY,
    token: str | None = None,
) -> Any:
    """A boto3 client pointed at the fake, without retries (a failure is seen once)."""
    return boto3.client(
        service,
        endpoint_url=server.url,
        region_name=REGION,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        aws_session_token=token,
        config=Config(retries={"total_max_attempts": 1}),
    )


def test_the_encoder_makes_frames_botocore_decodes_and_a_flipped_bit_fails_its_crc():
    frames = event_message("messageStart", {"role": "assistant"}) + encode_message(
        {":message-type": "event", ":event-type": "metadata"}, b"{}"
    )
    buffer = EventStreamBuffer()
    buffer.add_data(frames[:7])  # a partial prelude yields nothing yet
    assert list(buffer) == []
    buffer.add_data(frames[7:])
    first, second = list(buffer)
    assert first.headers[":event-type"] == "messageStart"
    assert json.loads(first.payload)["role"] == "assistant"
    assert second.headers == {":message-type": "event", ":event-type": "metadata"}
    corrupt = bytearray(frames)
    corrupt[20] ^= 1
    broken = EventStreamBuffer()
    broken.add_data(bytes(corrupt))
    with pytest.raises(ChecksumMismatch):
        list(broken)


def test_converse_echoes_and_reports_usage_with_cache_reads(bedrock):
    bedrock.cache_read_tokens, bedrock.cache_write_tokens = 3, 1
    out = client(bedrock).converse(
        modelId=CLAUDE,
        messages=HELLO,
        system=[{"text": "be brief"}],
        inferenceConfig={"maxTokens": 50, "temperature": 0.2, "topP": 0.9, "stopSequences": ["x"]},
    )
    assert out["output"]["message"]["content"] == [{"text": "Echo: hello there"}]
    assert out["stopReason"] == "end_turn"
    assert out["usage"] == {
        "inputTokens": 4,
        "outputTokens": 3,
        "totalTokens": 11,
        "cacheReadInputTokens": 3,
        "cacheWriteInputTokens": 1,
    }
    sent = bedrock.requests[-1]
    # botocore percent-encodes the id's ':' and the fake verified its signature over that path
    assert sent["path"] == "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse"
    assert sent["model"] == CLAUDE and sent["auth"] == "sigv4"
    assert sent["body"]["inferenceConfig"]["maxTokens"] == 50


def test_an_arn_model_id_and_temporary_credentials_are_accepted(bedrock):
    out = client(bedrock, key_id=TEMP_KEY_ID, token=SESSION_TOKEN).converse(
        modelId=PROFILE_ARN, messages=HELLO
    )
    assert out["output"]["message"]["content"][0]["text"] == "Echo: hello there"
    assert bedrock.requests[-1]["model"] == PROFILE_ARN
    assert "%2F" in bedrock.requests[-1]["path"]  # the ARN's '/' stays inside one path label


def test_a_wrong_secret_or_a_missing_session_token_is_an_invalid_signature(bedrock):
    with pytest.raises(ClientError) as info:
        client(bedrock, secret="not-the-secret").converse(modelId=CLAUDE, messages=HELLO)
    assert info.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError) as info:
        client(bedrock, key_id=TEMP_KEY_ID).converse(modelId=CLAUDE, messages=HELLO)
    assert info.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert bedrock.requests == []


def test_converse_stream_is_an_event_stream_botocore_iterates(bedrock):
    bedrock.cache_read_tokens = 2
    out = client(bedrock).converse_stream(modelId=CLAUDE, messages=HELLO)
    events = list(out["stream"])
    assert list(events[0]) == ["messageStart"] and events[0]["messageStart"]["role"] == "assistant"
    text = "".join(
        e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e
    )
    assert text == "Echo: hello there"
    assert events[-2] == {"messageStop": {"stopReason": "end_turn"}}
    assert events[-1]["metadata"]["usage"]["cacheReadInputTokens"] == 2
    assert events[-1]["metadata"]["usage"]["outputTokens"] == 3


def test_tools_plain_and_streamed_and_the_tool_result_round_trip(bedrock):
    runtime = client(bedrock)
    out = runtime.converse(modelId=CLAUDE, messages=HELLO, toolConfig=TOOLS)
    assert out["stopReason"] == "tool_use"
    use = out["output"]["message"]["content"][0]["toolUse"]
    assert use["name"] == "get_weather" and use["input"] == {"city": "Paris"}
    events = list(
        runtime.converse_stream(modelId=CLAUDE, messages=HELLO, toolConfig=TOOLS)["stream"]
    )
    start = next(e["contentBlockStart"] for e in events if "contentBlockStart" in e)
    assert start["start"]["toolUse"]["name"] == "get_weather"
    arguments = "".join(
        e["contentBlockDelta"]["delta"]["toolUse"]["input"]
        for e in events
        if "contentBlockDelta" in e
    )
    assert json.loads(arguments) == {"city": "Paris"}
    followup = [
        *HELLO,
        {"role": "assistant", "content": [{"toolUse": use}]},
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": use["toolUseId"], "content": [{"text": "sunny"}]}}
            ],
        },
    ]
    out = runtime.converse(modelId=CLAUDE, messages=followup, toolConfig=TOOLS)
    assert out["output"]["message"]["content"] == [{"text": "Echo: sunny"}]


def test_images_travel_as_base64_bytes_and_json_output_is_output_config(bedrock):
    png = b"\x89PNG\r\n\x1a\nfake"
    image = {"image": {"format": "png", "source": {"bytes": png}}}
    runtime = client(bedrock)
    out = runtime.converse(
        modelId=CLAUDE, messages=[{"role": "user", "content": [{"text": "what is this"}, image]}]
    )
    assert out["output"]["message"]["content"][0]["text"] == "Echo: what is this"
    assert out["usage"]["inputTokens"] == 3 + 85
    assert bedrock.requests[-1]["body"]["messages"][0]["content"][1]["image"]["source"] == {
        "bytes": "iVBORw0KGgpmYWtl"
    }
    text_format = {
        "type": "json_schema",
        "structure": {"jsonSchema": {"schema": json.dumps({"type": "object"}), "name": "x"}},
    }
    out = runtime.converse(modelId=CLAUDE, messages=HELLO, outputConfig={"textFormat": text_format})
    assert json.loads(out["output"]["message"]["content"][0]["text"]) == {"ok": True}


def test_a_guardrail_intervention_is_a_200_with_its_stop_reason(bedrock):
    bedrock.guardrail = True
    out = client(bedrock).converse(modelId=CLAUDE, messages=HELLO)
    assert out["stopReason"] == "guardrail_intervened"
    assert out["output"]["message"]["content"] == [{"text": GUARDRAIL_TEXT}]


@pytest.mark.parametrize(
    ("failure", "code", "status"),
    [
        (429, "ThrottlingException", 429),
        ("ServiceQuotaExceededException", "ServiceQuotaExceededException", 400),
        ("ModelNotReadyException", "ModelNotReadyException", 429),
        (400, "ValidationException", 400),
        (403, "AccessDeniedException", 403),
        (404, "ResourceNotFoundException", 404),
        (408, "ModelTimeoutException", 408),
        (500, "InternalServerException", 500),
        (503, "ServiceUnavailableException", 503),
    ],
)
def test_errors_are_client_errors_with_the_service_models_codes(bedrock, failure, code, status):
    bedrock.fail_statuses = [failure]
    with pytest.raises(ClientError) as info:
        client(bedrock).converse(modelId=CLAUDE, messages=HELLO)
    assert info.value.response["Error"]["Code"] == code
    assert info.value.response["Error"]["Message"] == f"fake failure ({code})"
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == status


def test_a_stream_exception_event_is_an_event_stream_error(bedrock):
    bedrock.stream_fail = "throttlingException"
    stream = client(bedrock).converse_stream(modelId=CLAUDE, messages=HELLO)["stream"]
    received = []
    with pytest.raises(EventStreamError) as info:
        for event in stream:
            received.append(event)
    assert received == [{"messageStart": {"role": "assistant"}}]
    assert info.value.response["Error"]["Code"] == "throttlingException"


def test_the_fake_refuses_what_the_service_model_or_converse_forbids(bedrock):
    # botocore checks types and required members, not Converse's turn order: the fake does
    with pytest.raises(ClientError) as info:
        client(bedrock).converse(
            modelId=CLAUDE, messages=[{"role": "assistant", "content": [{"text": "hi"}]}]
        )
    assert info.value.response["Error"]["Code"] == "ValidationException"
    assert "start with a user message" in info.value.response["Error"]["Message"]
    shape = RUNTIME_MODEL.operation_model("Converse").input_shape
    with pytest.raises(InvalidRequest, match="extraneous key"):
        check_shape(shape, {"messages": HELLO, "max_tokens": 5}, "request")
    with pytest.raises(InvalidRequest, match="not one of"):
        check_shape(shape, {"messages": [{"role": "tool", "content": []}]}, "request")


def test_titan_embeddings_through_invoke_model(bedrock):
    out = client(bedrock).invoke_model(
        modelId=TITAN,
        body=json.dumps({"inputText": "two words", "dimensions": 256}),
        contentType="application/json",
        accept="application/json",
    )
    body = json.loads(out["body"].read())
    assert len(body["embedding"]) == 256 and body["inputTextTokenCount"] == 2
    assert abs(sum(v * v for v in body["embedding"]) - 1) < 1e-9
    assert bedrock.requests[-1]["path"] == "/model/amazon.titan-embed-text-v2%3A0/invoke"
    with pytest.raises(ClientError) as info:
        client(bedrock).invoke_model(
            modelId=TITAN, body=io.BytesIO(b'{"inputText": "x", "dimensions": 7}')
        )
    assert info.value.response["Error"]["Code"] == "ValidationException"


def test_the_control_plane_lists_foundation_models_and_every_page_of_profiles(bedrock):
    control = client(bedrock, "bedrock")
    models = control.list_foundation_models()["modelSummaries"]
    assert [m["modelId"] for m in models] == bedrock.foundation_models
    pages = control.get_paginator("list_inference_profiles").paginate()
    ids = [p["inferenceProfileId"] for page in pages for p in page["inferenceProfileSummaries"]]
    assert ids == bedrock.inference_profiles
    listed = [r for r in bedrock.requests if r["operation"] == "ListInferenceProfiles"]
    assert len(listed) == len(bedrock.inference_profiles)  # one profile a page: pagination works
    with pytest.raises(ClientError) as info:
        client(bedrock, "bedrock", secret="wrong").list_foundation_models()
    assert info.value.response["Error"]["Code"] == "InvalidSignatureException"
