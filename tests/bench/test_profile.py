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


def test_kernel_time_counts_launches_and_is_part_of_the_step():
    """The wrapper times each generated kernel launch (a clock read, no profiler
    event): the kernels' share is counted once, inside the step's total."""
    from torchkiln.codegen.wrapper_runtime import kernel_time

    x = torch.randn(256, 256)

    def fn(x):
        return (torch.sin(x) * 2).sum(0) + 1

    torchkiln.reset()
    with config.patch(kernel_profile=True, fx_graph_cache=False):
        compiled = torchkiln.compile(fn)
        torch.testing.assert_close(compiled(x), fn(x), atol=1e-4, rtol=1e-4)  # a sum of 256 in another order
    kernel_time[:] = [0, 0]
    compiled(x)
    assert kernel_time[1] >= 1 and kernel_time[0] > 0
    parts = profile.breakdown(lambda: compiled(x), steps=2, rounds=2)
    assert 0 < parts["kernels"] <= parts["total"]
    assert not any(k.startswith("extern kiln") for k in parts)


def test_peer_kernel_events_are_kernels():
    assert profile._is_peer_kernel("graph_0_cpp_fused_add_relu_3")
    assert not profile._is_peer_kernel("aten::add")
