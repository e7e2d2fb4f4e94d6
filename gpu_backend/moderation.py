"""``infrai-moderation-minilm``: a nearest-neighbour classifier over OpenAI's moderation categories.

Text is embedded with all-MiniLM-L6-v2 and compared with labelled exemplars
(``moderation_exemplars``). A category's score is the similarity-weighted share of the ``k``
nearest exemplars that carry the category (a soft k-NN vote, harmless exemplars included), so
scores lie in [0, 1]. One extra, implicit harmless neighbour with a fixed "background"
similarity votes in every softmax: text that is not clearly close to any violating exemplar
stays harmless instead of inheriting the label of a distant nearest neighbour.

The decision is taken in two steps. *Flagged* compares the "harmful" score (the share of the
vote held by violating exemplars of any category) with the threshold, so text whose violating
neighbours are split between categories is judged on all of them together, and text whose
neighbours are mostly harmless (the exemplars include harmless sentences about every
category's topic: wars, knives, medicine, sex education, "kill the process") is not flagged.
*Categories* of flagged text are the ones holding at least ``CATEGORY_SHARE`` of the harmful
vote, and always the highest-scoring one.

Calibration runs when the model loads, on the exemplars themselves (leave-one-out): the
background similarity and the flagging threshold are chosen together to maximise F-beta
(β = 0.7, so a false positive weighs about twice a miss) of "flagged" against "has any
category".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .embeddings import Encoder
from .moderation_exemplars import CATEGORIES, EXEMPLARS

NEIGHBOURS = 12
SHARPNESS = 10.0  # softmax temperature 1/10 over cosine similarities
CATEGORY_SHARE = 0.4  # a flagged text's categories: those with ≥ 40 % of its harmful vote
BETA = 0.7  # calibration maximises F-beta: a false positive costs about twice a miss (1/β²)
THRESHOLD_BOUNDS = (0.3, 0.7)
BACKGROUND_GRID = tuple(step / 100 for step in range(20, 61, 5))


@dataclass(frozen=True)
class ModerationResult:
    """Scores in [0, 1] per category and the booleans derived from the calibrated threshold."""

    category_scores: dict[str, float]
    categories: dict[str, bool]

    @property
    def flagged(self) -> bool:
        """True when any category is set (exactly when the harmful vote reached the threshold)."""
        return any(self.categories.values())


def knn_scores(
    similarities: torch.Tensor, labels: torch.Tensor, background: float, k: int = NEIGHBOURS
) -> torch.Tensor:
    """Soft k-NN vote: ``[n, exemplars]`` similarities and ``[exemplars, categories]`` 0/1 labels
    → ``[n, categories]`` scores in [0, 1]. An implicit harmless neighbour with similarity
    ``background`` joins every vote."""
    k = min(k, similarities.shape[1])
    top, index = torch.topk(similarities, k, dim=1)
    implicit = torch.full((top.shape[0], 1), background, dtype=top.dtype)
    weights = torch.softmax(torch.cat([top, implicit], dim=1) * SHARPNESS, dim=1)[:, :k]
    return torch.einsum("nk,nkc->nc", weights, labels[index])


def with_harmful(labels: torch.Tensor) -> torch.Tensor:
    """``labels`` plus a last column that is 1 for every exemplar carrying any category."""
    return torch.cat([labels, (labels.sum(dim=1, keepdim=True) > 0).to(labels.dtype)], dim=1)


def fbeta_at(
    peak: torch.Tensor, positive: torch.Tensor, threshold: float, beta: float = 1.0
) -> float:
    """F-beta of ``peak >= threshold`` against ``positive`` (``beta`` 1: F1; below 1 weighs
    precision more)."""
    predicted = peak >= threshold
    tp = int((predicted & positive).sum())
    fp = int((predicted & ~positive).sum())
    fn = int((~predicted & positive).sum())
    b2 = beta * beta
    return (1 + b2) * tp / max(1e-9, (1 + b2) * tp + b2 * fn + fp)


def calibrate(similarities: torch.Tensor, labels: torch.Tensor) -> tuple[float, float, float]:
    """``(background, threshold, f1)`` maximising leave-one-out F-beta (``BETA``) of "flagged";
    ``f1`` is the plain F1 at the chosen point.

    ``similarities`` is exemplar × exemplar with the diagonal already masked; ``labels`` the
    exemplars' category matrix. "Flagged" is the harmful vote at or over the threshold.
    Thresholds are searched within ``THRESHOLD_BOUNDS``; ties prefer a threshold nearer 0.5,
    then a higher background (the more conservative choice about flagging).
    """
    harmful_labels = with_harmful(labels)[:, -1:]
    positive = harmful_labels[:, 0] > 0
    low, high = THRESHOLD_BOUNDS
    best = (0.0, 0.5, -1.0)
    best_scores = torch.zeros(0)
    for background in BACKGROUND_GRID:
        harmful = knn_scores(similarities, harmful_labels, background)[:, 0]
        for step in range(round(low * 100), round(high * 100) + 1):
            threshold = step / 100
            score = fbeta_at(harmful, positive, threshold, BETA)
            better_tie = score == best[2] and abs(threshold - 0.5) <= abs(best[1] - 0.5)
            if score > best[2] or better_tie:
                best, best_scores = (background, threshold, score), harmful
    background, threshold, _ = best
    return background, threshold, fbeta_at(best_scores, positive, threshold)


def exemplar_cache_name(encoder: Encoder) -> str:
    """The file name of the exemplar embeddings for this encoder's device and dtype: a hash of the
    exemplar texts, the encoder's weights file and the dtype, so any change makes a new file."""
    texts = [text for text, _ in EXEMPLARS]
    weights = getattr(encoder.model, "name_or_path", "") or type(encoder.model).__name__
    key = json.dumps([texts, str(weights), encoder.spec.device.type, encoder.spec.dtype_name])
    return f"moderation-exemplars-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"


