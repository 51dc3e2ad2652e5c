"""Shared helpers for capture tests: run a function compiled and eagerly, compare."""
import copy

import torch

import torchkiln
from torchkiln.testing import CompileCounter, same


def check(fn, *args, fullgraph=True, frames=None, ops=None, **kwargs):
    """Compile ``fn`` with a CompileCounter, compare with eager twice; return the counter."""
    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(fn, backend=cnt, fullgraph=fullgraph)
    expected = fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))
    for _ in range(2):
        got = opt(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        assert same(expected, got), f"{expected!r} != {got!r}"
    if frames is not None:
        assert cnt.frame_count == frames, cnt.frame_count
    if ops is not None:
        assert cnt.op_count == ops, cnt.op_count
    return cnt


def randn(*shape, **kw):
    return torch.randn(*shape, **kw)
