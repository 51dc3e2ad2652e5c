"""FX graph cache (codegen/fx_graph_cache.py): a hit runs no lowering, no scheduling and
no C++ build; a graph the key cannot describe bypasses, counted, with its reason logged."""
import importlib
import logging
import warnings

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln import counters
from torchkiln.cache import clear_memory
from torchkiln.codegen.cpp import build as cpp_build

compile_fx_module = importlib.import_module("torchkiln.codegen.compile_fx")  # the package exports the function


def fn(x, w):
    return torch.nn.functional.gelu(x @ w).softmax(-1) * 2 + x.sum(0)


def test_a_hit_runs_no_lowering_and_no_compiler(monkeypatch):
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    torchkiln.compile(fn)(x, w)  # cold: lowers, builds, saves
    assert counters["inductor"]["fxgraph_cache_miss"] >= 1
    torchkiln.reset()
    clear_memory()  # as a new process: the entry comes from the directory
    counters.clear()
    calls = []
    real_lower, real_build = compile_fx_module._compile, cpp_build._compile
    monkeypatch.setattr(compile_fx_module, "_compile", lambda *a, **k: calls.append("lower") or real_lower(*a, **k))
    monkeypatch.setattr(cpp_build, "_compile", lambda *a, **k: calls.append("g++") or real_build(*a, **k))
    torch.testing.assert_close(torchkiln.compile(fn)(x, w), fn(x, w))
    assert counters["inductor"]["fxgraph_cache_hit"] >= 1 and not counters["inductor"].get("fxgraph_cache_miss")
    assert calls == []


def test_a_graph_the_key_cannot_describe_bypasses_with_its_reason(caplog):
    def g(x):
        return x.sin() + 1

    x = torch.randn(4)
    opaque = make_fx(g)(x)  # a node calling a local function: no stable name
    node = next(n for n in opaque.graph.nodes if n.op == "call_function")
    with opaque.graph.inserting_after(node):
        local = opaque.graph.call_function(lambda t: t * 3, (node,))
    node.replace_all_uses_with(local, delete_user_cb=lambda u: u is not local)
    opaque.recompile()
    for n in opaque.graph.nodes:  # the metadata codegen reads (make_fx leaves none on the new node)
        if n.op != "output":
            n.meta["val"] = n.meta.get("val", torch.empty(4))
    unbacked = make_fx(g)(x)  # data-dependent sizes: the runtime asserts are not in the graph text
    next(n for n in unbacked.graph.nodes if n.op == "call_function").meta["unbacked_bindings"] = {}
    with caplog.at_level(logging.INFO, logger="torchkiln.cache"), torchkiln.codegen.config.patch(fx_graph_cache=True):
        for gm, want in ((opaque, (x.sin() * 3) + 1), (unbacked, g(x))):
            counters.clear()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an unsupported graph runs eagerly, with a warning
                out = compile_fx_module.compile_fx_inner(gm, [x])(x)
            torch.testing.assert_close(out[0] if isinstance(out, (tuple, list)) else out, want)
            assert counters["inductor"]["fxgraph_cache_bypass"] == 1
            assert not counters["inductor"].get("fxgraph_cache_hit")
    reasons = [r.getMessage() for r in caplog.records if "FX graph cache bypass" in r.getMessage()]
    assert len(reasons) == 2 and "unbacked" in reasons[1], reasons
