"""Channels-last layout propagation through CNNs (``codegen.config.layout_optimization``).

oneDNN's convolutions and ATen's pooling kernels are several times faster on
channels-last (NHWC) tensors than on contiguous NCHW ones at one thread (a 7x7
stride-2 stem: 2.5 ms NCHW, 0.73 ms NHWC; 3x3 max pooling: 2.1 ms vs 0.14 ms), so,
as TorchInductor's layout optimization does, a 2-d convolution reads its input in
channels-last strides and its result is declared channels-last; the pointwise and
reduction kernels between convolutions index whatever strides their inputs have, so
the layout flows from one conv block to the next without transposes.  Graph outputs
keep eager's strides (``GraphLowering._output`` copies when they differ) and every
extern result is checked against the strides the wrapper expects at run time
(``WrapperCodegen._check_strides``), so a layout ATen did not produce costs a copy,
never a wrong read.

Only intermediate buffers change layout: placeholders keep theirs, and the fake
values of the graph are not touched.
"""
from __future__ import annotations

import sympy
import torch

from . import config, ir
from .nodes import Buffer, Pointwise, ReinterpretView, TensorBox

CONV_DTYPES = (torch.float32, torch.bfloat16)


def channels_last_strides(size) -> list:
    """NHWC strides of a 4-d ``size`` [N, C, H, W] (sympy): [H*W*C, 1, W*C, C]."""
    n, c, h, w = (sympy.sympify(s) for s in size)
    return [h * w * c, sympy.Integer(1), w * c, c]


def is_channels_last(layout) -> bool:
    """Whether a 4-d layout is channels-last (dims of size 1 may have any stride)."""
    if len(layout.size) != 4:
        return False
    want = channels_last_strides(layout.size)
    return all(sympy.simplify(n - 1) == 0 or sympy.simplify(a - b) == 0
               for n, a, b in zip(layout.size, layout.stride, want))


def conv_prefers_channels_last(x_val, w_val, transposed) -> bool:
    """Preconditions for running ``aten.convolution`` on channels-last: a 2-d conv
    (4-d input and weight) in float32/bfloat16, not transposed, on CPU with oneDNN or
    on CUDA (cuDNN's NHWC kernels; ``config.layout_optimization_cuda``)."""
    if not (config.layout_optimization and not transposed
            and isinstance(x_val, torch.Tensor) and isinstance(w_val, torch.Tensor)
            and x_val.dim() == 4 and w_val.dim() == 4
            and x_val.dtype in CONV_DTYPES and w_val.dtype == x_val.dtype):
        return False
    if x_val.device.type == "cuda":
        return bool(config.layout_optimization_cuda)
    return x_val.device.type == "cpu" and torch.backends.mkldnn.is_available()


def channels_last_cuda() -> bool:
    """Whether 2-d convolutions on CUDA run channels-last (``config.layout_optimization_cuda``)."""
    return bool(config.layout_optimization and config.layout_optimization_cuda)


def realize_channels_last(box: TensorBox):
    """``box`` stored channels-last: realized so if not yet, else copied when its
    layout is another one (a graph input in NCHW: one cheap pass before the conv)."""
    data = box.data
    if not isinstance(data, (Buffer, ReinterpretView)):
        data = box.realize(channels_last_strides(box.get_size()))
    if is_channels_last(data.layout):
        return data
    copy = TensorBox(Pointwise(list(box.get_size()), box.dtype, box.device, box.make_loader()))
    return copy.realize(channels_last_strides(box.get_size()))


def _direct_load_coeffs(data) -> list:
    """For each direct (not indirect) load of the 4-d pointwise ``data``: the coefficients
    of the four index variables in its index; [] where the loader cannot be evaluated
    on symbols."""
    vars_ = ir.index_vars("v", 4)
    try:
        value = data.make_loader()(vars_)
    except Exception:
        return []
    out = []
    for load in _loads(value):
        if not load.indirect:
            index = sympy.expand(load.index)
            out.append([index.coeff(v) for v in vars_])
    return out


def prefers_channels_last(data, size) -> bool:
    """Whether a pointwise value over a 4-d ``size`` reads a channels-last buffer of
    the same size with the channels-last index (conv -> batch norm -> ReLU): then
    storing it channels-last keeps the kernel's reads and writes in the same order."""
    if not config.layout_optimization or len(size) != 4 or not isinstance(data, Pointwise):
        return False
    if all(sympy.sympify(s).is_number and int(s) == 1 for s in size[1:2]):
        return False
    want = channels_last_strides(size)
    for coeffs in _direct_load_coeffs(data):
        if all(sympy.simplify(n - 1) == 0 or sympy.simplify(a - b) == 0 for n, a, b in zip(size, coeffs, want)) \
                and coeffs[1] == 1 and any(sympy.simplify(n - 1) != 0 for n in size[2:]):
            return True
    return False


def reads_channels_last(data, size) -> bool:
    """Whether a pointwise value over a 4-d ``size`` reads some buffer with the channel
    index contiguous (coefficient 1) and height and width strided (a pooling window
    over a channels-last input, :func:`prefers_channels_last` being the same-size case):
    stored channels-last, its kernel walks its input in order."""
    if not config.layout_optimization or len(size) != 4 or not isinstance(data, Pointwise):
        return False
    if sympy.sympify(size[1]) == 1 or all(sympy.sympify(s) == 1 for s in size[2:]):
        return False
    for coeffs in _direct_load_coeffs(data):
        if coeffs[1] == 1 and all(sympy.sympify(n) == 1 or (c.is_number and c > 1) for n, c in zip(size[2:], coeffs[2:])):
            return True
    return False


def channels_last_input(box) -> bool:
    """Whether ``box`` is (or, realized for an extern call, will be) stored
    channels-last: a channels-last buffer, or a pointwise value :func:`prefers_channels_last`."""
    data = box.data if isinstance(box, TensorBox) else box
    if isinstance(data, (Buffer, ReinterpretView)):
        return data.layout is not None and len(data.layout.size) == 4 and is_channels_last(data.layout) \
            and not all(sympy.sympify(s) == 1 for s in data.layout.size[1:2])
    return prefers_channels_last(data, box.get_size())


def _loads(value):
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, ir.Load):
            yield v
        for field in getattr(v, "__dataclass_fields__", ()):
            child = getattr(v, field)
            if isinstance(child, tuple):
                stack.extend(c for c in child if hasattr(c, "__dataclass_fields__"))
            elif hasattr(child, "__dataclass_fields__"):
                stack.append(child)
