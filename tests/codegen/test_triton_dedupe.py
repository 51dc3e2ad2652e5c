"""Triton kernels of a transformer's repeated layers: the residual stream is stored once
(not rebuilt by every layer norm from every earlier layer's output), a layer norm stores
it in its own kernel, and identical layers share one jit function (one compile).
Under Triton's interpreter (CPU tensors, ``cpu_backend="triton"``)."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln.codegen import compile_fx_inner, config
from torchkiln.codegen.decompositions import decompositions


def _interpreter() -> bool:
    try:
        from torchkiln.codegen.triton.generator import interpreter_active
        return interpreter_active()
    except ImportError:
        return False


pytestmark = pytest.mark.skipif(not _interpreter(), reason="needs triton with TRITON_INTERPRET=1")


def _compile(fn, *args):
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    with config.patch(debug=True, cpu_backend="triton"):
        return compile_fx_inner(gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])


def _layers(x, w, b, *ms):
    # x = x + f(ln(x)) per layer, f a matmul (an extern kernel between the layers' kernels)
    for m in ms:
        x = x + F.layer_norm(x, (x.shape[-1],), w, b) @ m
    return (F.layer_norm(x, (x.shape[-1],), w, b),)


def test_residual_stream_stored_and_identical_layers_share_a_kernel():
    x, w, b = torch.randn(6, 32), torch.randn(32), torch.randn(32)
    deltas = [torch.randn(32, 32) / 8 for _ in range(5)]
    c = _compile(_layers, x, w, b, *deltas)
    for got, want in zip(c(x, w, b, *deltas), _layers(x, w, b, *deltas)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    src = c.kernel_source
    # the last layer norm read x, all 5 deltas, w and b: now at most 2 layers back
    for params in re.findall(r"def kernel\d+_persistent\(([^)]*)\)", src):
        assert params.count("in_ptr") <= 5, params
    # one kernel per layer norm (normalization fused with its statistics)
    assert len(re.findall(r"^def kernel\d+_launch", src, re.M)) == 6
    # the layers past the first two are the same jit function as an earlier one
    assert len(re.findall(r"^kernel\d+_persistent = kernel\d+_persistent$", src, re.M)) >= 2, src


def test_softmax_exp_is_not_stored():
    # exp(x - max) feeds the sum and the division: two reads, recomputed, never stored
    def f(x):
        return (torch.softmax(x, -1),)

    x = torch.randn(8, 64)
    c = _compile(f, x)
    torch.testing.assert_close(c(x)[0], f(x)[0])
    assert len(re.findall(r"^def kernel\d+_launch", c.kernel_source, re.M)) == 1
    assert c.kernel_source.count("tl.store(") == 2  # persistent and looped: the output only


def test_aliased_static_kernels_keep_their_own_launch_keys():
    # two identical pointwise kernels over different static sizes share a jit function
    # and a Launcher; each launch key names its own config and size class (a key of
    # device + pointer alignment alone launched the second with the first's XBLOCK: on
    # a GPU, a block of the larger kernel's elements was never written)
    from torchkiln.codegen.triton.kernel import KernelRenderer

    def f(a, b):
        return ((a * 2).relu() @ b.t(), (b * 2).relu())

    a, b = torch.randn(3, 5), torch.randn(1024, 5)
    c = _compile(f, a, b)
    for got, want in zip(c(a, b), f(a, b)):
        torch.testing.assert_close(got, want)
    src = c.kernel_source
    aliases = re.findall(r"^(kernel\d+) = (kernel\d+)$", src, re.M)
    assert aliases, src
    # the GPU launcher of each kernel (rendered without the interpreter)
    kernels = {k.name: k for k in c.kernels} if hasattr(c, "kernels") else None
    if kernels is None:
        pytest.skip("compiled graph does not expose its kernels")
    def config_parts(k):  # the key's parts besides the device and the pointers' alignment
        key = re.search(r"key = \((.*)\)", KernelRenderer(k).render_parts(False)[1]).group(1)
        return [p for p in key.split(", ") if p != "_cu[0]" and "data_ptr()" not in p]

    keys = {name: config_parts(k) for name, k in kernels.items()}
    for alias, first in aliases:
        assert keys[alias] != keys[first], (keys[alias], keys[first])
