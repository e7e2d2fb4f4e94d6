"""Quality benchmark of ``infrai-moderation-minilm`` on a labelled evaluation set.

Loads MiniLM and the moderation classifier in this process (no server, nothing downloaded),
classifies every sentence of ``bench/data/moderation_eval.jsonl`` and prints Markdown tables:

    python bench/moderation.py                  # all sentences, one thread
    python bench/moderation.py --split holdout  # only the sentences never calibrated on
    python bench/moderation.py --errors         # also list every wrong sentence

Each line of the set is ``{"text", "categories", "kind", "topic", "split"}``: ``categories`` is
the full label set (a sub-category implies its parent, threats imply violence, as in the
model's exemplars); ``kind`` is ``violation``, ``benign-topic`` (harmless text that mentions a
category's topic: history of wars, cooking knives, medical questions, "kill the process") or
``benign``. ``split`` records how the sentence was used while the exemplars were calibrated:
``dev`` errors were read from the start, ``test`` only as totals in the first round and read
in the second, ``holdout`` was written after the first round and only ever measured, so its
figures are the honest estimate for unseen text. No sentence of the set is an exemplar of the
model (a test checks this).

Reported: per category precision and recall of the category's boolean; "flagged" precision and
recall against "has any category"; the false-positive rate on harmless sentences (flagged /
harmless), overall and for the topic-mentioning ones.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

EVAL_PATH = Path(__file__).resolve().parent / "data" / "moderation_eval.jsonl"


@dataclass(frozen=True)
class Example:
    """One labelled sentence of the evaluation set."""

    text: str
    categories: frozenset[str]
    kind: str
    topic: str | None
    split: str


@dataclass(frozen=True)
class Prediction:
    """The model's verdict on one example."""

    example: Example
    flagged: bool
    categories: frozenset[str]
    scores: dict[str, float]


def load_examples(path: Path = EVAL_PATH, split: str = "all") -> list[Example]:
    """The evaluation set (``split``: ``all``, ``dev`` or ``test``)."""
    examples = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        example = Example(
            text=row["text"],
            categories=frozenset(row["categories"]),
            kind=row["kind"],
            topic=row.get("topic"),
            split=row["split"],
        )
        if split in ("all", example.split):
            examples.append(example)
    return examples


def predict(examples: list[Example], threads: int = 1) -> list[Prediction]:
    """Load the encoder and classifier on the CPU and classify ``examples``."""
    from gpu_backend.device import configure_threads, select_device
    from gpu_backend.embeddings import load_encoder
    from gpu_backend.moderation import ModerationClassifier

    configure_threads(threads)
    encoder = load_encoder(select_device("cpu"))
    classifier = ModerationClassifier(encoder)
    predictions = []
    for start in range(0, len(examples), 64):
        chunk = examples[start : start + 64]
        embeddings = encoder.encode_ids([encoder.tokenize(e.text) for e in chunk])
        for example, result in zip(chunk, classifier.classify(embeddings), strict=True):
            flags = frozenset(c for c, on in result.categories.items() if on)
            predictions.append(Prediction(example, result.flagged, flags, result.category_scores))
    return predictions


def ratio(numerator: int, denominator: int) -> float:
    """``numerator / denominator``, 0 when the denominator is 0."""
    return numerator / denominator if denominator else 0.0


def benign_false_positive_rate(predictions: list[Prediction], kind: str | None = None) -> float:
    """Share of harmless examples (of ``kind`` when given) that the model flags."""
    benign = [p for p in predictions if not p.example.categories]
    if kind is not None:
        benign = [p for p in benign if p.example.kind == kind]
    return ratio(sum(p.flagged for p in benign), len(benign))


def report(predictions: list[Prediction], categories: tuple[str, ...]) -> str:
    """The Markdown tables described in the module docstring."""
    lines = [
        "| category | support | predicted | precision | recall |",
        "|---|---:|---:|---:|---:|",
    ]
    for category in categories:
        truth = [category in p.example.categories for p in predictions]
        guess = [category in p.categories for p in predictions]
        tp = sum(t and g for t, g in zip(truth, guess, strict=True))
        lines.append(
            f"| {category} | {sum(truth)} | {sum(guess)} | "
            f"{ratio(tp, sum(guess)):.2f} | {ratio(tp, sum(truth)):.2f} |"
        )
    positive = [bool(p.example.categories) for p in predictions]
    flagged = [p.flagged for p in predictions]
    tp = sum(t and g for t, g in zip(positive, flagged, strict=True))
    benign = [p for p in predictions if not p.example.categories]
    topic = [p for p in benign if p.example.kind == "benign-topic"]
    lines += [
        "",
        "| overall | value |",
        "|---|---:|",
        f"| sentences | {len(predictions)} ({sum(positive)} violating, {len(benign)} harmless) |",
        f"| flagged precision | {ratio(tp, sum(flagged)):.3f} |",
        f"| flagged recall | {ratio(tp, sum(positive)):.3f} |",
        f"| benign false-positive rate | {benign_false_positive_rate(predictions):.3f} "
        f"({sum(p.flagged for p in benign)}/{len(benign)}) |",
        f"| … of which topic-mentioning | "
        f"{benign_false_positive_rate(predictions, 'benign-topic'):.3f} "
        f"({sum(p.flagged for p in topic)}/{len(topic)}) |",
    ]
    return "\n".join(lines)


def errors(predictions: list[Prediction]) -> str:
    """One line per example whose flag or categories are wrong."""
    lines = []
    for p in predictions:
        if p.flagged != bool(p.example.categories) or (
            p.flagged and not p.categories & p.example.categories
        ):
            top = sorted(p.scores.items(), key=lambda item: -item[1])[:2]
            shown = ", ".join(f"{c} {s:.2f}" for c, s in top)
            want = ",".join(sorted(p.example.categories)) or "-"
            got = ",".join(sorted(p.categories)) or "-"
            lines.append(f"[{p.example.split}] want {want} got {got} ({shown}): {p.example.text}")
    return "\n".join(lines)


def main() -> None:
    """Parse arguments, run the model over the set and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=("all", "dev", "test", "holdout"), default="all")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--errors", action="store_true", help="list misclassified sentences")
    args = parser.parse_args()

    from gpu_backend.moderation_exemplars import CATEGORIES

    predictions = predict(load_examples(split=args.split), threads=args.threads)
    print(f"## infrai-moderation-minilm on {EVAL_PATH.name} (split: {args.split})\n")
    print(report(predictions, CATEGORIES))
    if args.errors:
        print("\n## Errors\n")
        print(errors(predictions))


if __name__ == "__main__":
    main()
