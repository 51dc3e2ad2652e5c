"""Code generator fixes found by profiling the model suite's slow CPU rows: each test
checks the generated code's shape (what made the row slow) and, with eager PyTorch as
the oracle, its values."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln.codegen import compile_fx_inner, config
from torchkiln.codegen.decompositions import decompositions


def _compile(fn, *args):
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    with config.patch(debug=True):
        return compile_fx_inner(gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])


def _check(compiled, fn, *args, tol=1e-5):
    for a, b in zip(compiled(*args), fn(*args)):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, atol=tol, rtol=tol, equal_nan=True)


def _gelu_tanh(x):
    # transformers' NewGELUActivation (hf_gpt2): x.pow(3.0) in the inner loop
    return (0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0)))),)


def test_gelu_tanh_pow_is_products():
    x = torch.randn(64, 96)
    c = _compile(_gelu_tanh, x)
    assert "kiln::pow" not in c.kernel_source
    _check(c, _gelu_tanh, x)


@pytest.mark.parametrize("exponent", [1, 3.0, 4, 5.0, 7, 31, -1, -2.0, -3, -5])
def test_pow_integer_exponent_float(exponent):
    def fn(x):
        return (torch.pow(x, exponent),)

    x = torch.rand(8, 33) + 0.5
    x[0, 0] = 0.0
    x[0, 1] = -1.25
    c = _compile(fn, x)
    assert "kiln::pow" not in c.kernel_source
    _check(c, fn, x, tol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("exponent", [3, 5])
def test_pow_integer_exponent_integer_dtype(dtype, exponent):
    def fn(x):
        return (torch.pow(x, exponent),)

    x = torch.arange(-20, 20, dtype=dtype).reshape(4, 10)
    _check(_compile(fn, x), fn, x, tol=0)


@pytest.mark.parametrize("exponent", [2.5, 0.0, 40.0, float("inf"), float("nan")])
def test_pow_other_exponents_keep_pow(exponent):
    def fn(x):
        return (torch.pow(x, exponent),)

    x = torch.rand(8, 16) + 0.5
    c = _compile(fn, x)
    assert "kiln::pow" in c.kernel_source
    _check(c, fn, x, tol=1e-5)


def test_pow_half_integer_exponent():
    def fn(x):
        return (torch.pow(x, 3),)

    x = (torch.rand(8, 16) + 0.5).to(torch.bfloat16)
    _check(_compile(fn, x), fn, x, tol=1e-2)


def _masked_softmax(x, mask):
    # nanoGPT's causal attention without SDPA: masked_fill(~mask, -inf), softmax
    return (torch.softmax(x.masked_fill(~mask, float("-inf")), -1),)


def test_bool_buffers_are_bytes_compared_with_zero():
    x = torch.randn(2, 3, 16, 16)
    mask = torch.tril(torch.ones(16, 16, dtype=torch.bool))
    c = _compile(_masked_softmax, x, mask)
    assert "const bool*" not in c.kernel_source and "const uint8_t* __restrict__" in c.kernel_source
    _check(c, _masked_softmax, x, mask)


def test_bool_store_load_and_reductions():
    def fn(x, m):
        b = (x > 0) ^ m
        return b, b.any(-1), b.all(0), torch.where(b, x, -x).sum(), (~m).to(torch.float32) * x

    x = torch.randn(9, 17)
    m = torch.rand(9, 17) > 0.5
    c = _compile(fn, x, m)
    _check(c, fn, x, m, tol=1e-5)
