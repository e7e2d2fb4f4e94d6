"""``infrai-moderation-minilm``: a nearest-neighbour classifier over OpenAI's moderation categories.

Text is embedded with all-MiniLM-L6-v2 and compared with labelled exemplars
(``moderation_exemplars``). A category's score is the similarity-weighted share of the ``k``
nearest exemplars that carry the category (a soft k-NN vote, harmless exemplars included), so
scores lie in [0, 1]. The flagging threshold is calibrated when the model loads: leave-one-out
scores of the exemplars themselves, and the threshold that maximises F1 for "any category".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .embeddings import Encoder
from .moderation_exemplars import CATEGORIES, EXEMPLARS

NEIGHBOURS = 8
SHARPNESS = 20.0  # softmax temperature 1/20 over cosine similarities
THRESHOLD_BOUNDS = (0.3, 0.7)


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
    similarities: torch.Tensor, labels: torch.Tensor, k: int = NEIGHBOURS
) -> torch.Tensor:
    """Soft k-NN vote: ``[n, exemplars]`` similarities and ``[exemplars, categories]`` 0/1 labels
    → ``[n, categories]`` scores in [0, 1]."""
    k = min(k, similarities.shape[1])
    top, index = torch.topk(similarities, k, dim=1)
    weights = torch.softmax(top * SHARPNESS, dim=1)
    return torch.einsum("nk,nkc->nc", weights, labels[index])


def best_threshold(scores: torch.Tensor, positive: torch.Tensor) -> float:
    """The threshold on ``scores`` (max over categories) that maximises F1 of ``positive``,
    clamped to ``THRESHOLD_BOUNDS``; ties resolve towards 0.5."""
    peak = scores.max(dim=1).values
    best, best_f1 = 0.5, -1.0
    for step in range(10, 91):
        threshold = step / 100
        predicted = peak >= threshold
        tp = int((predicted & positive).sum())
        fp = int((predicted & ~positive).sum())
        fn = int((~predicted & positive).sum())
        f1 = 2 * tp / max(1, 2 * tp + fp + fn)
        if f1 > best_f1 or (f1 == best_f1 and abs(threshold - 0.5) < abs(best - 0.5)):
            best, best_f1 = threshold, f1
    low, high = THRESHOLD_BOUNDS
    return min(high, max(low, best))


class ModerationClassifier:
    """Exemplar embeddings, their label matrix and the calibrated threshold."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        texts = [text for text, _ in EXEMPLARS]
        self.exemplars = encoder.encode_ids([encoder.tokenize(t) for t in texts])
        self.labels = torch.tensor(
            [[1.0 if c in cats else 0.0 for c in CATEGORIES] for _, cats in EXEMPLARS]
        )
        self.threshold = self._calibrate()

    def _calibrate(self) -> float:
        """Leave-one-out scores of the exemplars → F1-optimal threshold."""
        similarities = self.exemplars @ self.exemplars.T
        similarities.fill_diagonal_(-1.0)
        scores = knn_scores(similarities, self.labels)
        positive = self.labels.sum(dim=1) > 0
        return best_threshold(scores, positive)

    def classify(self, embeddings: torch.Tensor) -> list[ModerationResult]:
        """One result per row of ``embeddings`` (L2-normalised MiniLM vectors)."""
        scores = knn_scores(embeddings @ self.exemplars.T, self.labels)
        results = []
        for row in scores.tolist():
            category_scores = {c: round(float(s), 6) for c, s in zip(CATEGORIES, row, strict=True)}
            flags = {c: s >= self.threshold for c, s in category_scores.items()}
            results.append(ModerationResult(category_scores, flags))
        return results
