"""A multi-layer perceptron: Linear, LayerNorm, GELU, residual connections."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from . import Workload, cpu_or_cuda


class MLP(nn.Module):
    """``x: (batch, dim) float32 -> logits: (batch, classes)``."""

    def __init__(self, dim: int = 512, hidden: int = 1024, depth: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
            for _ in range(depth)
        )
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x)
        return self.head(x)


def make_mlp(device: str) -> Workload:
    batch = cpu_or_cuda(device, 64, 4096)
    model = MLP().to(device)
    x = torch.randn(batch, 512, device=device)
    target = torch.randint(0, 10, (batch,), device=device)
    return Workload(model, (x,), loss_fn=lambda out: F.cross_entropy(out, target))
