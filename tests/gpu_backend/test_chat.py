"""Chat completions on the real SmolLM2 (CPU): streaming, determinism, parameters, batching."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from gpu_backend.chat_model import current_copy, source_fingerprint
from gpu_backend.locate import smollm2_gguf
from tests.gpu import TEST_DEFAULT_MAX_TOKENS
from tests.gpu_backend.conftest import model_cache_dir
from tests.gpu_backend.test_metrics import scrape

MODEL = "SmolLM2-135M-Instruct"
COUNT = [{"role": "user", "content": "Count from 1 to 20, one number per line."}]
STORY = [{"role": "user", "content": "Tell me a short story about a dragon."}]


def chat(client: openai.OpenAI, messages: list[dict[str, str]], **params: Any) -> Any:
    """One non-streaming completion."""
    return client.chat.completions.create(model=MODEL, messages=messages, **params)  # type: ignore[arg-type]


def test_completion_is_openai_shaped_with_exact_usage(client: openai.OpenAI) -> None:
    result = chat(client, COUNT, max_tokens=6)
    # The copy the backend loaded (the cache dir's or the prebuilt one).
    loaded = current_copy(model_cache_dir(), source_fingerprint(smollm2_gguf()))
    assert loaded is not None
    tokenizer = AutoTokenizer.from_pretrained(loaded)
    prompt_ids: Any = tokenizer.apply_chat_template(
        COUNT, add_generation_prompt=True, tokenize=True
    )
    prompt_ids = prompt_ids if isinstance(prompt_ids, list) else prompt_ids["input_ids"]

    assert result.id.startswith("chatcmpl-")
    assert result.object == "chat.completion"
    assert result.model == MODEL
    assert result.created > 0
    choice = result.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason == "length"
    assert result.usage is not None
    assert result.usage.prompt_tokens == len(prompt_ids)
    assert result.usage.completion_tokens == 6
    assert result.usage.total_tokens == len(prompt_ids) + 6
    assert len(tokenizer.encode(choice.message.content)) <= 6


def stream_events(http: httpx.Client, body: dict[str, Any]) -> list[str]:
    """The raw ``data:`` payloads of an SSE response, in order."""
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [
            line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")
        ]


def test_streaming_sends_one_chunk_per_token_and_ends_with_done(
    http: httpx.Client, client: openai.OpenAI
) -> None:
    body = {"model": MODEL, "messages": COUNT, "max_tokens": 12, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    events = stream_events(http, body)

    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == MODEL for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = [c["choices"][0]["delta"]["content"] for c in chunks[1:] if c["choices"]
               and c["choices"][0]["delta"].get("content")]  # fmt: skip
    assert len(content) >= 5, "tokens must arrive as separate chunks"
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] == "length" and all(f is None for f in finish[:-1])
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 12
    # The first chunk reports the prompt (what a client that stops early still knows), no other.
    assert chunks[0]["usage"]["prompt_tokens"] == usage_chunk["usage"]["prompt_tokens"]
    assert chunks[0]["usage"]["completion_tokens"] == 0
    assert all(c["usage"] is None for c in chunks[1:-1])
    # The streamed text is exactly the non-streamed greedy text, and usage agrees.
    whole = chat(client, COUNT, max_tokens=12)
    assert "".join(content) == whole.choices[0].message.content
    assert usage_chunk["usage"]["prompt_tokens"] == whole.usage.prompt_tokens


def test_stream_without_include_usage_has_no_usage_key(http: httpx.Client) -> None:
    events = stream_events(
        http, {"model": MODEL, "messages": COUNT, "max_tokens": 3, "stream": True}
    )
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]"
    assert all("usage" not in c for c in chunks)


def test_greedy_is_reproducible_when_temperature_is_absent(client: openai.OpenAI) -> None:
    first = chat(client, STORY, max_tokens=12).choices[0].message.content
    second = chat(client, STORY, max_tokens=12).choices[0].message.content
    explicit_zero = chat(client, STORY, max_tokens=12, temperature=0).choices[0].message.content
    assert first == second == explicit_zero


def test_same_seed_same_sample_and_other_seeds_differ(client: openai.OpenAI) -> None:
    def sample(seed: int) -> str:
        result = chat(client, STORY, max_tokens=8, temperature=1.0, seed=seed)
        return str(result.choices[0].message.content)

    reference = sample(42)
    assert sample(42) == reference
    assert any(sample(seed) != reference for seed in (1, 2))


def test_top_k_one_and_tiny_top_p_reduce_sampling_to_greedy(client: openai.OpenAI) -> None:
    greedy = chat(client, STORY, max_tokens=10).choices[0].message.content
    top_k = chat(client, STORY, max_tokens=10, temperature=1.5, seed=5, extra_body={"top_k": 1})
    top_p = chat(client, STORY, max_tokens=10, temperature=1.5, seed=5, top_p=1e-9)
    assert top_k.choices[0].message.content == greedy
    assert top_p.choices[0].message.content == greedy


def test_repetition_penalty_changes_greedy_output(client: openai.OpenAI) -> None:
    plain = chat(client, COUNT, max_tokens=16).choices[0].message.content
    penalised = chat(client, COUNT, max_tokens=16, extra_body={"repetition_penalty": 2.0})
    assert penalised.choices[0].message.content != plain


def test_stop_string_cuts_the_greedy_text_exactly(client: openai.OpenAI) -> None:
    full = str(chat(client, COUNT, max_tokens=16).choices[0].message.content)
    stop = full.split()[2]  # a word from the middle of what the model says anyway
    cut = chat(client, COUNT, max_tokens=16, stop=[stop, "zzz-never"])
    assert cut.choices[0].message.content == full[: full.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_logprobs_and_n_choices(client: openai.OpenAI) -> None:
    result = chat(client, STORY, max_tokens=5, logprobs=True, top_logprobs=3)
    entries = result.choices[0].logprobs.content
    assert len(entries) == 5
    for entry in entries:
        assert len(entry.top_logprobs) == 3
        assert entry.logprob <= 0
        assert entry.token == entry.top_logprobs[0].token  # greedy picks the most likely token
    many = chat(client, STORY, max_tokens=6, n=3, temperature=1.0, seed=11)
    assert [c.index for c in many.choices] == [0, 1, 2]
    assert [c.finish_reason for c in many.choices] == ["length"] * 3
    assert many.usage.completion_tokens == 18  # the prompt is counted once, completions summed
    assert len({c.message.content for c in many.choices}) > 1  # each choice samples on its own


def test_concurrent_requests_share_decode_steps(http: httpx.Client, client: openai.OpenAI) -> None:
    before = http.get("/stats").json()["chat"]
    solo = chat(client, COUNT, max_tokens=16).choices[0].message.content
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: chat(client, COUNT, max_tokens=16), range(4)))
    after = http.get("/stats").json()["chat"]

    assert after["max_batch_size"] >= 2
    assert after["batched_steps"] > before["batched_steps"]
    assert after["sequences"] - before["sequences"] == 5
    # Batched greedy decoding computes what a lone sequence computes.
    assert all(r.choices[0].message.content == solo for r in results)


@pytest.mark.parametrize(
    ("params", "status", "param"),
    [
        ({"frequency_penalty": 0.5}, 400, "frequency_penalty"),
        ({"presence_penalty": 1}, 400, "presence_penalty"),
        ({"temperature": 2.5}, 400, "temperature"),
        ({"repetition_penalty": 3}, 400, "repetition_penalty"),
        ({"max_tokens": 0}, 400, "max_tokens"),
        ({"max_tokens": 9000}, 400, "max_tokens"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools"),
        ({"stream_options": {"include_usage": True}}, 400, "stream_options"),
        ({"bogus": 1}, 400, "bogus"),
        ({"model": "no-such-model"}, 404, "model"),
        ({"model": "all-MiniLM-L6-v2"}, 400, "model"),
    ],
)
def test_bad_requests_get_openai_errors(
    http: httpx.Client, params: dict[str, Any], status: int, param: str
) -> None:
    response = http.post("/v1/chat/completions", json={"model": MODEL, "messages": COUNT, **params})
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert error["param"] == param


def test_penalty_rule_message_is_the_specs(http: httpx.Client) -> None:
    response = http.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": COUNT, "frequency_penalty": 0.5}
    )
    assert response.json()["error"]["message"] == (
        "Invalid value for 'frequency_penalty': 0.5. This deployment does not implement "
        "'frequency_penalty', so only 0 is accepted. "
        "Use 'repetition_penalty' to penalize repetition."
    )
    zero = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": COUNT, "frequency_penalty": 0, "max_tokens": 1},
    )
    assert zero.status_code == 200


def test_image_input_is_refused(http: httpx.Client) -> None:
    parts = [{"type": "text", "text": "What is this?"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]  # fmt: skip
    response = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": parts}]},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unsupported_content"


# --- cancellation: a client that leaves frees its slot at once ---------------------------------

# A generation that never ends by itself: end-of-turn banned, long cap (minutes of decoding).
ENDLESS = {
    "model": MODEL,
    "messages": STORY,
    "max_tokens": 4000,
    "temperature": 1.0,
    "logit_bias": {"0": -100, "2": -100},  # <|endoftext|>, <|im_end|>
}


def batch(http: httpx.Client) -> tuple[float, float]:
    """The chat engine's running batch size and queue depth (``/metrics``)."""
    metrics = scrape(http)
    return (
        metrics[("infrai_gpu_backend_batch_size", MODEL)],
        metrics[("infrai_gpu_backend_queue_depth", MODEL)],
    )


