"""A pointwise value read by several consumers is computed once when one of them stores
it anyway (through a view): the generated code is checked for the recomputation, eager
PyTorch for the values."""
from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln.codegen import compile_fx_inner, config
from torchkiln.codegen.decompositions import decompositions


def _compile(fn, *args):
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    with config.patch(debug=True):
        return compile_fx_inner(gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])


def _silu_linear_backward(g, h, x):
    # a Linear -> SiLU's backward: the silu gradient d feeds the weight gradient's mm
    # through a transpose and the bias gradient's column sum
    d = torch.ops.aten.silu_backward(g, h)
    return d.t() @ x, d.sum(0)


def _sigmoids(source: str) -> int:
    """How many times the kernels compute a sigmoid: torch 2.13+ decomposes silu_backward
    with ``sigmoid``, torch 2.11 with ``1 / (1 + exp(-x))``."""
    kernels = source[source.index('extern "C" void kernel'):]  # past the prelude's helpers
    return kernels.count("kiln::sigmoid(") + kernels.count("kiln::exp(")


def test_view_of_a_shared_value_stores_the_value_once():
    g, h, x = torch.randn(64, 48), torch.randn(64, 48), torch.randn(64, 16)
    c = _compile(_silu_linear_backward, g, h, x)
    # the column sum reads the stored gradient instead of recomputing sigmoid
    assert _sigmoids(c.kernel_source) == 1, c.kernel_source
    for a, b in zip(c(g, h, x), _silu_linear_backward(g, h, x)):
        assert a.shape == b.shape and a.stride() == b.stride()
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_view_of_a_value_read_once_is_not_stored_twice():
    def f(a, x):
        d = a.sigmoid() * a
        return (d.t() @ x,)

    a, x = torch.randn(32, 8), torch.randn(32, 4)
    c = _compile(f, a, x)
    assert _sigmoids(c.kernel_source) == 1
    torch.testing.assert_close(c(a, x)[0], f(a, x)[0])



def _rms_norm_layers(x, w, *ms):
    # T5's stack: x = x + rms_norm(x) @ m per layer, then a last norm; the residual
    # stream is read by the next norm's mean of squares and by the next add, with a
    # matmul (an extern call) between the layers' kernels
    def norm(v):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    for m in ms:
        x = x + norm(x) @ m
    return (norm(x),)


def test_residual_stream_is_stored_not_rebuilt_by_every_norm():
    # C++ kernels as Triton's (graph._many_reads): with the stream inlined into every
    # consumer, a norm read 5 earlier buffers (and w); now at most 4
    x, w = torch.randn(6, 32), torch.randn(32)
    deltas = [torch.randn(32, 32) / 8 for _ in range(6)]
    c = _compile(_rms_norm_layers, x, w, *deltas)
    torch.testing.assert_close(c(x, w, *deltas)[0], _rms_norm_layers(x, w, *deltas)[0], rtol=1e-5, atol=1e-5)
    import re

    for params in re.findall(r'extern "C" \w+ kernel\d+\(([^)]*)\)', c.kernel_source):
        assert params.count("const ") <= 5, params  # at most 4 buffers (realize_reads_threshold) and w
