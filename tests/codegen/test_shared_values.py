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
