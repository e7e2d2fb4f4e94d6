"""The moderation exemplars' embeddings are computed once and read back on the next start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gpu_backend.device import select_device
from gpu_backend.embeddings import Encoder, load_encoder
from gpu_backend.moderation import exemplar_cache_name, exemplar_embeddings
from gpu_backend.moderation_exemplars import EXEMPLARS


@pytest.fixture(scope="module")
def encoder() -> Iterator[Encoder]:
    yield load_encoder(select_device("cpu"))


def test_the_second_start_reads_the_embeddings_instead_of_encoding(
    encoder: Encoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = exemplar_embeddings(encoder, [tmp_path])
    assert first.shape == (len(EXEMPLARS), 384)
    assert (tmp_path / exemplar_cache_name(encoder)).is_file()

    def refuse(batch: list[list[int]]) -> torch.Tensor:
        raise AssertionError("encoded again although the cache holds the embeddings")

    monkeypatch.setattr(encoder, "encode_ids", refuse)
    assert torch.equal(exemplar_embeddings(encoder, [tmp_path / "empty", tmp_path]), first)


def test_a_damaged_cache_file_is_recomputed(encoder: Encoder, tmp_path: Path) -> None:
    (tmp_path / exemplar_cache_name(encoder)).write_bytes(b"not a tensor")
    embeddings = exemplar_embeddings(encoder, [tmp_path])
    assert embeddings.shape == (len(EXEMPLARS), 384)
    reread = torch.load(tmp_path / exemplar_cache_name(encoder))
    assert torch.equal(reread, embeddings)