def exemplar_embeddings(encoder: Encoder, cache_dirs: Sequence[Path] = ()) -> torch.Tensor:
    """The exemplars' ``[n, 384]`` embeddings: read from the first of ``cache_dirs`` that holds
    them (the install step writes them to the prebuilt dir), else encoded (~10 s on a busy CPU)
    and saved to ``cache_dirs[0]`` (best effort) for the next start."""
    name = exemplar_cache_name(encoder)
    for directory in cache_dirs:
        # A missing, partial or foreign file is only a cache miss (torch.load raises many types).
        with contextlib.suppress(Exception):
            cached = torch.load(directory / name, map_location=encoder.spec.device)
            if isinstance(cached, torch.Tensor) and cached.shape[0] == len(EXEMPLARS):
                return cached
    texts = [text for text, _ in EXEMPLARS]
    embeddings = encoder.encode_ids([encoder.tokenize(t) for t in texts])
    if cache_dirs:
        save_atomically(embeddings, cache_dirs[0] / name)
    return embeddings


def save_atomically(tensor: torch.Tensor, path: Path) -> None:
    """``torch.save`` to a temporary sibling renamed into place (best effort: errors ignored)."""
    with contextlib.suppress(OSError, RuntimeError):
        path.parent.mkdir(parents=True, exist_ok=True)
        # torch names the archive after the file's stem: it must not start with a dot
        handle, staging = tempfile.mkstemp(prefix="staging-", suffix=".pt", dir=path.parent)
        os.close(handle)
        try:
            torch.save(tensor.cpu(), staging)
            os.chmod(staging, 0o644)
            os.replace(staging, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(staging)


class ModerationClassifier:
    """Exemplar embeddings, their label matrix and the calibrated threshold."""

    def __init__(self, encoder: Encoder, cache_dirs: Sequence[Path] = ()) -> None:
        self.encoder = encoder
        self.exemplars = exemplar_embeddings(encoder, cache_dirs)
        self.labels = torch.tensor(
            [[1.0 if c in cats else 0.0 for c in CATEGORIES] for _, cats in EXEMPLARS]
        )
        similarities = self.exemplars @ self.exemplars.T
        similarities.fill_diagonal_(-1.0)
        self.background, self.threshold, self.calibration_f1 = calibrate(similarities, self.labels)

    def classify(self, embeddings: torch.Tensor) -> list[ModerationResult]:
        """One result per row of ``embeddings`` (L2-normalised MiniLM vectors)."""
        votes = knn_scores(
            embeddings @ self.exemplars.T, with_harmful(self.labels), self.background
        )
        results = []
        for row in votes.tolist():
            *scores, harmful = row
            category_scores = {
                c: round(float(s), 6) for c, s in zip(CATEGORIES, scores, strict=True)
            }
            flagged = harmful >= self.threshold
            top = max(scores)
            flags = {
                c: flagged and (s >= CATEGORY_SHARE * harmful or s == top)
                for c, s in zip(CATEGORIES, scores, strict=True)
            }
            results.append(ModerationResult(category_scores, flags))
        return results
