"""Channels-last propagation (codegen/layout.py): 2-d convolutions on CPU read and
write NHWC, kernels between conv blocks keep it, graph outputs keep eager's strides.
Eager PyTorch is the oracle for values and for every output's strides."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchkiln
from torchkiln.codegen import config


class Block(nn.Module):
    def __init__(self, c=8, groups=1, dilation=1, bias=True, padding_mode="zeros"):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(c)
        self.conv = nn.Conv2d(c, c, 3, padding=dilation, dilation=dilation, groups=groups, bias=bias,
                              padding_mode=padding_mode)
        self.bn2 = nn.BatchNorm2d(c)
        self.head = nn.Linear(c, 5)

    def forward(self, x):
        y = F.max_pool2d(F.relu(self.bn(self.stem(x))), 3, 2, 1)
        z = F.relu(self.bn2(self.conv(y)) + y)
        return self.head(z.mean((2, 3))), z


def _run(model, x, train=False):
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):  # non-trivial running statistics
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    model.train(train)
    compiled = torchkiln.compile(model)
    with config.patch(debug=True):
        if train:
            out = compiled(x)
            out[0].sum().backward()
            return out, [p.grad.clone() for p in model.parameters()]
        with torch.no_grad():
            return compiled(x), None


def _eager(model, x, train=False):
    model.train(train)
    if train:
        for p in model.parameters():
            p.grad = None
        out = model(x)
        out[0].sum().backward()
        return out, [p.grad.clone() for p in model.parameters()]
    with torch.no_grad():
        return model(x), None


def _check(model, x, train=False):
    torchkiln.reset()
    got, got_grads = _run(model, x, train)
    ref, ref_grads = _eager(model, x, train)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
        assert a.stride() == b.stride(), (a.stride(), b.stride())
    for a, b in zip(got_grads or (), ref_grads or ()):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("kw", [{}, {"groups": 4, "bias": False}, {"dilation": 2}, {"padding_mode": "reflect"}])
def test_conv_blocks_inference(kw):
    torch.manual_seed(0)
    _check(Block(**kw), torch.randn(2, 3, 20, 20))


def test_conv_blocks_training():
    torch.manual_seed(0)
    _check(Block(), torch.randn(2, 3, 16, 16), train=True)


def test_saved_activations_keep_channels_last():
    """A conv output saved for the backward is returned channels-last by the forward
    (only user-visible outputs take eager's strides) and the backward is compiled for
    that layout; the conv weights are handed to oneDNN channels-last too."""
    from torchkiln.aot import aot_function

    torch.manual_seed(0)
    w1, w2 = torch.randn(8, 3, 3, 3, requires_grad=True), torch.randn(8, 8, 3, 3, requires_grad=True)

    def fn(x, w1, w2):
        y = torch.relu(F.conv2d(x, w1, padding=1))
        return F.conv2d(y, w2, padding=1) * 2

    graphs = {}

    def compiler(name):
        def compile_(gm, vals):
            from torchkiln.codegen import compile_fx_inner
            with config.patch(debug=True, fx_graph_cache=False):
                graphs[name] = compile_fx_inner(gm, vals)
            return graphs[name]
        return compile_

    x = torch.randn(2, 3, 10, 10)
    out = aot_function(fn, compiler("fw"), compiler("bw"))(x, w1, w2)
    out.sum().backward()
    grads = [w1.grad, w2.grad]
    w1.grad = w2.grad = None
    ref = fn(x, w1, w2)
    ref.sum().backward()
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    assert out.stride() == ref.stride()
    for a, b in zip(grads, [w1.grad, w2.grad]):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)
    fw_strides = graphs["fw"].output_strides
    assert (800, 1, 80, 8) in fw_strides and fw_strides[0] == ref.stride()
    # the backward expects the saved activation channels-last: no restride on entry
    assert "if relu.stride() != (800, 1, 80, 8, ):" in graphs["bw"].source


@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
def test_output_strides_follow_eager(fmt):
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 6, 3, padding=1)
    x = torch.randn(2, 4, 9, 9).contiguous(memory_format=fmt)
    _check(conv, x)


def test_float64_and_conv1d_keep_layout():
    torch.manual_seed(0)
    _check(Block().double(), torch.randn(2, 3, 12, 12, dtype=torch.float64))
    _check(nn.Sequential(nn.Conv1d(3, 4, 3), nn.ReLU()), torch.randn(2, 3, 10))


def test_layout_in_wrapper():
    """The stem conv reads NHWC, its result is NHWC, and the batch-norm/ReLU kernel
    writes NHWC for the next conv: no NCHW buffer between convolutions."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchkiln.codegen import compile_fx_inner
    from torchkiln.codegen.decompositions import decompositions

    w1, w2 = torch.randn(8, 3, 3, 3), torch.randn(8, 8, 3, 3)

    def fn(x):
        y = torch.relu(torch.ops.aten.convolution(x, w1, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1))
        return (torch.ops.aten.convolution(y, w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1).sum(),)

    x = torch.randn(2, 3, 10, 10)
    gm = make_fx(fn, decomposition_table=decompositions())(x)
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    for enabled in (True, False):
        with config.patch(debug=True, layout_optimization=enabled, fx_graph_cache=False):
            compiled = compile_fx_inner(gm, vals)
        assert ("(800, 1, 80, 8, )" in compiled.source) == enabled
        torch.testing.assert_close(compiled(x)[0], fn(x)[0], atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("args,fmt", [
    (dict(kernel_size=3, stride=2, padding=1), "nhwc"), (dict(kernel_size=2), "chw"),
    (dict(kernel_size=3, stride=2, ceil_mode=True), "nchw"),
    (dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0), dilation=(2, 1)), "nchw"),
])
def test_max_pool_values_kernel(args, fmt):
    """Max pooling whose indices nothing reads is a generated kernel (NaN propagates,
    padding never wins); with the indices used, ATen's values and indices (a generated
    kernel for unpadded windows, else ATen's)."""
    x = torch.randn(2, 4, 9, 11)
    x[0, 1, 2, 3] = float("nan")
    x[1, 2] = float("-inf")
    if fmt == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    elif fmt == "chw":
        x = x[0]

    def fn(x):
        return F.max_pool2d(x * 2, **args)

    torchkiln.reset()
    with config.patch(debug=True), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager
        got = torchkiln.compile(fn)(x)
        ref = fn(x)
        torch.testing.assert_close(got, ref, equal_nan=True)
        assert got.stride() == ref.stride()
        got_i = torchkiln.compile(lambda x: F.max_pool2d(x * 2, return_indices=True, **args))(x)
        ref_i = F.max_pool2d(x * 2, return_indices=True, **args)
        torch.testing.assert_close(got_i[0], ref_i[0], equal_nan=True)
        torch.testing.assert_close(got_i[1], ref_i[1])


