"""bench/profile.py: the step breakdown attributes time to extern ops, generated
kernels (marked through codegen.config.kernel_profile) and the rest."""
from __future__ import annotations

import torch

import torchkiln
from torchkiln.bench import profile
from torchkiln.codegen import config


def test_breakdown_eager_and_compiled():
    x, w = torch.randn(64, 64), torch.randn(64, 64)

    def fn(x):
        return torch.relu(x @ w.t()) + 1

    parts = profile.breakdown(lambda: fn(x), steps=2)
    assert parts["total"] > 0 and any(k.startswith("extern ") for k in parts)
    torchkiln.reset()
    with config.patch(kernel_profile=True, fx_graph_cache=False):
        compiled = torchkiln.compile(fn)
        compiled(x)
    kiln = profile.breakdown(lambda: compiled(x), steps=2)
    assert kiln["kernels"] > 0
    text = profile.format_breakdowns("fn", "inference", {"eager": parts, "kiln": kiln})
    assert "kernels" in text and "total" in text
