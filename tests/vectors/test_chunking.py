"""The chunker of OpenAI's vector-store surface (:mod:`vectors.chunking`): pure, no database."""

from __future__ import annotations

import itertools

import pytest

from config.errors import InvalidRequest
from inference import tokens
from vectors.chunking import chunk_file, chunk_text, windows
from vectors.openai_api import chunking_strategy


def _tokens(text: str) -> int:
    return tokens.count_text(text)


def test_windows_step_by_size_less_overlap_and_end_at_the_end() -> None:
    ids = list(range(10))
    assert windows(ids, 4, 1) == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    assert windows(ids, 4, 0) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert windows(ids, 20, 5) == [ids]
    assert windows([], 4, 1) == []


def test_short_paragraphs_are_packed_whole_into_one_chunk() -> None:
    text = "First paragraph here.\n\n  \nSecond one.\n\nThird."
    assert chunk_text(text, max_tokens=100, overlap=0) == [
        "First paragraph here.\n\nSecond one.\n\nThird."
    ]


def test_a_paragraph_that_does_not_fit_beside_the_last_starts_a_chunk_uncut() -> None:
    first = " ".join(["alpha"] * 60)
    second = " ".join(["beta"] * 60)
    chunks = chunk_text(f"{first}\n\n{second}", max_tokens=100, overlap=0)
    assert chunks == [first, second]


def test_a_paragraph_longer_than_a_chunk_is_cut_into_overlapping_windows() -> None:
    long = " ".join(f"w{i}" for i in range(300))
    size, overlap = 100, 30
    chunks = chunk_text(long, max_tokens=size, overlap=overlap)
    assert len(chunks) > 2
    assert all(_tokens(c) <= size for c in chunks)
    assert chunks[0].startswith("w0 ") and chunks[-1].endswith("w299")
    # Each window starts inside the one before it: the overlap repeats its tail.
    for before, after in itertools.pairwise(chunks):
        assert after.split()[0] in before.split()


def test_a_text_of_whitespace_has_no_chunks() -> None:
    assert chunk_text(" \n\n \t\n", max_tokens=100, overlap=0) == []


def test_a_file_is_chunked_from_its_utf8_text_without_nul_characters() -> None:
    chunks, why = chunk_file("caf\x00é\n\nbar".encode(), max_tokens=100, overlap=0, max_chunks=5)
    assert why is None and chunks == ["café\n\nbar"]


@pytest.mark.parametrize(
    ("content", "max_chunks", "why"),
    [
        (b"\xff\xfe\x00 not utf-8", 5, "The file is not UTF-8 text."),
        (b"", 5, "The file holds no text."),
        (b"\n\n \n", 5, "The file holds no text."),
        (" ".join(["word"] * 400).encode(), 2, "The file makes more than 2 chunks."),
    ],
)
def test_a_file_that_gives_no_usable_chunks_says_why(
    content: bytes, max_chunks: int, why: str
) -> None:
    assert chunk_file(content, max_tokens=100, overlap=0, max_chunks=max_chunks) == ([], why)


def _static(size: int, overlap: int = 0) -> dict[str, object]:
    return {
        "type": "static",
        "static": {"max_chunk_size_tokens": size, "chunk_overlap_tokens": overlap},
    }


def test_the_chunking_strategy_is_auto_or_static_within_openais_bounds() -> None:
    assert chunking_strategy(None) == (800, 400)
    assert chunking_strategy({"type": "auto"}) == (800, 400)
    assert chunking_strategy(_static(200, 100)) == (200, 100)
    with pytest.raises(InvalidRequest) as too_big:
        chunking_strategy(_static(5000))
    assert too_big.value.param == "chunking_strategy.static.max_chunk_size_tokens"
    with pytest.raises(InvalidRequest) as overlap:
        chunking_strategy(_static(200, 101))
    assert overlap.value.param == "chunking_strategy.static.chunk_overlap_tokens"
