"""Queries of global state (autocast per device, inference mode) fold at trace time and
are guarded on the state the frame was entered with (torch's GLOBAL_STATE guard)."""
import pytest
import torch

import torchkiln
from torchkiln.testing import CompileCounter

from capture_helpers import check, randn


def _branchy(x):
    if torch.is_autocast_enabled("cpu"):
        return x * 2, torch.get_autocast_dtype("cpu")
    return x + 1, torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype(), torch.is_autocast_cache_enabled()


def test_autocast_queries_fold_into_one_graph():
    check(_branchy, randn(3), fullgraph=True, frames=1)


def test_autocast_query_guard_recompiles_under_autocast():
    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(_branchy, backend=cnt, fullgraph=True)
    x = randn(3)
    assert torch.equal(opt(x)[0], x + 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = opt(x)
        assert got[1] is torch.bfloat16 and torch.equal(got[0], _branchy(x)[0])
    with torch.autocast("cpu", dtype=torch.float16):  # the dtype is part of the guarded state
        assert opt(x)[1] is torch.float16
    assert torch.equal(opt(x)[0], x + 1)
    assert cnt.frame_count == 3


def test_query_inside_the_frames_own_autocast_block():
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            inside = torch.is_autocast_enabled("cpu")
        return x + 1, inside, torch.is_autocast_enabled("cpu")

    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(f, backend=cnt, fullgraph=True)
    for _ in range(2):
        assert opt(randn(2))[1:] == (True, False)
    assert cnt.frame_count == 1  # the guard holds the entry state (False), not the traced one


def test_inference_mode_query_is_guarded():
    def f(x):
        return x + 1 if torch.is_inference_mode_enabled() else x - 1

    torchkiln.reset()
    opt = torchkiln.compile(f, backend="eager", fullgraph=True)
    x = randn(2)
    assert torch.equal(opt(x), x - 1)
    with torch.inference_mode():
        y = randn(2)
        assert torch.equal(opt(y), y + 1)


def test_transformers_maybe_autocast_does_not_break():
    generic = pytest.importorskip("transformers.utils.generic")
    if not hasattr(generic, "maybe_autocast"):
        pytest.skip("transformers without maybe_autocast")

    def f(x):
        with generic.maybe_autocast("cpu", enabled=False):
            y = x @ x
        return y.sin()

    check(f, randn(3, 3), fullgraph=True, frames=1)
