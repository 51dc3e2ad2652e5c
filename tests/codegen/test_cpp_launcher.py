"""The C++ kernels' Python entry (codegen/cpp/launcher.py): tensors passed as they are
(their data pointer read in C, a view's offset included), size ints and doubles, the
index-check status, wrong calls refused; and the ctypes fallback where the extension
is unavailable gives the same results."""
from __future__ import annotations

import ctypes

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln.codegen import compile_fx_inner, config
from torchkiln.codegen.cpp import build, launcher


def _compile(fn, *args):
    gm = make_fx(fn)(*args)
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    with config.patch(fx_graph_cache=False):
        return compile_fx_inner(gm, vals)


def _graph(x, idx):
    return ((x * 2).sum(0), x[idx] + 1)


def _check(compiled):
    x = torch.randn(12, 6)[2:10]  # a view with a storage offset
    idx = torch.tensor([0, 7, 3])
    for got, want in zip(compiled(x, idx), _graph(x, idx)):
        torch.testing.assert_close(got, want)
    with pytest.raises(IndexError):
        compiled(x, torch.tensor([8]))


def test_entry_objects():
    compiled = _compile(_graph, torch.randn(8, 6), torch.tensor([0, 7, 3]))
    assert launcher.module() is not None
    assert ".data_ptr()" not in compiled.source
    _check(compiled)


def test_ctypes_fallback(monkeypatch):
    monkeypatch.setattr(launcher, "module", lambda: None)
    _check(_compile(_graph, torch.randn(8, 6), torch.tensor([0, 7, 3])))


def test_arguments_converted_and_checked():
    src = launcher.ENTRY_HELPER.replace("int64_t", "long") + r"""
extern "C" int k(const float* __restrict__ a, float* __restrict__ b, long n, double s) {
  for (long i = 0; i < n; i++) b[i] = a[i] * s;
  return n > 2;
}
""" + launcher.packed_entry("k", 2, "if").replace("int64_t", "long")
    lib, _ = build.start_build(src).result()
    fn = launcher.module().make("k", ctypes.cast(lib.k_kl, ctypes.c_void_p).value, b"ttif", True, lib)

    class Sub(torch.Tensor):
        pass

    a, b = torch.arange(6.0), torch.zeros(6)
    assert fn(a[1:], b.as_subclass(Sub), 2, 0.5) == 0  # a view's offset; a subclass
    torch.testing.assert_close(b, torch.tensor([0.5, 1.0, 0, 0, 0, 0]))
    assert fn(torch.nn.Parameter(a), b, 3, 2) == 1
    torch.testing.assert_close(b[:3], torch.tensor([0.0, 2.0, 4.0]))
    with pytest.raises(TypeError):
        fn(a, b, 2)
    with pytest.raises(TypeError):
        fn(a, b, 2.5, 1.0)
    with pytest.raises(AttributeError):  # no data_ptr()
        fn(a, "b", 2, 1.0)
