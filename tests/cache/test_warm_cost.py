"""What a warm start spends: work a cache hit does not need is not done on load.

(Timings live in benchmarks/warm_start_bench.py; these tests check the work itself.)
"""
import pytest
import torch

import torchkiln
from torchkiln import counters
from torchkiln.aot import graph_json
from torchkiln.compiled_autograd import protocol


def _train_step(model, x):
    model.zero_grad()
    torchkiln.compile(model)(x).sum().backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.skipif(protocol.unverified_reason() is not None, reason=str(protocol.unverified_reason()))
def test_backward_graph_is_parsed_only_when_compiled_autograd_traces_it(monkeypatch):
    """An AOT autograd cache hit keeps the backward ATen graph as bytes: a plain
    ``.backward()`` never parses it; compiled autograd parses it once, on first trace."""
    parsed = []
    original = graph_json.graph_from_json
    monkeypatch.setattr(graph_json, "graph_from_json", lambda data: parsed.append(1) or original(data))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)
    model(x).sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]

    torchkiln.reset()
    _train_step(model, x)  # cold: compiles, saves the entry with its backward graph
    torchkiln.reset()
    counters.clear()
    for got, want in zip(_train_step(model, x), expected):
        torch.testing.assert_close(got, want)
    assert counters["aot_autograd"]["autograd_cache_hit"] == 1
    assert parsed == []

    traced = []
    torchkiln.reset()
    try:
        with torchkiln.compiled_autograd.enable(lambda gm: traced.append(gm) or gm):
            for _ in range(2):
                for got, want in zip(_train_step(model, x), expected):
                    torch.testing.assert_close(got, want)
    finally:
        torchkiln.compiled_autograd.reset()
    assert parsed == [1]
    assert traced and torch.ops.aten.mm.default in [n.target for n in traced[0].graph.nodes]


def test_checking_a_record_runs_no_garbage_collection():
    """Parsing a record's expressions makes one node per token; with torch imported a
    collection they trigger scans millions of objects.  The check pauses the collector
    (the tree is acyclic) and turns it back on, also when the check refuses."""
    import gc

    from torchkiln.capture import warm_start

    exprs = [f"L['x'].size()[{i % 4}] == {i} and ___c{i} is not None" for i in range(3000)]
    collections = []

    def watch(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    forged = exprs + ["__import__('os')"]
    gc.collect()
    gc.callbacks.append(watch)
    try:
        names = warm_start.check_exprs(exprs)
    finally:
        gc.callbacks.remove(watch)
    assert "L" in names
    assert collections == []
    with pytest.raises(warm_start.NotRecordable):
        warm_start.check_exprs(forged)
    assert gc.isenabled()


def test_warm_triton_start_imports_no_kernel_generator(tmp_path):
    """An FX graph cache hit of Triton kernels imports the generated module through
    ``codegen/triton/loader.py``: not the kernel generator, whose renderer imports
    sympy (about 1 s of a GPU warm start).  Triton's interpreter stands in for a GPU."""
    pytest.importorskip("triton")
    from ._subprocess import run_worker

    env = {"TRITON_INTERPRET": "1", "TORCHKILN_CACHE_DIR": str(tmp_path)}
    cold = run_worker("tests.cache._warm_triton_worker", **env)
    assert cold["ok"] and cold["kernel_module"] and cold["inductor"].get("fxgraph_cache_miss", 0) >= 2
    warm = run_worker("tests.cache._warm_triton_worker", **env)
    assert warm["ok"] and warm["inductor"].get("fxgraph_cache_hit", 0) >= 2 and "fxgraph_cache_miss" not in warm["inductor"]
    assert warm["warm_start"].get("hit", 0) >= 1
    assert not warm["kernel_module"] and not warm["generator_module"] and not warm["sympy"]


def test_reading_and_installing_a_record_runs_no_garbage_collection(monkeypatch):
    """The whole record lookup (read, checks, guard build, load) pauses the collector:
    its temporaries, freed before it ends, bring no full collection forward (one at the
    end of a warm start's first call cost ~75 ms of nanogpt's 1.3 s process).  The
    collector is on again after a hit and after a bypass, and the hit's result is eager's."""
    import gc

    from torchkiln.capture import warm_start

    seen = []
    original = warm_start._install
    monkeypatch.setattr(warm_start, "_install", lambda *a, **k: seen.append(gc.isenabled()) or original(*a, **k))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
    x = torch.randn(3, 4)
    torchkiln.compile(model)(x)  # cold: saves the record
    for arg, outcome in ((x, "hit"), (x.double(), "bypass")):
        torchkiln.reset()
        warm_start._captured.clear()  # as a new process
        counters.clear()
        out = torchkiln.compile(model.to(arg.dtype))(arg)
        torch.testing.assert_close(out, model(arg))
        assert counters["warm_start"][outcome] == 1, dict(counters["warm_start"])
        assert seen.pop() is False and gc.isenabled()
