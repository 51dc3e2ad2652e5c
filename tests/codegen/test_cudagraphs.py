"""mode="reduce-overhead": the CUDA graph runner's logic (simulated on CPU: a "recording"
re-runs the function and writes into the recorded outputs), and on a GPU the real
recording: replay correctness, re-record on a new shape, fallback reasons, outputs
overwritten by the next replay."""
from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln.codegen import cudagraphs
from torchkiln.utils.counters import counters

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class _FakeGraph:
    def __init__(self):
        self.fn = self.outputs = None
        self.replays = 0

    def replay(self):
        self.replays += 1
        for o, n in zip(self.outputs, self.fn()):
            o.copy_(n)


def _fake_capture(graph, pool, fn):
    graph.fn = fn
    graph.outputs = tuple(torch.empty_like(o) for o in fn())  # a recording does not run the kernels
    return graph.outputs


@pytest.fixture
def simulated(monkeypatch):
    monkeypatch.setattr(cudagraphs, "DEVICE", "cpu")
    monkeypatch.setattr(cudagraphs, "_new_graph", _FakeGraph)
    monkeypatch.setattr(cudagraphs, "_capture", _fake_capture)
    monkeypatch.setattr(cudagraphs, "_new_pool", lambda: object())


def _gm(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(*args)


def test_warm_up_record_replay_and_copy_in(simulated):
    calls = []

    def compiled(w, x):
        calls.append(1)
        return (x * 2 + w,)

    w, x = torch.nn.Parameter(torch.randn(4), requires_grad=False), torch.randn(4)
    r = cudagraphs.CUDAGraphRunner(compiled, _gm(compiled, w, x), [w, x], training=False)
    torch.testing.assert_close(r(w, x)[0], x * 2 + w)          # warm-up: runs as compiled
    assert not r.recordings
    out = r(w, torch.ones(4))                                    # recorded and replayed
    torch.testing.assert_close(out[0], 2 + w)
    (rec,) = r.recordings.values()
    assert rec.static == [0] and [i for i, _ in rec.copies] == [1]  # the parameter is read in place
    y = torch.randn(4)
    out2 = r(w, y)
    torch.testing.assert_close(out2[0], y * 2 + w)
    assert out2[0] is out[0]                                     # inference: overwritten by the next replay
    with torch.no_grad():
        w.add_(1)                                                # in-place updates of static inputs are seen
    torch.testing.assert_close(r(w, y)[0], y * 2 + w)


def test_new_shape_records_again_and_moved_static_input(simulated):
    def compiled(a, b):
        return (a + b,)

    a, b = torch.randn(3), torch.randn(3)
    r = cudagraphs.CUDAGraphRunner(compiled, _gm(compiled, a, b), [a, b], training=True)
    r(a, b)
    r(a, b)
    assert len(r.recordings) == 1 and r.recordings[(a.shape, b.shape)].static == [0, 1]
    a2 = torch.randn(3)                                          # a static input moved: record again
    torch.testing.assert_close(r(a2, b)[0], a2 + b)
    assert r.recordings[(a.shape, b.shape)].static == [1]
    c, d = torch.randn(5), torch.randn(5)                        # a new shape: warm-up, then its own recording
    r(c, d)
    torch.testing.assert_close(r(c, d)[0], c + d)
    assert len(r.recordings) == 2
    first = r(c, d)[0]
    assert r.live_fallbacks == 0
    second = r(c, d)[0]                                          # `first` is alive: runs without the recording
    assert r.live_fallbacks == 1 and first.data_ptr() != second.data_ptr()
    torch.testing.assert_close(first, c + d)


def test_fallback_reasons(simulated):
    def mutate(a, b):
        a.add_(b)
        return (a * 1,)

    a, b = torch.randn(3), torch.randn(3)
    before = counters["inductor"]["cudagraph_skips"]
    r = cudagraphs.CUDAGraphRunner(mutate, _gm(mutate, a.clone(), b), [a, b], training=False)
    assert r.mutated == {0}
    r(a, b)
    r(a.clone(), b)                                              # the mutated input is not static: no recording
    assert r.skip_reason == "the graph mutates an input that is not static"
    assert counters["inductor"]["cudagraph_skips"] == before + 1

    def sync(x):
        return (x.nonzero(),)

    x = torch.randn(3)
    assert "synchronizes" in cudagraphs.graph_skip_reason(_gm(sync, x), [x])


def test_training_replays_only_over_dead_outputs(simulated):
    """A training recording's outputs are new tensors over its static memory; a replay
    waits until nothing uses them: saved tensors kept by autograd, a .grad, a view."""
    def fwd(w, x):
        return (x * w, x + 1)

    w, x = torch.nn.Parameter(torch.randn(4), requires_grad=False), torch.randn(4)
    r = cudagraphs.CUDAGraphRunner(fwd, _gm(fwd, w, x), [w, x], training=True)
    r(w, x)
    r(w, x)                                                      # recorded
    before = counters["inductor"]["cudagraph_live_outputs"]
    outs = [r(w, x * k) for k in (2.0, 3.0)]                     # the first call's outputs are alive
    assert r.live_fallbacks == 1 and counters["inductor"]["cudagraph_live_outputs"] == before + 1
    torch.testing.assert_close(outs[0][0], 2 * x * w)            # not overwritten by the second call
    torch.testing.assert_close(outs[1][0], 3 * x * w)
    del outs
    kept = r(w, x)[1][1:]                                        # a view of an output keeps it alive
    r(w, x)
    assert r.live_fallbacks == 2
    torch.testing.assert_close(kept, (x + 1)[1:])
    del kept
    out = r(w, x * 5)
    assert r.live_fallbacks == 2                                 # replayed
    torch.testing.assert_close(out[0], 5 * x * w)


def test_training_placeholder_watched(simulated):
    """An output that is a copied-in input (a saved input) is overwritten by the next
    copy-in: it is watched as well."""
    def fwd(w, x):
        return (x, x * w)

    w = torch.nn.Parameter(torch.randn(4), requires_grad=False)
    r = cudagraphs.CUDAGraphRunner(fwd, _gm(fwd, w, torch.randn(4)), [w, torch.randn(4)], training=True)
    for _ in range(3):                                           # x moves: recorded on the third call
        r(w, torch.randn(4))
    assert r.recordings
    x1 = torch.randn(4)
    saved = r(w, x1)[0]
    r(w, torch.randn(4))
    torch.testing.assert_close(saved, x1)


def test_training_graphs_recorded_unless_configured_off():
    from torchkiln.codegen import config

    def inner(gm, example_inputs):
        return gm

    def f(x):
        return (x + 1,)

    x = torch.randn(2)
    gm = _gm(f, x)
    assert isinstance(cudagraphs.CUDAGraphCompiler(inner, training=True)(gm, [x]), cudagraphs.CUDAGraphRunner)
    with config.patch(cudagraphs_training=False):
        assert cudagraphs.CUDAGraphCompiler(inner, training=True)(gm, [x]) is gm
    assert isinstance(cudagraphs.CUDAGraphCompiler(inner, training=False)(gm, [x]), cudagraphs.CUDAGraphRunner)


def test_cpu_inputs_skip_recording():
    def f(x):
        return (x + 1,)

    x = torch.randn(2)
    r = cudagraphs.CUDAGraphRunner(f, _gm(f, x), [x], training=False)
    assert r.skip_reason == "an input on cpu"
    torch.testing.assert_close(r(x)[0], x + 1)


def test_mode_validation_and_mark_step():
    from torchkiln.codegen.compile_fx import compile_fx

    with pytest.raises(ValueError, match="Unknown mode"):
        compile_fx(torch.fx.symbolic_trace(lambda x: x + 1), [torch.randn(2)], mode="fast")
    torchkiln.cudagraph_mark_step_begin()
    # CPU graphs under reduce-overhead run as compiled
    f = torchkiln.compile(lambda x: x * 3, mode="reduce-overhead")
    x = torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(f(x), x * 3)


@cuda
def test_reduce_overhead_on_gpu():
    torchkiln.reset()
    before = counters["inductor"]["cudagraph_skips"]

    def f(x, y):
        return torch.relu(x @ y + 1).sum(1)

    cf = torchkiln.compile(f, mode="reduce-overhead")
    for n in (8, 8, 8, 16, 16, 16, 8):
        x, y = torch.randn(n, 32, device="cuda"), torch.randn(32, 32, device="cuda")
        torch.testing.assert_close(cf(x, y), f(x, y))
    x = torch.randn(8, 32, device="cuda")
    a = cf(x, y)
    kept = a.clone()
    b = cf(x * 2, y)
    torch.testing.assert_close(b, f(x * 2, y))
    assert a.data_ptr() == b.data_ptr()            # overwritten by the next replay ...
    torch.testing.assert_close(kept, f(x, y))      # ... unless cloned
    assert counters["inductor"]["cudagraph_skips"] == before


@cuda
@pytest.mark.parametrize("record", [False, True])
def test_reduce_overhead_training_on_gpu(record):
    from torchkiln.codegen import config

    with config.patch(cudagraphs_training=record):
        _train_and_compare()


def _train_and_compare():
    torchkiln.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).cuda()
    ref.load_state_dict(model.state_dict())
    cm = torchkiln.compile(model, mode="reduce-overhead")
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(5):
        x = torch.randn(8, 16, device="cuda")
        for m, o in ((cm, opt), (ref, ref_opt)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
        torchkiln.cudagraph_mark_step_begin()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, atol=1e-4, rtol=1e-4)


