"""Graph breaks: reasons, resume correctness, breaks inside inlined callees, frame counts."""
import inspect

import pytest
import torch

import torchkiln
from torchkiln.exc import Unsupported
from torchkiln.testing import CompileCounter, same
from torchkiln.utils.counters import counters

from capture_helpers import check, randn


def test_print_breaks_into_two_graphs(capsys):
    def f(x):
        y = x.sin() + 1
        print("between")
        return y.cos() * 2

    check(f, randn(3), fullgraph=False, frames=2, ops=4)
    assert "between" in capsys.readouterr().out


def test_data_dependent_branch_both_ways():
    def f(x):
        y = x * 2
        if y.sum() > 0:
            return y + 1
        return y - 1

    for sign in (1, -1):
        x = torch.ones(3) * sign
        check(f, x, fullgraph=False, frames=2)  # the prefix and the branch taken


def test_graph_break_api_and_counters():
    def f(x):
        x = x + 1
        torchkiln.graph_break()
        return x * 2

    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(f, backend=cnt)
    x = randn(3)
    assert same(opt(x), f(x))
    assert cnt.frame_count == 2
    assert any("graph_break" in r for r in counters["graph_break"])


def test_locals_and_stack_survive_the_break():
    def f(x, n):
        a = x + n
        b = [a, a * 2]
        d = {"k": a}
        total = a.sum() + sum([1, 2], torch.relu(print("hi") or a).sum())
        return a, b, d, total, n

    check(f, randn(3), 4, fullgraph=False, frames=2)


def _inner(x):
    x = x * 3
    print("inside")
    return x + 1


def test_break_in_inlined_callee_makes_it_its_own_frame():
    def outer(x):
        y = x.cos()
        z = _inner(y)
        return z.sin()

    # outer up to the call, _inner before/after its print, outer after the call
    check(outer, randn(3), fullgraph=False, frames=4)


def test_break_inside_no_grad_block_keeps_grad_mode():
    def f(x):
        with torch.no_grad():
            y = x * 2
            print("no grad here")
            z = y + x
        return z, z.requires_grad, (x * 1).requires_grad, torch.is_grad_enabled()

    x = randn(3, requires_grad=True)
    check(f, x, fullgraph=False)
    assert torch.is_grad_enabled()


def test_break_in_loop_over_modules():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x)
                if i == 1:
                    torchkiln.graph_break()
            return x.relu()

    check(M(), randn(2, 4), fullgraph=False, frames=2)


def test_fullgraph_raises_with_reason_and_location():
    def f(x):
        x = x + 1
        print("nope")
        return x

    torchkiln.reset()
    opt = torchkiln.compile(f, backend="eager", fullgraph=True)
    with pytest.raises(Unsupported) as info:
        opt(randn(2))
    assert "print" in str(info.value)
    assert "test_graph_breaks.py:" in str(info.value)


def test_item_breaks():
    def f(x):
        n = x.sum().item()
        return x * n

    check(f, randn(3), fullgraph=False)


def test_unsupported_callee_runs_eagerly_and_explain_counts():
    def f(x):
        x = x.relu()
        x = torch.manual_seed(0) and x
        return x + 1

    check(f, randn(3), fullgraph=False)
    out = torchkiln.explain(f)(randn(3))
    assert out.graph_break_count >= 1
    assert any(":" in str(r) for r in out.break_reasons)


def test_break_with_kwargs_call_and_star_args():
    def g(a, b=1, *, c):
        print("g")
        return a * b + c

    def f(x):
        y = g(x, 2, c=3)
        args = (x,)
        z = g(*args, c=1)
        return y + z

    check(f, randn(3), fullgraph=False)


def test_disabled_function_breaks():
    @torchkiln.disable
    def helper(x):
        return x * 10

    def f(x):
        return helper(x + 1) - 1

    check(f, randn(3), fullgraph=False, frames=2)


def test_break_keeps_closure_cells_shared():
    def f(x):
        k = 1

        def get():
            return k

        y = x + get()
        print("break")
        k = 5
        return y + get()

    check(f, torch.zeros(2), fullgraph=False, frames=2)


def test_break_inside_comprehension():
    def f(x):
        return [torch.relu(x * i) if print(i) is None else x for i in range(3)]

    check(f, randn(3), fullgraph=False)


def test_break_inside_autocast_block():
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ x
            print("in autocast")
            z = y @ x
        return z.dtype, z.float(), torch.is_autocast_enabled("cpu")

    check(f, randn(4, 4), fullgraph=False)


def test_break_inside_user_try_block_resumes():
    def f(x, fail):
        y = x.sin()
        try:
            y = y + 1
            print("in try")
            if fail:
                raise RuntimeError("caught by the frame's own handler")
        except RuntimeError:
            y = y * 0
        return y * 2

    check(f, randn(2), False, fullgraph=False, frames=2)  # the graph before the break, the continuation's
    check(f, randn(2), True, fullgraph=False)  # more in tests/capture/test_resume_try.py


def _apply(fn, *tensors):
    n = len(inspect.signature(fn).parameters)  # a cellvar argument, then a break

    def call():
        return fn(*tensors)

    return call() * n


def test_cells_passed_to_resume_are_read_per_call():
    class Layer(torch.nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k = torch.nn.Parameter(torch.full((2,), float(k)))

        def ff(self, x):
            return x * self.k

        def forward(self, x):
            return _apply(self.ff, x + 1)

    layers = torch.nn.ModuleList([Layer(2), Layer(3)])

    def f(x):
        for layer in layers:
            x = layer(x)
        return x

    check(f, torch.ones(2), fullgraph=False)
