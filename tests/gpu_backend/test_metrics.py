"""``GET /metrics``: Prometheus text with readiness, batch size, queue depth and tokens/s."""

from __future__ import annotations

import re

import httpx

from gpu_backend.engine import TokenRate
from gpu_backend.metrics import Family, Sample, render

LINE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>-?[0-9.e+]+)$")


def scrape(http: httpx.Client) -> dict[tuple[str, str], float]:
    """``{(metric name, model label): value}`` of one scrape; every line must parse."""
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    values: dict[tuple[str, str], float] = {}
    for line in response.text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) infrai_gpu_backend_[a-z_]+ .+$", line), line
            continue
        match = LINE.match(line)
        assert match, line
        model = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))["model"]
        values[(match["name"], model)] = float(match["value"])
    return values


def test_metrics_report_readiness_and_count_the_tokens_of_a_completion(
    http: httpx.Client,
) -> None:
    before = scrape(http)
    assert before[("infrai_gpu_backend_model_ready", "SmolLM2-135M-Instruct")] == 1
    assert before[("infrai_gpu_backend_model_ready", "whisper-tiny.en")] == 1
    assert before[("infrai_gpu_backend_queue_depth", "SmolLM2-135M-Instruct")] >= 0
    assert ("infrai_gpu_backend_batch_size", "SmolLM2-135M-Instruct") in before
    body = {
        "model": "SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": "Count to ten."}],
        "max_tokens": 6,
    }
    usage = http.post("/v1/chat/completions", json=body).json()["usage"]
    after = scrape(http)
    generated = ("infrai_gpu_backend_generated_tokens_total", "SmolLM2-135M-Instruct")
    assert after[generated] - before[generated] >= usage["completion_tokens"]
    assert after[("infrai_gpu_backend_tokens_per_second", "SmolLM2-135M-Instruct")] > 0
    texts = ("infrai_gpu_backend_embedded_texts_total", "all-MiniLM-L6-v2")
    http.post("/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": ["a", "b"]})
    assert scrape(http)[texts] - after[texts] >= 2


def test_token_rate_counts_only_the_last_window() -> None:
    rate = TokenRate(window_s=10.0)
    rate.add(30, now=100.0)
    rate.add(20, now=105.0)
    assert rate.per_second(now=106.0) == 5.0
    assert rate.per_second(now=112.0) == 2.0  # the 30 tokens at t=100 left the window
    assert rate.per_second(now=200.0) == 0.0


def test_render_escapes_label_values_and_writes_integers_plainly() -> None:
    text = render([Family("x_total", "counter", "Help.", (Sample({"model": 'a"b\\c'}, 3.0),))])
    assert text == (
        "# HELP infrai_gpu_backend_x_total Help.\n"
        "# TYPE infrai_gpu_backend_x_total counter\n"
        'infrai_gpu_backend_x_total{model="a\\"b\\\\c"} 3\n'
    )
