"""Int8 linear layers for CPU decoding: a decode step reads every weight once, so it is bound by
memory bandwidth, and int8 weights read a quarter of the bytes of fp32 ones.

Weights are quantised once at load, symmetric per output channel; activations are quantised per
row (per token) on the fly, symmetric, and the product is an exact int8 × int8 → int32 matrix
multiply (``torch._int_mm``) rescaled in float. Each row's result depends only on that row, and
integer accumulation has no rounding order, so a sequence computes the same numbers batched or
alone (the engine's "batched equals solo" property holds bit for bit). Quality: llama.cpp
quantises activations to 8 bits for its Q4 kernels too; on SmolLM2-135M the next-token
log-likelihood of a test paragraph moves by under 1 % against fp32 (see docs/gpu_backend.md).
"""

from __future__ import annotations

import torch
from torch import nn

_LEVELS = 127.0
_TINY = 1e-12


class Int8Linear(nn.Module):
    """A drop-in ``nn.Linear`` (inference only) with int8 weights and per-row int8 activations."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=_TINY) / _LEVELS
        quantized = torch.round(weight / scale[:, None]).clamp(-_LEVELS, _LEVELS)
        self.weight_q: torch.Tensor
        self.weight_scale: torch.Tensor
        self.register_buffer("weight_q", quantized.to(torch.int8))  # [out, in]
        self.register_buffer("weight_scale", scale)  # [out]
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ W.T + b`` for ``x`` of shape ``[..., in]`` (float), in float32."""
        rows = x.reshape(-1, self.in_features).float()
        row_scale = rows.abs().amax(dim=1, keepdim=True).clamp(min=_TINY) / _LEVELS
        rows_q = torch.round(rows / row_scale).to(torch.int8)
        product = torch._int_mm(rows_q, self.weight_q.t())
        out = product * (row_scale * self.weight_scale)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


def quantize_linears(model: nn.Module) -> int:
    """Replace every ``nn.Linear`` in ``model`` (the LM head included) by an ``Int8Linear``;
    returns how many were replaced. Embedding lookups stay float (a tied LM head gets its own
    int8 copy)."""
    replaced = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, Int8Linear(child))
                replaced += 1
    return replaced
