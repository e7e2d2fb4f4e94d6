"""Device and dtype selection, and explicit thread counts: the only CPU/CUDA difference."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DeviceSpec:
    """Where tensors live and in which floating-point type the models compute."""

    device: torch.device
    dtype: torch.dtype

    @property
    def is_cuda(self) -> bool:
        """True when the models run on a CUDA device."""
        return self.device.type == "cuda"

    @property
    def dtype_name(self) -> str:
        """``float32``, ``bfloat16`` or ``float16``."""
        return str(self.dtype).removeprefix("torch.")


def select_device(requested: str = "auto") -> DeviceSpec:
    """CUDA with bf16 (fp16 where bf16 is unsupported) when available, else CPU fp32.

    ``requested`` is ``auto``, ``cpu`` or ``cuda``; ``cuda`` without a GPU raises ``RuntimeError``.
    """
    if requested not in {"auto", "cpu", "cuda"}:
        raise ValueError(f"device must be auto, cpu or cuda, not {requested!r}")
    use_cuda = torch.cuda.is_available() if requested == "auto" else requested == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was requested but torch.cuda.is_available() is False")
    if use_cuda:
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return DeviceSpec(torch.device("cuda"), dtype)
    return DeviceSpec(torch.device("cpu"), torch.float32)


def configure_threads(threads: int) -> None:
    """Pin torch's (and OpenMP's) CPU thread pools to ``threads`` for this process.

    Must run before any model computes; later model loaders pass the same number to their own
    runtimes (ctranslate2 ``cpu_threads``, onnxruntime ``intra_op_num_threads``).
    """
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    torch.set_num_threads(threads)
    # RuntimeError: already set (only possible once per process)
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)
