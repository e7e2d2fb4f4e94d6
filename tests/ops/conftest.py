"""The fake vendors and catalog of the inference tests, and a Prometheus text parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.inference.conftest import _fake_servers, fake_catalog, fakes  # noqa: F401

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> Samples:
    """Every sample of a text exposition, keyed by (name, labels)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """How much the sample ``name{labels}`` grew between two scrapes (0 when absent)."""
    key = (name, frozenset(labels.items()))
    return after.get(key, 0.0) - before.get(key, 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over every sample whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))