@pytest.mark.parametrize("shape,fmt,k,s", [
    ((2, 8, 8, 8), "nhwc", 2, 2), ((2, 8, 9, 7), "nchw", 2, 2), ((2, 4, 9, 9), "nhwc", 3, 3),
    ((3, 6, 10), "chw", 2, 2), ((2, 4, 9, 9), "nchw", 3, 2),
])
def test_max_pool_with_indices_training(shape, fmt, k, s):
    """Training through an unpadded max pooling: values and indices are one generated
    kernel (ties take the first maximum, NaN the last NaN, as ATen's), and for
    non-overlapping windows the input gradient is a generated gather (rows and columns
    past the last window get 0); eager's values, indices and gradients."""
    torch.manual_seed(0)
    x = torch.randn(*shape)
    x[(0, 0, 0, slice(0, 2))[:len(shape)]] = 0.5  # a tie inside a window
    if len(shape) == 4:
        x[1, 1, 2, 2:4] = float("nan")  # two NaNs in one window
        x[1, 2] = float("-inf")
    if fmt == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)

    def fn(a):
        return F.max_pool2d_with_indices(torch.relu(a * 2), k, s)

    torchkiln.reset()
    with config.patch(debug=True), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        ref, got = fn(a), torchkiln.compile(fn)(b)
        torch.testing.assert_close(got[0], ref[0], equal_nan=True)
        torch.testing.assert_close(got[1], ref[1])
        g = torch.randn_like(ref[0])
        ref[0].backward(g)
        got[0].backward(g)
        torch.testing.assert_close(b.grad, a.grad, equal_nan=True)


def test_max_pool_with_indices_is_generated():
    """conv -> ReLU -> MaxPool2d(2) in training: no ATen pooling call forward or backward."""
    w = torch.randn(8, 3, 3, 3, requires_grad=True)

    def fn(x):
        y = torch.relu(F.conv2d(x, w, padding=1))
        return F.max_pool2d(y, 2).sum()

    x = torch.randn(2, 3, 10, 10)
    torchkiln.reset()
    with config.patch(debug=True, fx_graph_cache=False):
        compiled = torchkiln.compile(fn)
        compiled(x).backward()
        w.grad = None
        with torch.profiler.profile() as prof:
            compiled(x).backward()
    ops = {e.name for e in prof.events()}
    assert "CompiledFunctionBackward" in ops and not any("max_pool2d" in name.lower() for name in ops), ops
    grad, w.grad = w.grad, None
    fn(x).backward()
    torch.testing.assert_close(grad, w.grad, atol=1e-4, rtol=1e-4)