def generated(http: httpx.Client) -> int:
    return int(http.get("/stats").json()["chat"]["tokens_generated"])


def wait_until(condition: Callable[[], bool], bound_s: float = 20.0) -> None:
    """Poll ``condition`` until true; fail after ``bound_s`` (a bound on waiting, not a speed
    assertion: the engine drops a cancelled sequence at its next step, ~0.1 s here)."""
    deadline = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < deadline, "still generating for a client that is gone"
        time.sleep(0.05)


def assert_idle_and_stopped(http: httpx.Client) -> None:
    """The batch is empty and stays empty: no token is generated for nobody afterwards."""
    wait_until(lambda: batch(http) == (0, 0))
    after = generated(http)
    time.sleep(0.5)  # several decode steps' worth: a leftover sequence would add tokens
    assert generated(http) == after and batch(http) == (0, 0)


def test_a_non_streamed_generation_stops_when_its_client_disconnects(
    http: httpx.Client, backend_url: str
) -> None:
    host, port = backend_url.removeprefix("http://").split(":")
    payload = json.dumps(ENDLESS).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            + f"\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        wait_until(lambda: batch(http)[0] >= 1)  # decoding for this client now
        start = generated(http)
        wait_until(lambda: generated(http) > start)
    assert_idle_and_stopped(http)
    # The next call runs alone (batch of one) and answers in full.
    answer = http.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": COUNT, "max_tokens": 8}
    ).json()
    assert answer["usage"]["completion_tokens"] == 8


