"""oneDNN extern kernels where they beat ATen's default path on CPU.

``addmm(bias, x, w.t())`` and ``mm(x, w.t())`` -- a linear layer, ``w`` an [N, K]
row-major weight read through its transpose -- run as
``torch.ops.mkldnn._linear_pointwise(x, w, bias, "none", [], "")``: oneDNN's
matmul is 5-12% faster than ATen's ``addmm`` (MKL sgemm) at one thread on this
machine's shapes (BERT's [512, 256] x [256, 1024]: 2.71 ms vs 2.90 ms; 10-20% with
the weights coming from memory, as in a model).  ``addmm(bias, x, w)`` and ``mm(x, w)`` with ``w``
a row-major [K, N] buffer (transformers' ``Conv1D`` in GPT-2, a linear layer's input
gradient) run the same op on the weight view ``w.t()`` (strides [1, N], oneDNN reads
it in place) when the sizes are static: 10-18% faster than ATen's addmm on GPT-2's
shapes ([256, 128] x [128, 384]: 315 vs 279 us, weights from memory).  A weight
gradient ``mm(g.t(), x)`` with ``g`` stored row-major stays on ATen (``x`` is not
row-major); oneDNN was 10-20% slower there.  As
TorchInductor's ``mkldnn_fusion`` does, but without packing the weight (that needs
frozen parameters).  Preconditions, else ATen's op: float32 on CPU with oneDNN,
``beta == alpha == 1``, ``x`` a row-major [M, K] buffer, ``w`` a row-major [N, K]
buffer seen transposed, ``bias`` one value per output column ([N]), and ``M*K*N`` at least
``codegen.config.mkldnn_linear_min_macs`` (oneDNN's fixed cost per call loses on small
matmuls).  ``codegen.config.mkldnn_linear`` turns it off.

A bias added after such a linear without one (``linear`` of a 3-d input that is not
row-major, e.g. an LSTM's batch-first output: ``view(mm(x, w.t())) + b``) becomes its
bias argument (:func:`fuse_bias`) when ``b`` is an [N] graph input and nothing else
reads the linear's result: no kernel pass over it (the LSTM model's decoder: 175 us a
step, oneDNN's bias ~10).

A ReLU whose input is such a linear's result, used by nothing else (through views),
becomes the call's post-op (``attr="relu"``, :func:`fuse_relu`): no kernel pass over
the result and no buffer for it (T5's feed-forward [128, 128] x [128, 512]: 12 us less
per layer, oneDNN's post-op costing ~1.5 us).  A training graph saves the linear's
result for the backward (a second user), so this happens in inference.  Only ReLU:
oneDNN's GELU and SiLU post-ops cost more than the generated kernels (+28 us vs +20
on the same shape).  As TorchInductor's linear-unary fusion, which needs freezing.
"""
from __future__ import annotations

import sympy
import torch

from . import config
from .nodes import (Buffer, ExternKernel, InputBuffer, Layout, ReinterpretView, TensorBox, View, as_strided_view,
                    contiguous_strides)


def _eq(a, b) -> bool:
    return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0


def _viewed(box):
    """The buffer or strided view ``box`` reads, without storing anything; None if it
    is a computed value."""
    data = box.data if isinstance(box, TensorBox) else box
    if isinstance(data, (Buffer, ReinterpretView)):
        return data
    if isinstance(data, View):
        return as_strided_view(data)
    return None


def transposed_weight(mat2):
    """``w`` as an [N, K] row-major view when ``mat2`` is ``w.t()``, else None."""
    view = _viewed(mat2)
    if view is None or view.layout is None or len(view.layout.size) != 2:
        return None
    k, n = view.layout.size
    if not (_eq(view.layout.stride[0], 1) and _eq(view.layout.stride[1], k)):
        return None
    base = view.base if isinstance(view, ReinterpretView) else view
    lay = view.layout
    return ReinterpretView(base, Layout([n, k], [k, sympy.Integer(1)], lay.offset, lay.dtype, lay.device))


def plain_weight(mat2):
    """``mat2.t()`` as an [N, K] view (strides [1, N]) when ``mat2`` is a row-major
    [K, N] buffer with static sizes of at least 2 (a size of 1 leaves its stride to
    the allocator, and symbolic sizes may be 1 at run time), else None."""
    view = _viewed(mat2)
    if view is None or view.layout is None or len(view.layout.size) != 2:
        return None
    k, n = view.layout.size
    if not all(isinstance(s, (int, sympy.Integer)) and int(s) >= 2 for s in (k, n)):
        return None
    if not (_eq(view.layout.stride[0], n) and _eq(view.layout.stride[1], 1)):
        return None
    base = view.base if isinstance(view, ReinterpretView) else view
    lay = view.layout
    return ReinterpretView(base, Layout([n, k], [sympy.Integer(1), n], lay.offset, lay.dtype, lay.device))


