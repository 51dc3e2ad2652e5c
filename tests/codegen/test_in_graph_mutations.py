"""Input mutations written by the compiled graphs (batch-norm running statistics in a
training forward: aot/dispatch._in_graph_mutations, scheduler's input writes), and
scatters into their input's own buffer (index_add chains, lowering._fresh_copy)."""
from __future__ import annotations

import copy

import pytest
import torch

import torchkiln
from torchkiln.aot.config import config as aot_config
from torchkiln.testing import same
from torchkiln.utils.counters import counters


def test_batch_norm_running_stats_written_in_graph(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))  # compiled here, not loaded from a warm start
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 4, 3), torch.nn.BatchNorm2d(4, momentum=0.3))
    ref = copy.deepcopy(model)
    torchkiln.reset()
    before = counters["aot_autograd"]["mutations_in_graph"]
    compiled = torchkiln.compile(model)
    x = torch.randn(2, 3, 10, 10)
    with aot_config.patch(enable_autograd_cache=False), torchkiln.codegen.config.patch(fx_graph_cache=False):
        for _ in range(3):
            out, expect = compiled(x), ref(x)
            out.square().sum().backward()
            expect.square().sum().backward()
            assert same(out, expect, tol=1e-4)
    assert counters["aot_autograd"]["mutations_in_graph"] - before == 6  # mean, var, count of each
    for name, buf in model.named_buffers():
        assert same(buf, dict(ref.named_buffers())[name], tol=1e-5), name
    for p, q in zip(model.parameters(), ref.parameters()):
        assert same(p.grad, q.grad, tol=1e-2)  # (the same with the epilogue: a near-zero loss)


def _read_then_mutate(x, y):
    z = x * 3  # the old value, also when the output is realized after the copy_
    x.mul_(2)
    y.add_(1)
    return z, x + y


def _mutated_input_saved(x, w):
    x.add_(1)
    return (x * w).sum()


@pytest.mark.parametrize("fn", [_read_then_mutate, _mutated_input_saved])
def test_input_writes_keep_eager_order(fn):
    torchkiln.reset()
    args = [torch.randn(4, 6), torch.randn(4, 6, requires_grad=fn is _mutated_input_saved)]
    mine = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    expect = fn(*args)
    got = torchkiln.compile(fn)(*mine)
    assert same(got, expect)
    for a, b in zip(mine, args):
        assert same(a, b)
    if fn is _mutated_input_saved:
        expect.backward()
        got.backward()
        assert same(mine[1].grad, args[1].grad)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_index_add_chain(backend, backend_device):
    device = backend_device

    def f(x, i, src, j, src2):
        out = torch.zeros_like(x)
        out = out.index_add(0, i, src * 2)
        out = out.index_add(0, j, src2, alpha=3)
        twice = (x * 1).index_add(0, i % 6, (x * 1)[:10])  # the values read the same buffer
        same_node = (x + 0).index_put((j % 6,), (x + 0)[:5], accumulate=True)
        return out + 1, x.index_add(1, j % 6, x[:, :5]), twice, same_node

    x, src, src2 = torch.randn(16, 6, device=device), torch.randn(10, 6, device=device), torch.randn(5, 6, device=device)
    i, j = torch.randint(0, 16, (10,), device=device), torch.randint(0, 16, (5,), device=device)
    torchkiln.reset()
    compiled = torchkiln.compile(f, fullgraph=True)
    assert same(compiled(x, i, src, j, src2), f(x, i, src, j, src2), tol=1e-5)
    if device == "cpu":
        with pytest.raises((IndexError, RuntimeError)):  # ATen's CPU kernel: RuntimeError
            compiled(x, i - 20, src, j, src2)


def test_small_graph_skips_a_starting_pool(monkeypatch):
    from torchkiln.codegen.triton import compile_pool

    class Starting:  # workers still importing: nothing answered yet
        def submit(self, job):
            raise AssertionError("a few kernels should compile in-process")

    monkeypatch.setattr(compile_pool, "_pool", Starting())
    monkeypatch.setitem(compile_pool.stats, "jobs", 0)
    jobs = [("k", (), {})] * (compile_pool.MIN_JOBS_WHILE_STARTING - 1)
    assert compile_pool.precompile("/nonexistent.py", jobs, None).done()


def test_index_add_chain_in_place_on_cpu(tmp_path, monkeypatch):
    """C++ kernels: a dying accumulator gets ATen's ``index_add_`` (no copy of it per call,
    an MoE's expert loop); a graph input or a value read again keeps the out-of-place op."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))

    def f(x, i, src, j, src2):
        out = torch.zeros(16, 6)
        out = out.index_add(0, i, src * 2)
        out = out.index_add(0, j, src2, alpha=3)
        y = x * 2
        kept = y.index_add(0, j, src2)  # y is read again below: copied
        return out.relu(), kept + y, x.index_add(0, j, src2)

    x, src, src2 = torch.randn(16, 6), torch.randn(10, 6), torch.randn(5, 6)
    i, j = torch.randint(0, 16, (10,)), torch.randint(0, 16, (5,))
    torchkiln.reset()
    compiled = torchkiln.compile(f, fullgraph=True)
    assert same(compiled(x, i, src, j, src2), f(x, i, src, j, src2), tol=1e-5)
    x0 = x.clone()
    with torch.profiler.profile() as prof:
        got = compiled(x, i, src, j, src2)
    assert same(got, f(x, i, src, j, src2), tol=1e-5) and torch.equal(x, x0)
    ops = [e.name for e in prof.events() if e.name.startswith("aten::index_add")]
    assert ops.count("aten::index_add_") >= 2 and ops.count("aten::index_add") == 2, ops
