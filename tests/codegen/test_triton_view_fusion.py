"""Triton kernels across reshapes (CUDA, or Triton's interpreter with ``cpu_backend="triton"``):
a pointwise value viewed with its dims split stays inline (mm + bias, then a 3-d layer
norm or gelu: one kernel, as torch.compile's), and a transposed copy before a batched
matmul is stored in its source's order (reads and writes consecutive)."""
from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln.codegen import config, lowering, metrics
from torchkiln.testing import same


@pytest.fixture
def device(monkeypatch):
    if torch.cuda.is_available():
        return "cuda"
    pytest.importorskip("triton")
    from torchkiln.codegen.triton.generator import interpreter_active

    if not interpreter_active():
        pytest.skip("needs TRITON_INTERPRET=1")
    monkeypatch.setattr(config, "cpu_backend", "triton")
    return "cpu"


def _kernels(fn, *args):
    torchkiln.reset()
    metrics.reset()
    with torch.no_grad(), config.patch(mkldnn_linear=False):
        out = torchkiln.compile(fn)(*args)
    return out, metrics.generated_kernel_count


def test_split_view_of_bias_add_fuses_into_gelu_and_layer_norm(device, monkeypatch):
    torch.manual_seed(0)
    x, w, b = (torch.randn(4 * 8, 16, device=device), torch.randn(16, 24, device=device),
               torch.randn(24, device=device))
    res = torch.randn(4, 8, 24, device=device)
    ln = torch.nn.LayerNorm(24).to(device)

    def fn(x):
        h = (x @ w + b).view(4, 8, 24)  # mm, a pointwise bias add, a view that splits dim 0
        return torch.nn.functional.gelu(h), ln(h + res)

    out, n = _kernels(fn, x)
    assert same(out, fn(x), tol=1e-4)
    monkeypatch.setattr(lowering, "_split_reindex", lambda old, new: None)
    out, stored = _kernels(fn, x)
    assert same(out, fn(x), tol=1e-4)
    assert (n, stored) == (1, 2)  # the add stored by a kernel of its own, else computed in gelu's and the norm's


def test_split_reindex_only_splits():
    S = lowering.sympy.Integer
    assert lowering._split_reindex([S(4096), S(768)], [S(16), S(256), S(768)]) is not None
    assert lowering._split_reindex([S(16), S(256), S(768)], [S(4096), S(768)]) is None  # a merge
    assert lowering._split_reindex([S(6), S(4)], [S(4), S(6)]) is None
    idx = lowering.sympy.symbols("a b c")
    assert lowering._split_reindex([S(32), S(24)], [S(4), S(8), S(24)])(list(idx)) == [8 * idx[0] + idx[1], idx[2]]


def test_transposed_copy_before_bmm_keeps_source_order(device, monkeypatch):
    torch.manual_seed(0)
    k = torch.randn(2, 16, 3 * 8, device=device)  # (batch, seq, heads * dim)
    q = torch.randn(2, 3, 16, 8, device=device)
    strides = []
    real = lowering._source_order_stride
    monkeypatch.setattr(lowering, "_source_order_stride", lambda *a: strides.append(real(*a)) or strides[-1])

    def fn(k, q):
        kt = (k.view(2, 16, 3, 8).permute(0, 2, 3, 1) * 0.5)  # (2, 3, 8, 16): a strided read of k
        return torch.matmul(q, kt)  # bmm of (6, 16, 8) @ (6, 8, 16)

    out, _ = _kernels(fn, k, q)
    assert same(out, fn(k, q), tol=1e-4)
    # stored as (2, 3, 16, 8) in memory (seq before head dim, as k's head dim is innermost)
    assert [list(map(int, s)) for s in strides if s is not None] == [[384, 128, 1, 8]]
