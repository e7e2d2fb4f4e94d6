"""Int8 linear layers: a row computes the same numbers batched or alone, close to fp32."""

from __future__ import annotations

import torch
from torch import nn

from gpu_backend.quantize import Int8Linear, quantize_linears


def test_a_row_computes_the_same_bits_batched_or_alone() -> None:
    torch.manual_seed(0)
    layer = Int8Linear(nn.Linear(96, 40, bias=False))
    batch = torch.randn(5, 3, 96) * torch.tensor([0.1, 1.0, 30.0])[None, :, None]
    together = layer(batch)
    alone = torch.stack([layer(batch[i : i + 1])[0] for i in range(5)])
    assert torch.equal(together, alone)


def test_int8_stays_close_to_fp32_and_keeps_the_bias() -> None:
    torch.manual_seed(1)
    linear = nn.Linear(256, 64)
    x = torch.randn(4, 256)
    expected = linear(x)
    got = Int8Linear(linear)(x)
    relative = (got - expected).norm() / expected.norm()
    assert relative < 0.02


def test_quantize_linears_replaces_every_linear_and_leaves_embeddings() -> None:
    model = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 3)))
    assert quantize_linears(model) == 2
    assert isinstance(model[0], nn.Embedding)
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