def _mlp_pair():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 4)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                              torch.nn.Linear(32, 4)).cuda()
    ref.load_state_dict(model.state_dict())
    return model, ref


@cuda
def test_reduce_overhead_training_replays_on_gpu():
    """The usual loop (zero_grad(set_to_none), forward, backward, step) replays both
    recordings every step after warm-up; the results match eager's."""
    torchkiln.reset()
    model, ref = _mlp_pair()
    cm = torchkiln.compile(model, mode="reduce-overhead")
    opt, ref_opt = torch.optim.AdamW(model.parameters(), lr=0.01), torch.optim.AdamW(ref.parameters(), lr=0.01)
    x = torch.randn(8, 16, device="cuda")
    live = None
    for step in range(8):
        if step == 4:
            live = counters["inductor"]["cudagraph_live_outputs"]
        for m, o in ((cm, opt), (ref, ref_opt)):
            o.zero_grad(set_to_none=True)
            m(x).square().mean().backward()
            o.step()
    assert counters["inductor"]["cudagraph_live_outputs"] == live  # nothing kept the outputs alive
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, atol=1e-4, rtol=1e-4)


@cuda
def test_reduce_overhead_training_live_outputs_on_gpu():
    """Two forwards before one backward, gradients accumulated across steps without
    zero_grad, an output kept: never overwritten, the gradients match eager's."""
    torchkiln.reset()
    model, ref = _mlp_pair()
    cm = torchkiln.compile(model, mode="reduce-overhead")
    kept, ref_kept = [], []
    for step in range(6):
        xs = [torch.randn(8, 16, device="cuda") for _ in range(2)]
        for m, keep in ((cm, kept), (ref, ref_kept)):
            outs = [m(x) for x in xs]                               # the first forward's saved tensors are alive
            keep.append(outs[0])
            sum(o.square().mean() for o in outs).backward()         # .grad accumulates across steps
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
    for a, b in zip(kept, ref_kept):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@cuda
def test_cpu_tensor_in_graph_falls_back_on_gpu():
    torchkiln.reset()

    def f(x, c):
        return x * c

    cf = torchkiln.compile(f, mode="reduce-overhead")
    x, c = torch.randn(4, device="cuda"), torch.tensor(3.0)  # a 0-dim CPU operand
    for _ in range(3):
        torch.testing.assert_close(cf(x, c), f(x, c))
