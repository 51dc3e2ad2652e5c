"""Dynamic-shape policy end to end: automatic dynamic, dynamic=True/False,
mark_dynamic, mark_static; every result compared with eager."""
import pytest
import torch

import torchkiln
from torchkiln.testing import CompileCounter, EagerAndRecordGraphs, same


@pytest.fixture(autouse=True)
def _reset():
    torchkiln.reset()
    yield
    torchkiln.reset()


def f(x, y):
    return (x * 2 + y).sum(0)


def _symbolic_dims(gm):
    """Placeholder name -> dims whose example size is symbolic."""
    out = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("example_value")
            if isinstance(val, torch.Tensor):
                out[node.name] = {d for d, s in enumerate(val.shape) if isinstance(s, torch.SymInt)}
    return out


def test_automatic_dynamic_one_recompile_then_reuse():
    cnt = CompileCounter()
    cf = torchkiln.compile(f, backend=cnt)
    for n in (3, 4, 5, 7, 9):
        x, y = torch.randn(n, 2), torch.randn(n, 2)
        assert same(cf(x, y), f(x, y))
    assert cnt.frame_count == 2


def test_automatic_dynamic_only_changed_dim_is_symbolic():
    rec = EagerAndRecordGraphs()
    cf = torchkiln.compile(f, backend=rec)
    cf(torch.randn(3, 2), torch.randn(3, 2))
    cf(torch.randn(4, 2), torch.randn(4, 2))
    assert len(rec.graphs) == 2
    assert all(not dims for dims in _symbolic_dims(rec.graphs[0]).values())
    dims = [d for d in _symbolic_dims(rec.graphs[1]).values() if d]
    assert dims and all(d == {0} for d in dims)


def split_by(x, sizes):
    return [t * 2 for t in x.split(sizes)]


def test_automatic_dynamic_int_items_past_a_failing_relation():
    """Split sizes (an MoE's per-expert counts from ``.tolist()``, the list its resume
    function gets): once two items are symbolic, ShapeEnv guards their sum
    (``L['sizes'][1] == 7 - L['sizes'][0]``; sizes 0 and 1 are specialised anyway); a call where a third item changes fails that
    relation too, and automatic dynamic ignored the whole failure, so the third item
    stayed static and every new value of it recompiled (moe training ran its resume
    function eagerly after cache_size_limit)."""
    cnt = CompileCounter()
    cf = torchkiln.compile(split_by, backend=cnt)
    x = torch.randn(12)
    for sizes in ([2, 5, 5], [3, 4, 5], [4, 4, 4], [2, 8, 2], [3, 6, 3], [5, 2, 5]):
        assert same(cf(x, sizes), split_by(x, sizes))
    assert cnt.frame_count == 3  # static, then items 0 and 1 symbolic, then item 2 too


def test_automatic_dynamic_failing_relation_makes_the_whole_list_symbolic():
    """Once a relation of the list's items fails (another item changed while the sum
    stayed), every int item of that list goes symbolic: the MoE's split sizes change a
    few experts at a time, and one recompile per newly changed item filled
    cache_size_limit (8 experts, 6 recompiles)."""
    cnt = CompileCounter()
    cf = torchkiln.compile(split_by, backend=cnt)
    x = torch.randn(24)
    for sizes in ([4] * 6, [5, 3, 4, 4, 4, 4], [5, 3, 3, 5, 4, 4], [5, 3, 3, 5, 2, 6], [2, 2, 9, 3, 2, 6]):
        assert same(cf(x, sizes), split_by(x, sizes))
    assert cnt.frame_count == 3  # static, items 0 and 1, then the whole list (was 4: items 4, 5 later)


def test_dynamic_false_recompiles_per_size():
    cnt = CompileCounter()
    cf = torchkiln.compile(f, backend=cnt, dynamic=False)
    for n in (3, 4, 5):
        x, y = torch.randn(n, 2), torch.randn(n, 2)
        assert same(cf(x, y), f(x, y))
    assert cnt.frame_count == 3


def test_automatic_dynamic_config_off():
    cnt = CompileCounter()
    with torchkiln.config.patch(automatic_dynamic_shapes=False):
        cf = torchkiln.compile(f, backend=cnt)
        for n in (3, 4, 5):
            cf(torch.randn(n, 2), torch.randn(n, 2))
    assert cnt.frame_count == 3


def test_dynamic_true_one_graph_for_all_sizes():
    cnt = CompileCounter()
    cf = torchkiln.compile(f, backend=cnt, dynamic=True)
    for n in (3, 4, 5, 8):
        x, y = torch.randn(n, 2), torch.randn(n, 2)
        assert same(cf(x, y), f(x, y))
    assert cnt.frame_count == 1


def test_dynamic_true_specialises_zero_and_one():
    cnt = CompileCounter()
    cf = torchkiln.compile(f, backend=cnt, dynamic=True)
    for n in (3, 1, 4):
        x, y = torch.randn(n, 2), torch.randn(n, 2)
        assert same(cf(x, y), f(x, y))
    assert cnt.frame_count == 2  # size 1 gets its own graph


def test_mark_dynamic_first_compile_is_symbolic():
    rec = EagerAndRecordGraphs()
    cf = torchkiln.compile(f, backend=rec)
    x, y = torch.randn(5, 2), torch.randn(5, 2)
    torchkiln.mark_dynamic(x, 0)
    assert same(cf(x, y), f(x, y))
    assert any(d == {0} for d in _symbolic_dims(rec.graphs[0]).values())


def test_mark_static_wins_over_dynamic_true():
    rec = EagerAndRecordGraphs()
    cf = torchkiln.compile(f, backend=rec, dynamic=True)
    x, y = torch.randn(5, 2), torch.randn(5, 2)
    torchkiln.mark_static(x)
    torchkiln.mark_static(y)
    assert same(cf(x, y), f(x, y))
    assert all(not d for d in _symbolic_dims(rec.graphs[0]).values())


def test_mark_dynamic_bad_input():
    with pytest.raises(TypeError):
        torchkiln.mark_dynamic([1, 2], 0)
    with pytest.raises(IndexError):
        torchkiln.mark_dynamic(torch.randn(2), 3)
    t = torch.randn(2, 3)
    torchkiln.mark_dynamic(t, [0, -1], min=2, max=64)
    assert t._torchkiln_dynamic_dims == {0, 1}
    assert t._torchkiln_dim_ranges[1] == (2, 64)
