"""Pure pieces of the backend, without a server: stop strings, detokenizing, sampling, forms."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest
import torch

from gpu_backend.cli import config_from_args
from gpu_backend.config import ENV_CPU_ENGINE, ENV_DEFAULT_MAX_TOKENS
from gpu_backend.errors import APIError
from gpu_backend.multipart import parse_form
from gpu_backend.sampling import (
    SamplingParams,
    apply_repetition_penalty,
    choose_token,
    filter_top_k_top_p,
    make_generator,
)
from gpu_backend.textstream import IncrementalDetokenizer, StopMatcher
from gpu_backend.transcription import Segment, Transcript, to_srt, to_vtt


def test_stop_matcher_holds_back_a_possible_stop_prefix() -> None:
    matcher = StopMatcher(("END",))
    assert matcher.feed("hello E") == "hello "
    assert matcher.feed("N") == ""
    assert matcher.feed("X") == "ENX"
    assert matcher.feed(" and EN") == " and "
    assert matcher.feed("D more") == ""
    assert matcher.stopped and matcher.flush() == ""


def test_stop_matcher_earliest_stop_wins_and_flush_releases_the_rest() -> None:
    matcher = StopMatcher(("world", "lo"))
    assert matcher.feed("hello world") == "hel"
    plain = StopMatcher(("zz",))
    assert plain.feed("abc z") == "abc "
    assert plain.flush() == "z"


class ByteDecoder:
    """A toy tokenizer: each id is one byte of UTF-8 (so characters can span tokens)."""

    def decode(self, token_ids: Any, skip_special_tokens: bool = True, **kwargs: Any) -> str:
        return bytes(token_ids).decode("utf-8", errors="replace")


def test_detokenizer_never_emits_half_a_character() -> None:
    detok = IncrementalDetokenizer(ByteDecoder())
    pieces = [detok.push(b) for b in "añb€".encode()]
    assert "\ufffd" not in "".join(pieces)
    assert "".join(pieces) == "añb€"
    assert pieces[1] == "" and pieces[2] == "ñ"  # the 2-byte ñ arrives with its second byte


def test_top_k_and_top_p_filters() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.isinf(filter_top_k_top_p(logits, 2, 1.0)).tolist() == [False, False, True, True]
    assert torch.isinf(filter_top_k_top_p(logits, 0, 0.7)).tolist() == [False, False, True, True]
    assert torch.isinf(filter_top_k_top_p(logits, 0, 0.5)).tolist() == [False, True, True, True]
    assert not torch.isinf(filter_top_k_top_p(logits, 0, 1.0)).any()


def test_repetition_penalty_pushes_seen_tokens_down() -> None:
    logits = torch.tensor([2.0, -1.0, 0.5])
    apply_repetition_penalty(logits, torch.tensor([0, 1]), 2.0)
    assert logits.tolist() == [1.0, -2.0, 0.5]


def test_choose_token_greedy_seeded_and_logprobs() -> None:
    logits = torch.tensor([0.0, 3.0, 1.0, 2.5])
    empty = torch.empty(0, dtype=torch.long)
    greedy = choose_token(
        logits, empty, SamplingParams(max_tokens=1, top_logprobs=2), make_generator(0)
    )
    assert greedy.token_id == 1
    assert greedy.logprob == pytest.approx(float(torch.log_softmax(logits, -1)[1]))
    assert [t for t, _ in greedy.top] == [1, 3]
    sampled = SamplingParams(max_tokens=1, temperature=1.0, seed=3)
    draws = [choose_token(logits, empty, sampled, make_generator(3)).token_id for _ in range(3)]
    assert len(set(draws)) == 1  # same seed, same draw
    biased = SamplingParams(max_tokens=1, logit_bias={0: 100.0})
    assert choose_token(logits, empty, biased, make_generator(None)).token_id == 0


def test_multipart_reader_keeps_binary_files_and_repeated_fields() -> None:
    audio = b"RIFF\x00\xff\r\n--not-a-boundary\r\n" * 10
    request = httpx.Request(
        "POST", "http://x/",
        files={"file": ("a.wav", audio, "audio/wav")},
        data={"model": "whisper-tiny.en", "timestamp_granularities[]": ["word", "segment"]},
    )  # fmt: skip
    fields, files = parse_form(request.headers["content-type"], request.read())
    assert files == {"file": audio}
    assert fields == {"model": "whisper-tiny.en", "timestamp_granularities[]": ["word", "segment"]}
    with pytest.raises(APIError):
        parse_form("application/json", b"{}")


def test_subtitle_timestamps() -> None:
    segment = Segment(0, 0, 0.0, 3661.5, " Hi there.", [], 0.0, -0.1, 1.0, 0.0)
    transcript = Transcript("Hi there.", "english", 3661.5, [segment])
    assert to_srt(transcript) == "1\n00:00:00,000 --> 01:01:01,500\nHi there.\n"
    assert to_vtt(transcript) == "WEBVTT\n\n00:00:00.000 --> 01:01:01.500\nHi there.\n"
    assert math.isclose(segment.end, 3661.5)


def test_the_default_output_limit_is_small_and_settable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_DEFAULT_MAX_TOKENS, raising=False)
    monkeypatch.delenv(ENV_CPU_ENGINE, raising=False)
    assert config_from_args([]).default_max_tokens == 512
    assert config_from_args([]).cpu_engine == "auto"
    assert config_from_args(["--default-max-tokens", "64"]).default_max_tokens == 64
    monkeypatch.setenv(ENV_DEFAULT_MAX_TOKENS, "100")
    assert config_from_args([]).default_max_tokens == 100


def test_auto_runs_llama_cpp_only_where_it_is_installed_and_decodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpu_backend import backend

    assert backend.cpu_engine("transformers") == ("transformers", "as configured")
    monkeypatch.setattr(backend, "probe", lambda gguf: "llama-cpp-python is not installed")
    assert backend.cpu_engine("auto") == (
        "transformers",
        "auto: llama-cpp-python is not installed",
    )
    monkeypatch.setattr(backend, "probe", lambda gguf: None)
    assert backend.cpu_engine("auto")[0] == "llama-cpp"
