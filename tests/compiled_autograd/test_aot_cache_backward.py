"""A forward loaded from the AOT autograd cache gives compiled autograd the same
backward as a cold compile: its backward ATen graph, traced into the captured graph
(not a ``call_backward`` node)."""
import pytest
import torch

import torchkiln
import torchkiln.aot
import torchkiln.codegen
from torchkiln.compiled_autograd import protocol, runtime
from torchkiln.utils.counters import counters

pytestmark = pytest.mark.skipif(protocol.unverified_reason() is not None,
                                reason=str(protocol.unverified_reason()))


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_cache_hit_keeps_the_traced_backward(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torchkiln.codegen.config, "fx_graph_cache", True)
    monkeypatch.setattr(torchkiln.aot.config, "enable_autograd_cache", True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    model(x).sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]

    graphs = []

    def compiler_fn(gm):
        graphs.append(gm)
        return torchkiln.compile(gm, backend="aot_eager", fullgraph=True)

    torchkiln.reset()
    counters.clear()
    try:
        with torchkiln.compiled_autograd.enable(compiler_fn):
            for _ in range(2):
                torchkiln.reset()  # the second compile is an AOT autograd cache hit
                model.zero_grad()
                torchkiln.compile(model, backend="inductor")(x).sum().backward()
                for p, e in zip(model.parameters(), expected):
                    torch.testing.assert_close(p.grad, e)
        hits = counters["aot_autograd"]["autograd_cache_hit"]
    finally:
        torchkiln.compiled_autograd.reset()
        torchkiln.reset()
    assert hits == 1
    assert len(graphs) == 2
    cold, hit = (_targets(gm) for gm in graphs)
    for targets in (cold, hit):
        assert runtime.call_backward not in targets and runtime.call_backward_opaque not in targets
    assert cold == hit  # the same ATen backward, op for op
    assert torch.ops.aten.mm.default in hit


def test_stored_graph_names_resolve_only_to_graph_functions():
    """The stored backward is data: names outside ATen overloads, operator/math functions
    and torch.sym_* do not resolve (a forged entry cannot call torch.load or os.system)."""
    from torchkiln.aot import graph_json

    assert graph_json._target_from_json(["op", "aten", "mm", "default"]) is torch.ops.aten.mm.default
    for bad in (["fn", "torch", "load"], ["fn", "torch", "os.system"], ["fn", "operator", "__import__"],
                ["op", "aten", "mm", "__class__"], ["op", "load_library", "a", "b"]):
        with pytest.raises((ValueError, AttributeError)):
            graph_json._target_from_json(bad)