def test_a_streamed_generation_stops_when_its_client_disconnects(
    http: httpx.Client, backend_url: str
) -> None:
    with httpx.stream(
        "POST", backend_url + "/v1/chat/completions", json={**ENDLESS, "stream": True}, timeout=60
    ) as response:
        received = 0
        for line in response.iter_lines():
            received += line.startswith("data: ")
            if received == 4:
                break
    assert_idle_and_stopped(http)


def test_a_request_without_max_tokens_gets_the_default_output_limit(
    http: httpx.Client, backend_url: str
) -> None:
    """Never the whole context: the backend's default (``--default-max-tokens``, 512 unless
    set; the session's backend sets a small one) bounds a request that sets no cap — seen here
    on the stream's own end, cut at ``length``."""
    body = {k: v for k, v in ENDLESS.items() if k != "max_tokens"}
    chunks = [json.loads(e) for e in stream_events(http, {
        **body, "stream": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "Hi"}],
    })[:-1]]  # fmt: skip
    assert chunks[-1]["usage"]["completion_tokens"] == TEST_DEFAULT_MAX_TOKENS
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"


def test_client_disconnect_stops_generation(http: httpx.Client, backend_url: str) -> None:
    before = http.get("/stats").json()["chat"]["tokens_generated"]
    body = {"model": MODEL, "messages": STORY, "max_tokens": 200, "stream": True}
    with httpx.stream(
        "POST", backend_url + "/v1/chat/completions", json=body, timeout=60
    ) as response:
        received = 0
        for line in response.iter_lines():
            received += line.startswith("data: ")
            if received == 4:
                break
    settled, previous = 0, -1
    for _ in range(100):  # until the counter stops moving (the engine dropped the sequence)
        current = http.get("/stats").json()["chat"]["tokens_generated"]
        settled = settled + 1 if current == previous else 0
        if settled == 3:
            break
        previous = current
        time.sleep(0.1)
    assert previous - before < 50, "generation must stop soon after the client leaves"