def _compile_aten(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchkiln.codegen import compile_fx_inner
    from torchkiln.codegen.decompositions import decompositions

    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    with config.patch(debug=True, fx_graph_cache=False):
        return compile_fx_inner(gm, vals)


def test_conv_backward_of_nchw_input_runs_channels_last():
    """The weight gradient of a first-layer convolution (its input an NCHW graph input)
    is computed from channels-last input, weight and gradient: the input is copied
    NHWC in the backward (ATen ran an NCHW backward otherwise, ~2.7x slower)."""
    def fn(x, w):
        y = torch.ops.aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        g = torch.relu(y) * 2
        return torch.ops.aten.convolution_backward(g, x, w, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                   [False, True, False])[1:2]

    x, w = torch.randn(2, 3, 10, 10), torch.randn(8, 3, 3, 3)
    compiled = _compile_aten(fn, x, w)
    assert compiled.source.count("(300, 1, 30, 3, )") == 2  # x copied NHWC for the forward and the backward
    got, ref = compiled(x, w)[0], fn(x, w)[0]
    torch.testing.assert_close(got, ref, atol=1e-3, rtol=1e-4)
    assert got.stride() == ref.stride()


def test_channels_last_kernel_loops_channels_innermost():
    """A pointwise kernel storing channels-last loops N, H, W, C: its vector loop
    reads and writes consecutive elements (it looped over W with stride C)."""
    from torchkiln.codegen.scheduler import loop_order

    assert loop_order([0, 1, 2, 3], [800, 1, 80, 8]) == [0, 2, 3, 1]
    assert loop_order([0, 1, 2, 3], [800, 100, 10, 1]) == [0, 1, 2, 3]
    w1, w2 = torch.randn(8, 3, 3, 3), torch.randn(8, 8, 3, 3)

    def fn(x, scale):
        y = torch.relu(torch.ops.aten.convolution(x, w1, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1) * scale)
        return (torch.ops.aten.convolution(y, w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),)

    x, scale = torch.randn(2, 3, 10, 10), torch.randn(1, 8, 1, 1)
    compiled = _compile_aten(fn, x, scale)
    src = compiled.kernel_source
    assert "for (int64_t x3 = 0; x3 < 8; x3++)" in src  # channels innermost
    torch.testing.assert_close(compiled(x, scale)[0], fn(x, scale)[0], atol=1e-3, rtol=1e-4)


def test_channels_last_max_pool_is_aten():
    """Max pooling of a channels-last value runs ATen's NHWC kernel (vectorized over
    channels), with the batch norm/ReLU before it a kernel of its own."""
    w = torch.randn(8, 3, 3, 3)

    def fn(x):
        y = torch.relu(torch.ops.aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1) + 1)
        return (torch.ops.aten.max_pool2d_with_indices(y, [3, 3], [2, 2], [1, 1])[0],)

    x = torch.randn(2, 3, 10, 10)
    compiled = _compile_aten(fn, x)
    assert "kiln_maximum(t" not in compiled.kernel_source  # the window is ATen's
    out, ref = compiled(x)[0], fn(x)[0]
    torch.testing.assert_close(out, ref)
    assert out.stride() == ref.stride()


def test_max_pool_default_args_keep_channels_last():
    """max_pool2d_with_indices called with its defaults left out (MaxPool2d(2)): the
    result is declared channels-last as ATen returns it, not copied to NCHW and back
    before the next convolution."""
    w1, w2 = torch.randn(8, 3, 3, 3), torch.randn(4, 8, 3, 3)

    def fn(x):
        y = torch.relu(torch.ops.aten.convolution(x, w1, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1))
        p = torch.ops.aten.max_pool2d_with_indices(y, [2, 2], [2, 2])[0]
        return (torch.ops.aten.convolution(p, w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),)

    x = torch.randn(2, 3, 10, 10)
    compiled = _compile_aten(fn, x)
    assert "(200, 1, 40, 8, )" in compiled.source
    torch.testing.assert_close(compiled(x)[0], fn(x)[0], atol=1e-3, rtol=1e-4)


def test_per_channel_values_tabled():
    """A channels-last batch norm computes ``1 / sqrt(var + eps)`` once per channel in a
    table before the loop nest, not per element; values match eager's."""
    w = torch.randn(8, 3, 3, 3)
    mean, var, g, b = torch.randn(8), torch.rand(8) + 0.5, torch.randn(8), torch.randn(8)

    def fn(x):
        y = torch.ops.aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        y = torch.relu(torch.ops.aten._native_batch_norm_legit_no_training(y, g, b, mean, var, 0.1, 1e-5)[0])
        return (torch.ops.aten.convolution(y, w.new_ones(4, 8, 1, 1), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),)

    x = torch.randn(2, 3, 10, 10)
    compiled = _compile_aten(fn, x)
    assert "tbl" in compiled.kernel_source
    torch.testing.assert_close(compiled(x)[0], fn(x)[0], atol=1e-4, rtol=1e-4)
