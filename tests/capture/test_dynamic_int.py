"""Automatic dynamic for Python int arguments (torch.compile's behaviour): the first call
specialises on the value, a call with another value recompiles once with the int as a
SymInt graph input, later values reuse that graph; dynamic=False always specialises,
dynamic=True makes ints symbolic from the start (0 and 1 excepted)."""
import pytest
import torch

import torchkiln
from torchkiln.testing import CompileCounter, EagerAndRecordGraphs, same


@pytest.fixture(autouse=True)
def _reset():
    torchkiln.reset()
    yield
    torchkiln.reset()


def _run(fn, calls, backend=None, **kw):
    cnt = backend or CompileCounter()
    opt = torchkiln.compile(fn, backend=cnt, **kw)
    for args in calls:
        assert same(fn(*args), opt(*args)), args
    return cnt


def _sym_placeholders(gm):
    return [n.name for n in gm.graph.nodes if n.op == "placeholder" and isinstance(n.meta.get("example_value"),
                                                                                   torch.SymInt)]


X = torch.randn(12)


def arith(x, n):
    return x * n + n // 2, n * 3 - 1


def shapes(x, n):
    return x.view(n, -1).sum(0) + torch.arange(n).sum(), torch.ones(n, 2) * n


def slicing(x, n):
    return x[:n] * 2, x[n:].sum(), x[n - 1]


@pytest.mark.parametrize("fn", [arith, shapes, slicing])
def test_one_recompile_then_the_symint_graph_is_reused(fn):
    cnt = _run(fn, [(X, n) for n in (2, 3, 4, 6, 2)])
    assert cnt.frame_count == 2


def test_the_recompiled_graph_takes_the_int_as_a_symint_input():
    rec = EagerAndRecordGraphs()
    _run(arith, [(X, 3), (X, 5), (X, 7)], backend=rec)
    assert len(rec.graphs) == 2
    assert _sym_placeholders(rec.graphs[0]) == []
    assert _sym_placeholders(rec.graphs[1]) == ["l__n"]


def test_dynamic_false_always_specialises():
    cnt = _run(arith, [(X, n) for n in (2, 3, 4)], dynamic=False)
    assert cnt.frame_count == 3


def test_dynamic_true_is_symbolic_from_the_start():
    cnt = _run(arith, [(X, n) for n in (2, 3, 4)], dynamic=True)
    assert cnt.frame_count == 1


def test_value_used_by_python_control_flow_is_guarded():
    def f(x, n):
        if n > 4:
            return x + n
        return x - n

    cnt = _run(f, [(X, 5), (X, 6), (X, 7), (X, 2), (X, 3), (X, 9)])
    assert cnt.frame_count == 3  # 5 static; n > 4 symbolic; n <= 4 symbolic


def test_specialising_uses_recompile_per_value_and_stay_correct():
    def f(x, n):
        for i in range(n):  # range() needs the value: the SymInt is specialised
            x = x + i
        return x

    _run(f, [(X, n) for n in (2, 3, 4, 2, 3)])


def test_bool_float_and_attribute_ints_stay_specialised():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = 2

        def forward(self, x, flag, scale):
            return x * self.k * scale if flag else x

    m = M()
    cnt = CompileCounter()
    opt = torchkiln.compile(m, backend=cnt)
    for k, flag, scale in [(2, True, 1.5), (3, True, 1.5), (4, False, 2.5)]:
        m.k = k
        assert same(opt(X, flag, scale), m(X, flag, scale))
    rec = EagerAndRecordGraphs()
    torchkiln.reset()
    opt = torchkiln.compile(m, backend=rec)
    for k in (2, 3, 4):
        m.k = k
        opt(X, True, 1.5)
    assert all(_sym_placeholders(g) == [] for g in rec.graphs)


def test_type_change_recompiles_without_going_dynamic():
    rec = EagerAndRecordGraphs()
    _run(arith, [(X, 3), (X, 3.5), (X, 4)], backend=rec)
    assert _sym_placeholders(rec.graphs[1]) == []


def test_int_in_varargs_and_codegen_backend():
    def f(x, *sizes):
        return x.reshape(*sizes).sum(-1) * sizes[0]

    cnt = _run(f, [(X, 3, 4), (X, 4, 3), (X, 6, 2), (X, 2, 6)])
    assert cnt.frame_count == 2
    _run(f, [(X, 3, 4), (X, 4, 3), (X, 6, 2)], backend="inductor")


def test_negative_and_out_of_range_index():
    def f(x, n):
        return x[n] + 1

    _run(f, [(X, -2), (X, -3), (X, 5), (X, -12), (X, 11)])
    opt = torchkiln.compile(f, backend="eager")
    with pytest.raises(IndexError):
        opt(X, 12)
