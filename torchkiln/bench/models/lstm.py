"""An LSTM language model: embedding, ``nn.LSTM``, linear decoder."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from . import Workload, cpu_or_cuda


class LSTMModel(nn.Module):
    """``tokens: (batch, seq) int64 -> logits: (batch, seq, vocab)``."""

    def __init__(self, vocab: int = 1000, dim: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, dim, num_layers=layers, batch_first=True)
        self.decoder = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(tokens))
        return self.decoder(out)


def make_lstm(device: str) -> Workload:
    batch, seq, vocab = cpu_or_cuda(device, 8, 64), 32, 1000
    model = LSTMModel(vocab).to(device)
    tokens = torch.randint(0, vocab, (batch, seq), device=device)
    target = torch.randint(0, vocab, (batch, seq), device=device)
    return Workload(model, (tokens,), loss_fn=lambda out: F.cross_entropy(out.flatten(0, 1), target.flatten()))
