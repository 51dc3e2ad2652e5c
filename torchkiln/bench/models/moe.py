"""A mixture-of-experts layer with data-dependent shapes (the benchmark's and the tests' one model).

Top-k routing from a softmax gate, per-expert token counts from ``bincount`` turned into
split sizes with ``.tolist()``, a loop over the experts (gather, MLP, ``index_add``).
Captured as one graph only with ``capture_scalar_outputs`` and
``capture_dynamic_output_shape_ops`` (else ``bincount``/``.tolist()`` break the graph).
"""
from __future__ import annotations

import torch
from torch import nn

from . import Workload, cpu_or_cuda


class MoE(nn.Module):
    """``x: (tokens, d) float32 -> (tokens, d)``: each token's output is the gate-weighted
    sum of its top-``k`` experts' outputs (weights renormalised over the ``k``)."""

    def __init__(self, d: int = 256, hidden: int = 512, n_experts: int = 8, k: int = 2) -> None:
        super().__init__()
        self.k, self.n_experts = k, n_experts
        self.gate = nn.Linear(d, n_experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, hidden), nn.SiLU(), nn.Linear(hidden, d))
                                     for _ in range(n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = self.gate(x).softmax(-1)
        weights, chosen = probs.topk(self.k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        flat = chosen.flatten()
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=self.n_experts)
        torch._check(counts.size(0) == self.n_experts)  # bincount's length is data-dependent
        sizes = counts.tolist()
        tokens = (order // self.k).split(sizes)
        w = weights.flatten()[order].split(sizes)
        out = torch.zeros_like(x)
        for expert, tok, wt in zip(self.experts, tokens, w):
            out = out.index_add(0, tok, expert(x[tok]) * wt.unsqueeze(-1))
        return out


def make_moe(device: str) -> Workload:
    tokens = cpu_or_cuda(device, 512, 8192)
    model = MoE().to(device)
    x = torch.randn(tokens, 256, device=device)
    return Workload(model, (x,), loss_fn=lambda out: out.pow(2).mean())