def _row_major(box):
    """``box`` stored row-major ([M, K] strides [K, 1]), or None if it is a buffer
    already stored otherwise (nothing is copied for oneDNN's sake)."""
    if isinstance(box, TensorBox) and not box.is_realized() and _viewed(box) is None:
        return box.realize(contiguous_strides(box.get_size()))
    view = _viewed(box)
    if view is None or view.layout is None:
        return None
    lay = view.layout
    want = contiguous_strides(lay.size)
    if all(_eq(n, 1) or _eq(a, b) for n, a, b in zip(lay.size, lay.stride, want)):
        return view
    return None


def linear(bias, mat1, mat2, beta=1, alpha=1):
    """``(args, layout)`` of ``mkldnn._linear_pointwise`` for ``addmm``/``mm``
    (``bias`` None), or None when a precondition fails."""
    if not config.mkldnn_linear or beta != 1 or alpha != 1 or not torch.backends.mkldnn.is_available():
        return None
    boxes = [b for b in (bias, mat1, mat2) if b is not None]
    if not all(isinstance(b, TensorBox) for b in boxes):
        return None
    if any(b.dtype != torch.float32 or b.device.type != "cpu" for b in boxes):
        return None
    if len(mat1.get_size()) != 2 or len(mat2.get_size()) != 2:
        return None
    weight = transposed_weight(mat2)
    if weight is None:
        weight = plain_weight(mat2)
    if weight is None:
        return None
    n = weight.layout.size[0]
    if bias is not None and (len(bias.get_size()) != 1 or not _eq(bias.get_size()[0], n)):
        return None
    x = _row_major(mat1)
    b = _row_major(bias) if bias is not None else None
    if x is None or (bias is not None and b is None):
        return None
    m = mat1.get_size()[0]
    k = mat1.get_size()[1]
    if all(isinstance(s, (int, sympy.Integer)) for s in (m, k, n)) and int(m) * int(k) * int(n) < config.mkldnn_linear_min_macs:
        return None  # too small: oneDNN's per-call cost exceeds what its matmul saves
    layout = Layout([m, n], contiguous_strides([m, n]), sympy.Integer(0), torch.float32, mat1.device)
    return [x, weight, b, "none", [], ""], layout


_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default)


def _sole_linear(node, src, box):
    """The oneDNN linear (no post-op) whose result ``box`` (the FX ``src``, an argument of
    ``node``) is, through views, when nothing else reads it; else None."""
    while isinstance(src, torch.fx.Node) and src.target in _VIEWS and len(src.users) == 1:
        src = src.args[0]
    if not isinstance(src, torch.fx.Node) or len(src.users) != 1 or node.kwargs:
        return None
    if src.target not in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default):
        return None
    data = box.data if isinstance(box, TensorBox) else None
    while isinstance(data, View):
        data = data.base.data if isinstance(data.base, TensorBox) else data.base
    if isinstance(data, ReinterpretView):
        data = data.base
    if (not isinstance(data, ExternKernel) or data.op is not torch.ops.mkldnn._linear_pointwise.default
            or list(data.args[3:]) != ["none", [], ""]):
        return None
    return data


def fuse_bias(node, a, b):
    """``a + b`` for the FX ``add.Tensor`` ``node`` as the linear's result, that oneDNN
    linear given ``b`` as its bias, when one operand is (a view of) a linear without a
    bias that nothing else reads and the other an [N] float32 graph input (its columns'
    bias: a parameter); None otherwise (then the add is a kernel as usual).  A graph
    input exists before the linear runs, so the call may read it."""
    if node.target is not torch.ops.aten.add.Tensor or node.kwargs or len(node.args) != 2:
        return None
    for x, src, bias in ((a, node.args[0], b), (b, node.args[1], a)):
        if not isinstance(bias, TensorBox) or not isinstance(bias.data, InputBuffer):
            continue
        data = _sole_linear(node, src, x)
        if data is None or data.args[2] is not None or bias.dtype != torch.float32:
            continue
        n = data.layout.size[1]
        if len(bias.get_size()) != 1 or not _eq(bias.get_size()[0], n) or not _eq(x.get_size()[-1], n):
            continue
        if _row_major(bias) is None:
            continue
        data.args = [data.args[0], data.args[1], bias.data, "none", [], ""]
        view = _viewed(x)
        return TensorBox(view) if view is not None else x
    return None


def fuse_relu(node, x):
    """``relu(x)`` for the FX ``node`` as ``x`` itself, its producing oneDNN linear
    given a ReLU post-op, when ``x`` is (a view of) that linear's result and nothing
    else reads it; None otherwise (then the ReLU is a kernel as usual)."""
    data = _sole_linear(node, node.args[0] if node.args else None, x)
    if data is None:
        return None
    data.args = list(data.args[:3]) + ["relu", [], ""]
    # the result as a strided alias of the linear's buffer (a view realized for a
    # consumer would be a copy kernel)
    view = _viewed(x)
    return TensorBox(view) if view is not None else x
