"""One traced run shared by the report tests: a graph break, a recompile, a backward."""
from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln.utils import trace


def branchy(x):
    y = x.sin()
    if y.sum() > 0:  # the graph break
        return y * 2
    return y.cos() + 1


BREAK_LINE = branchy.__code__.co_firstlineno + 2


def linear_relu_sum(x, w):
    return (x @ w).relu().sum()


@pytest.fixture(scope="session")
def traced(tmp_path_factory):
    """(trace directory, records of this process's trace file)."""
    from torchkiln.report.records import load

    directory = tmp_path_factory.mktemp("trace")
    try:
        f = torchkiln.compile(branchy, options={"trace": str(directory)})
        x4, x5 = torch.randn(4), torch.randn(5)
        torch.testing.assert_close(f(x4), branchy(x4))
        torch.testing.assert_close(f(x5), branchy(x5))  # a recompile: size 4 -> 5
        g = torchkiln.compile(linear_relu_sum)
        w = torch.randn(4, 4, requires_grad=True)
        g(torch.randn(3, 4), w).backward()
        trace.emit("cache", {"stage": "fx_graph", "event": "miss", "key": "demo-key", "reason": "not in cache"})
    finally:
        trace.disable()
    processes = load(str(directory))
    assert len(processes) == 1
    return directory, processes[0]
