"""Capture of data-dependent values: ``.item()``/``.tolist()`` as unbacked symbols
(``config.capture_scalar_outputs``), ``nonzero`` & co with data-dependent sizes
(``config.capture_dynamic_output_shape_ops``), ``torch._check``; graph breaks otherwise,
as under torch.compile.  Backend "eager": what is captured, not how it is compiled."""
from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln.exc import Unsupported
from torchkiln.testing import CompileCounter

scalars = torchkiln.config.patch(capture_scalar_outputs=True)
shapes = torchkiln.config.patch(capture_dynamic_output_shape_ops=True)


def _count(fn, *args, **kwargs):
    torchkiln.reset()
    counter = CompileCounter()
    out = torchkiln.compile(fn, backend=counter, **kwargs)(*args)
    return out, counter.frame_count


def test_item_and_tolist_break_without_the_setting():
    def f(x):
        y = x * 2
        n = y.sum().item()
        return y + n, y.tolist()

    x = torch.tensor([1.0, 2.0])
    out, frames = _count(f, x)
    torch.testing.assert_close(out, f(x))
    assert frames == 2
    with scalars:
        out, frames = _count(f, x)
    torch.testing.assert_close(out, f(x))
    assert frames == 1


def test_nonzero_breaks_without_the_setting():
    def f(x):
        idx = x.nonzero()
        return idx * 2, x[x > 0] + 1, torch.masked_select(x, x > 1)

    x = torch.tensor([0.0, 3.0, 1.0, 0.0, 2.0])
    with pytest.raises(Unsupported, match="capture_dynamic_output_shape_ops"):
        torchkiln.compile(f, backend="eager", fullgraph=True)(x)
    with shapes:
        out, frames = _count(f, x, fullgraph=True)
    torch.testing.assert_close(out, f(x))
    assert frames == 1


@scalars
def test_undecidable_branch_names_expression_and_line():
    def f(x):
        n = x.item()
        if n > 3:  # the ShapeEnv cannot decide this
            return x + 1
        return x - 1

    with pytest.raises(Unsupported) as info:
        torchkiln.compile(f, backend="eager", fullgraph=True)(torch.tensor(5))
    text = str(info.value)
    assert "u0 > 3" in text and "data-dependent" in text
    assert f"{__file__}:{f.__code__.co_firstlineno + 2}" in text
    # without fullgraph: a graph break, and eager's result on both sides of it
    for v in (5, 1):
        out, frames = _count(f, torch.tensor(v))
        torch.testing.assert_close(out, f(torch.tensor(v)))
        assert frames == 2  # the graph up to the branch, and the taken side after it


@scalars
def test_checks_decide_branches_and_stay_in_the_graph():
    def f(x):
        n = x.item()
        torch._check(n >= 0)
        torch._check_with(ValueError, n < 100, lambda: "n too large")
        torch._check_is_size(n)
        if n >= 0:  # decided by the check above
            return torch.zeros(n)
        return None

    counter = CompileCounter()
    opt = torchkiln.compile(f, backend=counter, fullgraph=True)
    assert opt(torch.tensor(4)).shape == (4,)
    gm_ops = counter.op_count
    assert gm_ops >= 3  # item, the checks, zeros


@scalars
def test_check_with_constant_condition():
    def f(x):
        torch._check(x.shape[0] == 3)
        return x.sum().item() + 1

    out, frames = _count(f, torch.ones(3), fullgraph=True)
    assert out == 4.0 and frames == 1


@scalars
def test_index_by_item():
    def f(x, i):
        return x[i.item()] * 2

    x = torch.arange(12.0).view(4, 3)
    opt = torchkiln.compile(f, backend="eager", fullgraph=True)
    for i in (1, -1, 3):
        torch.testing.assert_close(opt(x, torch.tensor(i)), f(x, torch.tensor(i)))
