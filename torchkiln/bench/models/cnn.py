"""A small convolutional classifier: conv-BatchNorm-ReLU stages, max pooling, linear head."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from . import Workload, cpu_or_cuda


class SmallCNN(nn.Module):
    """``x: (batch, 3, 32, 32) float32 -> logits: (batch, classes)``."""

    def __init__(self, classes: int = 10, width: int = 32) -> None:
        super().__init__()
        stages = []
        channels = 3
        for out in (width, 2 * width, 4 * width):
            stages += [nn.Conv2d(channels, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(), nn.MaxPool2d(2)]
            channels = out
        self.features = nn.Sequential(*stages)
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_cnn(device: str) -> Workload:
    batch = cpu_or_cuda(device, 16, 256)
    model = SmallCNN().to(device)
    x = torch.randn(batch, 3, 32, 32, device=device)
    target = torch.randint(0, 10, (batch,), device=device)
    return Workload(model, (x,), loss_fn=lambda out: F.cross_entropy(out, target))
