"""``infrai-moderation-minilm``: a nearest-neighbour classifier over OpenAI's moderation categories.

Text is embedded with all-MiniLM-L6-v2 and compared with labelled exemplars
(``moderation_exemplars``). A category's score is the similarity-weighted share of the ``k``
nearest exemplars that carry the category (a soft k-NN vote, harmless exemplars included), so
scores lie in [0, 1]. One extra, implicit harmless neighbour with a fixed "background"
similarity votes in every softmax: text that is not clearly close to any violating exemplar
stays harmless instead of inheriting the label of a distant nearest neighbour.

Calibration runs when the model loads, on the exemplars themselves (leave-one-out): the
background similarity and the flagging threshold are chosen together to maximise F1 of
"flagged" against "has any category".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .embeddings import Encoder
from .moderation_exemplars import CATEGORIES, EXEMPLARS

NEIGHBOURS = 8
SHARPNESS = 20.0  # softmax temperature 1/20 over cosine similarities
THRESHOLD_BOUNDS = (0.3, 0.7)
BACKGROUND_GRID = tuple(step / 100 for step in range(20, 61, 5))


@dataclass(frozen=True)
class ModerationResult:
    """Scores in [0, 1] per category and the booleans derived from the calibrated threshold."""

    category_scores: dict[str, float]
    categories: dict[str, bool]

    @property
    def flagged(self) -> bool:
        """True when any category is over the threshold."""
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


def f1_at(peak: torch.Tensor, positive: torch.Tensor, threshold: float) -> float:
    """F1 of ``peak >= threshold`` against ``positive``."""
    predicted = peak >= threshold
    tp = int((predicted & positive).sum())
    fp = int((predicted & ~positive).sum())
    fn = int((~predicted & positive).sum())
    return 2 * tp / max(1, 2 * tp + fp + fn)


def calibrate(similarities: torch.Tensor, labels: torch.Tensor) -> tuple[float, float, float]:
    """``(background, threshold, f1)`` maximising leave-one-out F1 of "flagged".

    ``similarities`` is exemplar × exemplar with the diagonal already masked. Thresholds are
    searched within ``THRESHOLD_BOUNDS``; ties prefer a threshold nearer 0.5, then a higher
    background (the more conservative choice about flagging).
    """
    positive = labels.sum(dim=1) > 0
    low, high = THRESHOLD_BOUNDS
    best = (0.0, 0.5, -1.0)
    for background in BACKGROUND_GRID:
        peak = knn_scores(similarities, labels, background).max(dim=1).values
        for step in range(round(low * 100), round(high * 100) + 1):
            threshold = step / 100
            f1 = f1_at(peak, positive, threshold)
            better_tie = f1 == best[2] and abs(threshold - 0.5) <= abs(best[1] - 0.5)
            if f1 > best[2] or better_tie:
                best = (background, threshold, f1)
    return best


class ModerationClassifier:
    """Exemplar embeddings, their label matrix and the calibrated threshold."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        texts = [text for text, _ in EXEMPLARS]
        self.exemplars = encoder.encode_ids([encoder.tokenize(t) for t in texts])
        self.labels = torch.tensor(
            [[1.0 if c in cats else 0.0 for c in CATEGORIES] for _, cats in EXEMPLARS]
        )
        similarities = self.exemplars @ self.exemplars.T
        similarities.fill_diagonal_(-1.0)
        self.background, self.threshold, self.calibration_f1 = calibrate(similarities, self.labels)

    def classify(self, embeddings: torch.Tensor) -> list[ModerationResult]:
        """One result per row of ``embeddings`` (L2-normalised MiniLM vectors)."""
        scores = knn_scores(embeddings @ self.exemplars.T, self.labels, self.background)
        results = []
        for row in scores.tolist():
            category_scores = {c: round(float(s), 6) for c, s in zip(CATEGORIES, row, strict=True)}
            flags = {c: s >= self.threshold for c, s in category_scores.items()}
            results.append(ModerationResult(category_scores, flags))
        return results
