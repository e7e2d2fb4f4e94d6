"""``manage.py catalog dump`` / ``load``: one readable document, idempotent, round-trips."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from catalog.documents import CatalogDocumentError, catalog_dump, catalog_load
from catalog.models import Model, Offering, ParameterRule, Price, Vendor
from tests.catalog_docs import SPEC_MODELS

pytestmark = pytest.mark.django_db


def _counts() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (Vendor, Model, Offering, Price, ParameterRule))


def test_the_seed_holds_the_spec_models_local_models_and_vendor_models(seeded):
    ids = set(Model.objects.values_list("model_id", flat=True))
    assert {
        *SPEC_MODELS,
        "SmolLM2-135M-Instruct",
        "all-MiniLM-L6-v2",
        "piper-en-us-joe",
        "whisper-tiny.en",
        "infrai-moderation-minilm",
        "gpt-4o-mini",
        "gpt-4o",
        "text-embedding-3-small",
        "dall-e-3",
        "tts-1",
        "whisper-1",
        "omni-moderation-latest",
        "deepseek-chat",
        "qwen-plus",
        "claude-sonnet-4-5",
    } <= ids
    assert Model.objects.get(model_id="all-MiniLM-L6-v2").embedding_dimensions == 384
    gpu = Vendor.objects.get(name="infrai-gpu")
    assert (gpu.adapter_kind, gpu.credentials_env, gpu.base_url_setting) == (
        "openai",
        "",
        "INFRAI_GPU_BACKEND_URL",
    )
    assert Vendor.objects.get(name="anthropic").adapter_kind == "anthropic"
    mini = Price.objects.get(offering__model__model_id="gpt-4o-mini")
    assert (mini.input_per_mtok_nanos, mini.output_per_mtok_nanos) == (150_000_000, 600_000_000)
    dalle = Price.objects.get(offering__model__model_id="dall-e-3")
    assert dalle.per_image_nanos["1024x1024/standard"] == 40_000_000


SPEC_TABLE = {
    # model: n, logprobs, top_logprobs, logit_bias, seed, repetition_penalty
    "gpt-oss-120b": ("honoured",) * 6,
    "gemma-4-31B-it": ("honoured", "honoured", "honoured", "fails", "honoured", "honoured"),
    "DeepSeek-V3.1": ("honoured", "honoured", "honoured", "fails", "honoured", "no_effect"),
    "DeepSeek-V3.2": ("honoured", "honoured", "honoured", "fails", "honoured", "no_effect"),
    "Meta-Llama-3.3-70B-Instruct": (
        "honoured",
        "honoured",
        "honoured",
        "fails",
        "honoured",
        "no_effect",
    ),
    "MiniMax-M3": ("honoured", "no_effect", "no_effect", "fails", "no_effect", "fails"),
}


def test_the_seed_matrix_is_the_spec_table(seeded):
    columns = ("n", "logprobs", "top_logprobs", "logit_bias", "seed", "repetition_penalty")
    for model_id, expected in SPEC_TABLE.items():
        rules = {
            r.parameter: r.support for r in ParameterRule.objects.filter(model__model_id=model_id)
        }
        assert tuple(rules[c] for c in columns) == expected, model_id
    minimax = ParameterRule.objects.get(
        model__model_id="MiniMax-M3", parameter="repetition_penalty"
    )
    assert minimax.accepted_values == [1.0]
    for penalty in ("presence_penalty", "frequency_penalty"):
        rule = ParameterRule.objects.get(model__model_id="gpt-oss-120b", parameter=penalty)
        assert (rule.support, rule.accepted_values) == ("fails", [0])


def test_load_is_idempotent(seeded):
    before = _counts()
    document = catalog_dump()
    catalog_load(document)
    catalog_load(document)
    assert _counts() == before


def test_dump_load_round_trip_through_the_command(seeded, tmp_path: Path):
    path = tmp_path / "catalog.yaml"
    call_command("catalog", "dump", output=str(path))
    text = path.read_text()
    assert "gpt-oss-120b" in text and "input_per_mtok_usd: '0.15'" in text
    first = yaml.safe_load(text)
    # Wipe and rebuild from the file alone.
    Vendor.objects.all().delete()
    Model.objects.all().delete()
    out = io.StringIO()
    call_command("catalog", "load", str(path), stdout=out)
    assert "loaded" in out.getvalue()
    assert catalog_dump() == first


def test_a_changed_price_in_a_document_is_a_new_history_row(seeded):
    document = {
        "models": [
            {
                "id": "gpt-4o-mini",
                "owned_by": "openai",
                "offerings": [
                    {
                        "vendor": "openai",
                        "upstream_model": "gpt-4o-mini",
                        "prices": [
                            {
                                "effective_from": "2030-01-01T00:00:00Z",
                                "source": "test: future price",
                                "input_per_mtok_usd": "0.1",
                            }
                        ],
                    }
                ],
            }
        ]
    }
    catalog_load(document)
    rows = Price.objects.filter(offering__model__model_id="gpt-4o-mini").order_by("effective_from")
    assert [r.input_per_mtok_nanos for r in rows] == [150_000_000, 100_000_000]


@pytest.mark.parametrize(
    "price",
    [
        {"effective_from": "2025-01-01", "source": "x", "input_per_mtok_usd": 0.15},
        {"effective_from": "2025-01-01", "source": "x", "input_per_mtok_usd": "0.0000000001"},
        {"effective_from": "2025-01-01", "input_per_mtok_usd": "1"},
    ],
)
def test_invalid_prices_are_refused_and_nothing_is_written(seeded, price):
    before = _counts()
    document = {
        "vendors": [{"name": "newco", "adapter_kind": "openai", "base_url": "http://x.test/v1"}],
        "models": [
            {
                "id": "newco-1",
                "owned_by": "newco",
                "offerings": [{"vendor": "newco", "prices": [price]}],
            }
        ],
    }
    with pytest.raises(CatalogDocumentError):
        catalog_load(document)
    assert _counts() == before


def _offering_doc(**offering: object) -> dict[str, object]:
    return {
        "models": [
            {
                "id": "gpt-4o-mini",
                "owned_by": "openai",
                "offerings": [{"vendor": "openai", "upstream_model": "gpt-4o-mini", **offering}],
            }
        ]
    }


def test_the_batch_discount_is_read_written_and_kept_when_left_out(seeded):
    """A document sets an offering's batch discount; one that leaves it out keeps what staff
    set; a dump carries it, so a round trip keeps it."""
    mini = Offering.objects.filter(model__model_id="gpt-4o-mini", vendor__name="openai")
    catalog_load(_offering_doc(batch_discount_percent=30))
    assert mini.get().batch_discount_percent == 30
    mini.update(batch_discount_percent=40)  # staff, in the admin
    catalog_load(_offering_doc())
    assert mini.get().batch_discount_percent == 40
    [dumped] = [
        o
        for m in catalog_dump()["models"]
        if m["id"] == "gpt-4o-mini"
        for o in m["offerings"]
        if o["vendor"] == "openai"
    ]
    assert dumped["batch_discount_percent"] == 40


@pytest.mark.parametrize("percent", [101, -1, "50", 12.5, True])
def test_a_batch_discount_outside_0_to_100_is_refused(seeded, percent):
    with pytest.raises(CatalogDocumentError, match="batch_discount_percent"):
        catalog_load(_offering_doc(batch_discount_percent=percent))


def test_load_command_reports_a_bad_file(tmp_path: Path, db):
    path = tmp_path / "bad.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(CommandError):
        call_command("catalog", "load", str(path))
