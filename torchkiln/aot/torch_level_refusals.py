"""Captured (torch-level) graphs that AOT autograd must not trace: calls eager refuses, or
computes otherwise, where torch's own decompositions would compute a value.

Torch decomposes some ops at the Autograd key under the Python dispatcher (hardshrink,
native_batch_norm, upsample_*, the margin losses; max_pool1d through
max_pool2d_with_indices, which has integer kernels), so AOT autograd's tracing decomposes
them before any decomposition table (codegen's, or none for "aot_eager") is consulted, and
the traced graph computes an answer where eager raises (integer inputs) or another one
(multilabel_margin_loss's labels after the first -1; a promoted loss dtype).  Such a graph
is not traced: :func:`~torchkiln.aot.api.aot_module_simplified` returns its ``forward``, which
runs eagerly and raises eager's error, for every AOT-based backend.  Codegen's
``eager_refusals`` handles the ATen-level calls that reach its lowering."""
from __future__ import annotations

import torch

INTEGRAL = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                      torch.uint16, torch.uint32, torch.uint64})


def _half_or_integral(x) -> bool:
    return x.dtype in INTEGRAL or x.dtype == torch.float16


def multi_margin_loss_refused(x, target, p=1, margin=1, weight=None, *a, **k) -> bool:
    """multi_margin_loss: a float (not half) input, a Long target, a weight of the input's dtype."""
    return (_half_or_integral(x) or target.dtype != torch.int64
            or isinstance(weight, torch.Tensor) and weight.dtype != x.dtype)


def _input(args, kwargs):
    x = args[0] if args else kwargs.get("input")
    return x if isinstance(x, torch.Tensor) else None


def _float_only_call(*args, **kwargs) -> bool:
    x = _input(args, kwargs)
    return x is not None and x.dtype in INTEGRAL


def _multi_margin_loss_call(*args, **kwargs) -> bool:
    x = _input(args, kwargs)
    target = args[1] if len(args) > 1 else kwargs.get("target")
    weight = args[4] if len(args) > 4 else kwargs.get("weight")
    return x is not None and multi_margin_loss_refused(x, target, weight=weight)


def _mixed_dtypes_call(*args, **kwargs) -> bool:
    """Losses whose kernels compute in the input's dtype (and refuse a target of another:
    binary_cross_entropy) where the meta kernels promote: a float64 target or weight of a
    float32 input gave a float64 loss, eager's is float32."""
    x = _input(args, kwargs)
    others = [v for v in list(args[1:]) + list(kwargs.values()) if isinstance(v, torch.Tensor)]
    return x is not None and any(o.dtype != x.dtype for o in others)


def _always(*args, **kwargs) -> bool:
    """torch's decomposition of multilabel_margin_loss counts the labels after a target's
    first -1 (eager's kernel stops there): 1.61 where eager says 0.94 for the target row
    [1, -1, 0]; it runs at the Autograd key, so no table entry keeps the ATen kernel."""
    return True


def _interpolate_call(mode="nearest"):
    def check(*args, **kwargs) -> bool:
        x = _input(args, kwargs)
        how = args[3] if len(args) > 3 else kwargs.get("mode", mode)
        if x is None or x.dtype not in INTEGRAL:
            return False
        # uint8 bilinear/bicubic: eager's kernel rounds fixed-point weights (the float
        # decomposition differed by 1 at some pixels); nearest is exact either way
        return x.dtype != torch.uint8 or how not in ("nearest", "nearest-exact")
    return check


def _max_pool1d_call(*args, **kwargs) -> bool:
    returns_indices = args[6] if len(args) > 6 else kwargs.get("return_indices", False)
    return _float_only_call(*args, **kwargs) and not returns_indices


def _torch_level() -> dict:
    F, nn = torch.nn.functional, torch._C._nn
    return {
        F.hardshrink: _float_only_call, torch.hardshrink: _float_only_call, "hardshrink": _float_only_call,
        F.softshrink: _float_only_call, F.batch_norm: _float_only_call, F.instance_norm: _float_only_call,
        torch.batch_norm: _float_only_call, torch.instance_norm: _float_only_call,
        F.interpolate: _interpolate_call(), F.upsample: _interpolate_call(), F.upsample_nearest: _interpolate_call(),
        F.upsample_bilinear: _interpolate_call("bilinear"), F.max_pool1d: _max_pool1d_call,
        torch.max_pool1d: _max_pool1d_call, F.multi_margin_loss: _multi_margin_loss_call,
        F.multilabel_margin_loss: _always, F.soft_margin_loss: _mixed_dtypes_call,
        F.huber_loss: _mixed_dtypes_call, F.binary_cross_entropy: _mixed_dtypes_call,
        # the bindings the F functions call (a compiled F function's own frame records these)
        nn.multi_margin_loss: _multi_margin_loss_call, nn.multilabel_margin_loss: _always,
        nn.soft_margin_loss: _mixed_dtypes_call, nn.huber_loss: _mixed_dtypes_call,
        nn.binary_cross_entropy: _mixed_dtypes_call,
    }


def _out_of_another_dtype(*args, out=None, **kwargs) -> bool:
    """An ``out=`` tensor of another dtype than the first tensor argument: eager's out=
    kernels compute in the out tensor's dtype (``torch.prod(f, 0, out=int64)`` multiplies
    the values cast to int64: 0 where the functional prod cast afterwards gave -3) or
    refuse it (amax, clamp, round into float64 from float32); functionalization computes
    the functional op and copies.  Refused whenever the dtypes differ (type promotion
    into out, ``add(i, f, out=float)``, runs eagerly too)."""
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return first is not None and any(isinstance(o, torch.Tensor) and o.dtype != first.dtype for o in outs)


def torch_level_refusal(gm: torch.fx.GraphModule):
    """The first call of the captured (torch-level) graph ``gm`` that eager refuses and
    torch's own decompositions would compute a value for (or compute otherwise), or None."""
    table = _torch_level()
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        try:
            check = table.get(node.target)
        except TypeError:  # an unhashable target
            continue
        if check is None and "out" in node.kwargs:
            check = _out_of_another_dtype
        if check is None:
            continue
        meta = lambda v: v.meta.get("example_value", v.meta.get("val"))  # noqa: E731
        args, kwargs = torch.fx.node.map_arg(node.args, meta), torch.fx.node.map_arg(node.kwargs, meta)
        try:
            refused = check(*args, **kwargs)
        except Exception:
            refused = True
        if refused:
            return node
    return None
