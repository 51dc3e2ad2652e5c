"""torchkiln.explain: graph count, breaks with file:line, ops per graph, guards."""
import pytest
import torch

import torchkiln
from torchkiln.testing import same


@pytest.fixture(autouse=True)
def _reset():
    torchkiln.reset()
    yield
    torchkiln.reset()


def no_break(x, y):
    return (x + y).relu() * 2


def with_print(x):
    x = x.sin()
    print("a print is a graph break")
    return x.cos() + 1


def test_explain_single_graph():
    x, y = torch.randn(3), torch.randn(3)
    out = torchkiln.explain(no_break)(x, y)
    assert out.graph_count == 1
    assert out.graph_break_count == 0
    assert out.break_reasons == []
    assert out.op_count == 3
    assert len(out.ops_per_graph) == 1 and len(out.ops_per_graph[0]) == 3
    assert isinstance(out.graphs[0], torch.fx.GraphModule)
    assert same(out.graphs[0](x, y)[0], no_break(x, y))
    assert out.out_guards
    text = str(out)
    assert "Graph Count: 1" in text and "Graph Break Count: 0" in text


def test_explain_graph_break_reason_has_user_file_and_line():
    out = torchkiln.explain(with_print)(torch.randn(4))
    assert out.graph_count == 2
    assert out.graph_break_count == 1
    assert len(out.break_reasons) >= 1
    reason = out.break_reasons[0]
    assert "test_explain.py:" in reason.user_stack
    line = int(reason.user_stack.rsplit(":", 1)[1])
    assert line == with_print.__code__.co_firstlineno + 2
    assert out.op_count == 3
    text = str(out)
    assert "Break Reason 1:" in text and "test_explain.py" in text


def test_explain_graph_break_call():
    def f(x):
        x = x * 2
        torchkiln.graph_break()
        x = x + 1
        torchkiln.graph_break()
        return x - 3

    out = torchkiln.explain(f)(torch.randn(2))
    assert out.graph_count == 3
    assert out.graph_break_count == 2
    assert len(out.break_reasons) == 2


def test_explain_module_and_legacy_form():
    mod = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    out = torchkiln.explain(mod)(torch.randn(2, 3))
    assert out.graph_count == 1 and out.graph_break_count == 0
    with pytest.warns(FutureWarning):
        legacy = torchkiln.explain(no_break, torch.randn(2), torch.randn(2))
    assert legacy.graph_count == 1


def test_explain_leaves_no_cache_behind():
    torchkiln.explain(no_break)(torch.randn(2), torch.randn(2))
    assert torchkiln.counters["stats"]["unique_graphs"] == 0


def _helper_with_break(x):
    x = x + 1
    torchkiln.graph_break()
    return x.sum()


def test_explain_break_in_callee_listed_once():
    def g(x):
        x = x * 2
        print("break")
        return _helper_with_break(x)

    x = torch.randn(3)
    out = torchkiln.explain(g)(x)
    sites = [(br.reason, br.user_stack) for br in out.break_reasons]
    assert len(sites) == len(set(sites)) == 2
    line = _helper_with_break.__code__.co_firstlineno + 2
    assert any(stack.endswith(f"test_explain.py:{line}") for _, stack in sites)
