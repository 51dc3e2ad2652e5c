"""The lowering table: one small function per ATen op, producing ``nodes.TensorBox`` es.

``lowerings[op](*args, **kwargs)`` receives the op's arguments with every FX node
replaced by its lowered value (a TensorBox, a sympy expression for SymInts, or a
Python constant).  The op's fake output (``out_val()``) gives the result's size, dtype
and strides, so lowerings never re-derive ATen's shape rules.  The keys of
``lowerings`` are the coverage list; any other op becomes an extern fallback
(``fallback_handler``), counted in ``metrics.fallback_ops``.  Extern kernels that are
the right choice on purpose (mm, convolution, sort...) are registered with
:func:`register_extern` and not counted as fallbacks.
"""
from __future__ import annotations

import functools
import operator
import math
from typing import Callable

import sympy
import torch

from . import bounds, ir
from . import layout as layout_opt
from . import mkldnn
from . import split_reduction
from .config import triton_kernels
from .eager_refusals import scalar_fits
from .ir import Constant, IndexValue, Masked, Op
from .nodes import (
    Buffer, ComputedBuffer, ExternKernel, InputBuffer, Layout, MultiOutput, MutationBuffer, Pointwise, Reduction, ReinterpretView,
    Scatter, TensorBox, View, broadcast_loader, cast, compute_dtype, current_graph, loader_for, realize_expanded_root,
    to_sympy,
)

aten = torch.ops.aten
prims = torch.ops.prims
lowerings: dict = {}
extern_ops: set = set()


def register(*ops):
    """Decorator: register a lowering for ops (an overload packet registers all overloads)."""

    def wrap(fn):
        for op in ops:
            if isinstance(op, torch._ops.OpOverloadPacket):
                for name in op.overloads():
                    lowerings[getattr(op, name)] = fn
            else:
                lowerings[op] = fn
        return fn

    return wrap


# ---------------------------------------------------------------- helpers


def out_val():
    """The fake value of the node being lowered."""
    return current_graph().current_node.meta.get("val")  # None: an op with no output (an error check)


def out_size() -> list:
    return [to_sympy(s) for s in out_val().shape]


def out_dtype() -> torch.dtype:
    return out_val().dtype


def device() -> torch.device:
    val = out_val()
    if isinstance(val, (tuple, list)):
        val = next(v for v in val if isinstance(v, torch.Tensor))
    return val.device


def hint(expr) -> int:
    """Example value of a size expression (the ShapeEnv guards the decisions made on it).

    A data-dependent (unbacked) expression has no example that decisions could rest on:
    its value when its range is one point, else NotImplementedError (the graph runs
    eagerly) -- callers that can decide from ranges use :func:`known_nonnegative`."""
    graph = current_graph()
    expr = to_sympy(expr)
    if graph.is_unbacked(expr):
        lower, upper = graph.bounds(expr)
        if lower == upper:
            return int(lower)
        raise NotImplementedError(f"a lowering decision on the data-dependent size {expr}")
    return graph.hint(expr)


def known_nonnegative(expr) -> bool:
    """Whether ``expr`` >= 0 for every value its symbols may take (sizes, unbacked or not)."""
    graph = current_graph()
    expr = to_sympy(expr)
    if graph.is_unbacked(expr):
        return bool(graph.bounds(expr)[0] >= 0)
    return graph.hint(expr) >= 0


def pointwise(fn: Callable, *inputs, dtype=None, size=None) -> TensorBox:
    """A Pointwise box of ``fn(*loaded values)`` over the output size."""
    size = out_size() if size is None else size
    loaders = [broadcast_loader(x, size) for x in inputs]
    dtype = out_dtype() if dtype is None else dtype
    return TensorBox(Pointwise(size, dtype, device(), lambda idx: cast(fn(*[ld(idx) for ld in loaders]), dtype)))


def math_op(name: str, nargs: int = 1) -> Callable:
    """Lowering of an elementwise ATen op computing ``name`` in the output's opmath dtype."""

    def lower(*args, **kwargs):
        tensors = list(args[:nargs])
        odt = out_dtype()
        if odt == torch.bool and name not in ("logical_not",):
            cdt = _common_dtype(tensors)
        else:
            cdt = compute_dtype(odt)
        return pointwise(lambda *vs: Op(name, tuple(cast(v, cdt) for v in vs), torch.bool if odt == torch.bool else cdt),
                         *tensors)

    return lower


def _common_dtype(args) -> torch.dtype:
    """The opmath dtype ATen combines the node's first ``len(args)`` arguments in
    (``torch.result_type``: tensors by category and dimension, then Python scalars)."""
    def proxy(v):
        if isinstance(v, torch.fx.Node):
            v = v.meta["val"]
        if isinstance(v, torch.SymInt):
            return 1
        if isinstance(v, torch.SymFloat):
            return 1.0
        if isinstance(v, torch.SymBool):
            return True
        return v

    vals = [proxy(v) for v in current_graph().current_node.args[:len(args)]]
    tensors = [v for v in vals if isinstance(v, torch.Tensor)]
    if not tensors:
        return torch.float64 if any(isinstance(v, float) for v in vals) else torch.int64
    if len(vals) == 1:
        return compute_dtype(tensors[0].dtype)
    return compute_dtype(torch.result_type(vals[0], vals[1]))


UNARY = {
    "neg": aten.neg, "abs": aten.abs, "exp": aten.exp, "exp2": aten.exp2, "expm1": aten.expm1,
    "log": aten.log, "log2": aten.log2, "log10": aten.log10, "log1p": aten.log1p, "sqrt": aten.sqrt,
    "rsqrt": aten.rsqrt, "sin": aten.sin, "cos": aten.cos, "tan": aten.tan, "asin": aten.asin,
    "acos": aten.acos, "atan": aten.atan, "sinh": aten.sinh, "cosh": aten.cosh, "tanh": aten.tanh,
    "asinh": aten.asinh, "acosh": aten.acosh, "atanh": aten.atanh, "erf": aten.erf, "erfc": aten.erfc,
    "sigmoid": aten.sigmoid, "relu": aten.relu, "floor": aten.floor,
    "ceil": aten.ceil, "trunc": aten.trunc, "sign": aten.sign, "signbit": aten.signbit,
    "reciprocal": aten.reciprocal, "isnan": aten.isnan, "isinf": aten.isinf,
    "logical_not": aten.logical_not, "bitwise_not": aten.bitwise_not, "lgamma": aten.lgamma,
}
BINARY = {
    "mul": aten.mul, "atan2": aten.atan2, "maximum": aten.maximum, "minimum": aten.minimum,
    "eq": aten.eq, "ne": aten.ne, "lt": aten.lt, "le": aten.le, "gt": aten.gt, "ge": aten.ge,
    "logical_and": aten.logical_and, "logical_or": aten.logical_or, "logical_xor": aten.logical_xor,
    "bitwise_and": aten.bitwise_and, "bitwise_or": aten.bitwise_or, "bitwise_xor": aten.bitwise_xor,
    "lshift": aten.bitwise_left_shift, "rshift": aten.bitwise_right_shift, "copysign": aten.copysign,
    "hypot": aten.hypot, "remainder": aten.remainder, "fmod": aten.fmod, "pow": aten.pow,
}
for _name, _op in UNARY.items():
    register(_op)(math_op(_name, 1))
for _name, _op in BINARY.items():
    register(_op)(math_op(_name, 2))


_relu_kernel = lowerings[aten.relu.default]


@register(aten.relu.default)
def relu(x):
    """A kernel, or the post-op of the oneDNN linear computing ``x`` (mkldnn.fuse_relu)."""
    fused = mkldnn.fuse_relu(current_graph().current_node, x)
    return fused if fused is not None else _relu_kernel(x)


@register(aten.round.default)
def round_(x):
    return math_op("round", 1)(x)


def _logical(name):
    def lower(a, b):
        return pointwise(lambda x, y: Op(name, (cast(x, torch.bool), cast(y, torch.bool)), torch.bool), a, b)
    return lower


for _name in ("logical_and", "logical_or", "logical_xor"):
    register(getattr(aten, _name))(_logical(_name))


@register(aten.logical_not)
def logical_not(x):
    return pointwise(lambda v: Op("logical_not", (cast(v, torch.bool),), torch.bool), x)


@register(aten.isfinite)
def isfinite(x):
    if not x.dtype.is_floating_point:
        return pointwise(lambda v: Constant(True, torch.bool), x)
    return pointwise(lambda v: Op("isfinite", (cast(v, compute_dtype(v.dtype)),), torch.bool), x)


@register(aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar)
def add_sub(a, b, alpha=1):
    node = current_graph().current_node
    op = node.target
    if op is aten.add.Tensor:
        fused = mkldnn.fuse_bias(node, a, b)  # a bias after a oneDNN linear: its bias argument
        if fused is not None:
            return fused
    name = "add" if op in (aten.add.Tensor, aten.add.Scalar) else "sub"
    if name == "sub":
        _refuse_bool_sub(a, b)
    cdt = compute_dtype(out_dtype())

    def fn(x, y):
        y = cast(y, cdt)
        if alpha != 1:
            y = Op("mul", (y, cast(loader_for(alpha)([]), cdt)), cdt)
        return Op(name, (cast(x, cdt), y), cdt)

    return pointwise(fn, a, b)


def _refuse_bool_sub(*args) -> None:
    """Eager refuses ``-`` with a bool operand ("use the ``~`` or ``logical_not()``
    operator"); the eager fallback raises its error (the kernel computed a value)."""
    if any(isinstance(v, bool) or getattr(v, "dtype", None) == torch.bool for v in args):
        raise NotImplementedError("sub with a bool operand: eager raises")


@register(aten.rsub.Scalar, aten.rsub.Tensor)
def rsub(a, b, alpha=1):
    _refuse_bool_sub(a, b)
    cdt = compute_dtype(out_dtype())
    return pointwise(lambda x, y: Op("sub", (cast(y, cdt), Op("mul", (cast(x, cdt), cast(loader_for(alpha)([]), cdt)), cdt)), cdt), a, b)


@register(aten.div.Tensor, aten.div.Scalar, aten.true_divide.Tensor)
def div(a, b):
    cdt = compute_dtype(out_dtype())
    return pointwise(lambda x, y: Op("truediv", (cast(x, cdt), cast(y, cdt)), cdt), a, b)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(a, b, rounding_mode=None):
    cdt = compute_dtype(out_dtype())
    if rounding_mode is None:
        return div(a, b)
    if cdt.is_floating_point:
        rnd = "floor" if rounding_mode == "floor" else "trunc"
        return pointwise(lambda x, y: Op(rnd, (Op("truediv", (cast(x, cdt), cast(y, cdt)), cdt),), cdt), a, b)
    name = "floordiv" if rounding_mode == "floor" else "truncdiv"
    return pointwise(lambda x, y: Op(name, (cast(x, cdt), cast(y, cdt)), cdt), a, b)


@register(aten.floor_divide)
def floor_divide(a, b):
    return div_mode(a, b, "floor")


def check_scalar_fits(value, dtype: torch.dtype) -> None:
    """Refuse (eager fallback, where eager raises "value cannot be converted to type ...
    without overflow") a Python number that ``fill``/``full``/``where``/``clamp`` would
    convert to ``dtype`` out of its range; casting it here would wrap (``i.clamp(max=2**40)``
    on int32 gave 0)."""
    if not scalar_fits(value, dtype):
        raise NotImplementedError(f"{value} overflows {dtype}: eager raises")


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(cond, a, b):
    cdt = compute_dtype(out_dtype())
    check_scalar_fits(a, out_dtype())
    check_scalar_fits(b, out_dtype())
    return pointwise(lambda c, x, y: Op("where", (cast(c, torch.bool), cast(x, cdt), cast(y, cdt)), cdt), cond, a, b)


def _clamp(x, lo, hi):
    cdt = compute_dtype(out_dtype())
    for bound in (lo, hi):
        check_scalar_fits(bound, out_dtype())
        if isinstance(bound, float) and math.isnan(bound):
            # eager's answer depends on the version and device (torch 2.13's CPU kernels give
            # NaN, 2.11's CPU and CUDA kernels the input): the eager fallback gives it
            raise NotImplementedError("clamp with a NaN bound")
        if (isinstance(bound, int) and not isinstance(bound, bool) and not out_dtype().is_floating_point
                and out_dtype() != torch.bool and not out_dtype().is_complex
                and not torch.iinfo(out_dtype()).min <= bound <= torch.iinfo(out_dtype()).max):
            # an integer bound outside the dtype's range: eager's answer depends on the torch
            # version (2.13 wraps uint8's min=-1 to 255; 2.15 makes it a no-op, and raises for
            # max=-1), so the eager fallback gives it
            raise NotImplementedError(f"clamp bound {bound} outside {out_dtype()}'s range")

    def fn(v, *bounds):
        v = cast(v, cdt)
        bl = list(bounds)
        # NaN-propagating, as clamp; the bound first: a bound equal to v gives v, as eager's
        # ``v < lo ? lo : v`` (clamp(min=0.0) of -0.0 is -0.0, clamp(max=-0.0) of 0.0 is 0.0)
        if lo is not None:
            v = Op("maximum", (cast(bl.pop(0), cdt), v), cdt)
        if hi is not None:
            v = Op("minimum", (cast(bl.pop(0), cdt), v), cdt)
        return v

    return pointwise(fn, x, *[b for b in (lo, hi) if b is not None])


@register(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, min=None, max=None):
    return _clamp(x, min, max)


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(x, min):
    return _clamp(x, min, None)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(x, max):
    return _clamp(x, None, max)


@register(aten.sigmoid_backward.default)
def sigmoid_backward(grad, y):
    cdt = compute_dtype(out_dtype())
    one = Constant(1.0, cdt)
    return pointwise(lambda g, v: Op("mul", (cast(g, cdt), Op("mul", (cast(v, cdt), Op("sub", (one, cast(v, cdt)), cdt)), cdt)), cdt), grad, y)


def _pow_by_squaring(v, n: int, cdt):
    """``v ** n`` for an integer ``n >= 1`` as multiplications: ``(v*v)*v`` for 3, as
    ATen's own kernel for small exponents and TorchInductor's ``pow_recursive``."""
    if n == 1:
        return v
    half = _pow_by_squaring(v, n // 2, cdt)
    out = Op("mul", (half, half), cdt)
    return Op("mul", (out, v), cdt) if n % 2 else out


@register(aten.pow.Tensor_Scalar)
def pow_scalar(x, exponent):
    """``x ** exponent`` for a Python-number exponent.  An integer-valued exponent with
    ``|exponent| < 32`` (``x.pow(3.0)`` in GELU's tanh form) becomes multiplications
    (and a reciprocal when negative, floating types only): a ``pow`` call per element
    keeps the C++ loop from vectorizing (about 20x slower than the products)."""
    cdt = compute_dtype(out_dtype())
    if not cdt.is_floating_point and cdt != torch.bool and isinstance(exponent, int) and exponent < 0:
        # eager refuses ("Integers to negative integer powers are not allowed."): so does this
        # lowering, and the graph falls back to eager, which raises
        raise NotImplementedError("pow: integer tensor to a negative integer power")
    if isinstance(exponent, (int, float)) and exponent == 0.5 and cdt.is_floating_point:
        return pointwise(lambda v: Op("sqrt", (cast(v, cdt),), cdt), x)
    if (isinstance(exponent, (int, float)) and not isinstance(exponent, bool) and math.isfinite(exponent)
            and exponent == int(exponent) and 0 < abs(exponent) < 32
            and (exponent > 0 or cdt.is_floating_point)):
        n = int(exponent)
        if n > 0:
            return pointwise(lambda v: _pow_by_squaring(cast(v, cdt), n, cdt), x)
        one = Constant(1.0, cdt)
        return pointwise(lambda v: Op("truediv", (one, _pow_by_squaring(cast(v, cdt), -n, cdt)), cdt), x)
    return pointwise(lambda v, e: Op("pow", (cast(v, cdt), cast(e, cdt)), cdt), x, exponent)


# ---------------------------------------------------------------- creation, conversion


@register(aten._to_copy.default, prims.convert_element_type.default, aten.clone.default,
          aten.lift_fresh_copy.default, aten.alias_copy.default)
def to_copy(x, *args, **kwargs):
    val = out_val()
    if _clone_of_private_value(x, kwargs, val):
        return x
    if val.device != x.device:
        return fallback_handler(*([x] + list(args)), **kwargs)
    size = out_size()
    load = x.make_loader()
    return TensorBox(Pointwise(size, val.dtype, val.device, lambda idx: cast(load(idx), val.dtype)))


def _clone_of_private_value(x, kwargs, val) -> bool:
    """Whether ``clone(x)`` may be ``x`` itself: ``x`` is the new result of a non-view op
    (not a graph input) that nothing but this clone reads, with the clone's strides
    (dropout in eval mode leaves such a clone after T5's ReLU).  A copy would be a
    kernel pass, or keep a ReLU from fusing into its oneDNN linear (mkldnn.fuse_relu)."""
    node = current_graph().current_node
    if node.target is not aten.clone.default or kwargs.get("memory_format") not in (None, torch.preserve_format):
        return False
    src = node.args[0]
    if not isinstance(src, torch.fx.Node) or src.op != "call_function" or len(src.users) != 1:
        return False
    schema = getattr(src.target, "_schema", None)
    if schema is None or any(r.alias_info is not None for r in schema.returns) or schema.is_mutable:
        return False
    sval = src.meta.get("val")
    return (isinstance(sval, torch.Tensor) and isinstance(x, TensorBox) and sval.dtype == val.dtype
            and sval.device == val.device and sval.stride() == val.stride() and sval.shape == val.shape)


@register(aten.copy.default)
def copy(dst, src, non_blocking=False):
    return pointwise(lambda d, s: s, dst, src)


@register(aten.full.default, aten.full_like.default, aten.scalar_tensor.default, aten.zeros.default,
          aten.ones.default, aten.zeros_like.default, aten.ones_like.default, aten.empty.memory_format,
          aten.empty_like.default, aten.new_zeros.default, aten.new_ones.default, aten.new_full.default,
          aten.new_empty.default, aten.empty_strided.default, aten.new_empty_strided.default)
def full(*args, **kwargs):
    op = current_graph().current_node.target
    if op in (aten.full.default, aten.new_full.default, aten.full_like.default):
        fill = args[1] if op == aten.full.default or op == aten.full_like.default else args[2]
    elif op == aten.scalar_tensor.default:
        fill = args[0]
    elif op in (aten.ones.default, aten.ones_like.default, aten.new_ones.default):
        fill = 1
    else:
        fill = 0
    dt = out_dtype()
    check_scalar_fits(fill, dt)
    value = loader_for(fill)([])
    return pointwise(lambda: cast(value, dt), dtype=dt)


@register(aten.fill.Scalar, aten.fill.Tensor)
def fill(x, value):
    dt = out_dtype()
    check_scalar_fits(value, dt)
    return pointwise(lambda v: cast(v, dt), value)


@register(aten.arange.start_step, aten.arange.default, aten.arange.start, prims.iota.default)
def arange(*args, **kwargs):
    op = current_graph().current_node.target
    if op == prims.iota.default:
        start, step = kwargs["start"], kwargs["step"]
    elif op == aten.arange.default:
        start, step = 0, 1
    else:
        start = args[0]
        step = args[2] if len(args) > 2 else kwargs.get("step", 1)
    dt = out_dtype()
    cdt = torch.float64 if dt.is_floating_point else torch.int64
    s0, st = loader_for(start, cdt)([]), loader_for(step, cdt)([])
    size = out_size()
    return TensorBox(Pointwise(size, dt, device(), lambda idx: cast(
        Op("add", (s0, Op("mul", (IndexValue(idx[0], cdt), st), cdt)), cdt), dt)))


# ---------------------------------------------------------------- views


def _view(x: TensorBox, size, reindex) -> TensorBox:
    return TensorBox(View(x, size, reindex))


@register(aten.permute.default)
def permute(x, dims):
    n = len(x.get_size())
    dims = [d % n for d in dims] if n else []
    size = [x.get_size()[d] for d in dims]

    def reindex(idx):
        old = [None] * n
        for i, d in enumerate(dims):
            old[d] = idx[i]
        return old

    return _view(x, size, reindex)


@register(aten.transpose.int)
def transpose(x, d0, d1):
    n = len(x.get_size())
    dims = list(range(n))
    if n:
        dims[d0 % n], dims[d1 % n] = dims[d1 % n], dims[d0 % n]
    return permute(x, dims)


@register(aten.t.default)
def t(x):
    return permute(x, [1, 0]) if len(x.get_size()) == 2 else x


@register(aten.expand.default)
def expand(x, size, implicit=False):
    new = out_size()
    xs = x.get_size()
    lead = len(new) - len(xs)

    def reindex(idx):
        return [sympy.Integer(0) if (xs[i] == 1 and new[lead + i] != 1) else idx[lead + i] for i in range(len(xs))]

    return _view(x, new, reindex)


@register(aten.unsqueeze.default)
def unsqueeze(x, dim):
    n = len(x.get_size()) + 1
    dim = dim % n
    size = list(x.get_size())
    size.insert(dim, sympy.Integer(1))
    return _view(x, size, lambda idx: list(idx[:dim]) + list(idx[dim + 1:]))


@register(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)
def squeeze(x, dim=None):
    xs = x.get_size()
    n = len(xs)
    if dim is None:
        dims = [i for i in range(n) if xs[i] == 1]
    else:
        dims = [d % max(n, 1) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
        dims = [d for d in dims if n and xs[d] == 1]
    keep = [i for i in range(n) if i not in dims]

    def reindex(idx):
        old = [sympy.Integer(0)] * n
        for j, i in enumerate(keep):
            old[i] = idx[j]
        return old

    return _view(x, [xs[i] for i in keep], reindex)


@register(aten.select.int)
def select(x, dim, index):
    xs = x.get_size()
    n = len(xs)
    dim = dim % n
    index = to_sympy(index)
    if not known_nonnegative(index):
        index = index + xs[dim]
    return _view(x, xs[:dim] + xs[dim + 1:], lambda idx: list(idx[:dim]) + [index] + list(idx[dim:]))


@register(aten.slice.Tensor)
def slice_(x, dim=0, start=None, end=None, step=1):
    xs = x.get_size()
    dim = dim % len(xs)
    start = _norm_start(start, xs[dim])
    size = out_size()

    def reindex(idx):
        old = list(idx)
        old[dim] = start + step * idx[dim]
        return old

    return _view(x, size, reindex)


def _norm_start(start, dimsize):
    if start is None:
        return sympy.Integer(0)
    start = to_sympy(start)
    graph = current_graph()
    if graph.is_unbacked(start) or graph.is_unbacked(dimsize):
        # past the end the slice is empty (its size says so): only the sign matters
        if known_nonnegative(start):
            return start
        raise NotImplementedError(f"slice start {start} of unknown sign")
    if hint(start) < 0:
        start = start + dimsize
        if hint(start) < 0:
            start = sympy.Integer(0)
    if hint(start) > hint(dimsize):
        start = dimsize
    return start


@register(aten.diagonal.default)
def diagonal(x, offset=0, dim1=0, dim2=1):
    n = len(x.get_size())
    d1, d2 = dim1 % n, dim2 % n
    rest = [i for i in range(n) if i not in (d1, d2)]

    def reindex(idx):
        old = [None] * n
        for j, i in enumerate(rest):
            old[i] = idx[j]
        k = idx[-1]
        old[d1] = k + (0 if offset >= 0 else -offset)
        old[d2] = k + (offset if offset >= 0 else 0)
        return old

    return _view(x, out_size(), reindex)


@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view_copy.default)
def view(x, size):
    new = out_size()
    old = list(x.get_size())
    if [s for s in old if s != 1] == [s for s in new if s != 1]:
        keep_old = [i for i, s in enumerate(old) if s != 1]
        keep_new = [i for i, s in enumerate(new) if s != 1]

        def reindex(idx):
            out = [sympy.Integer(0)] * len(old)
            for i, j in zip(keep_old, keep_new):
                out[i] = idx[j]
            return out

        return _view(x, new, reindex)
    if isinstance(x.data, Pointwise) and triton_kernels(x.device):
        split = _split_reindex(old, new)
        if split is not None:
            # a pointwise value (mm + bias) viewed with dims split ([4096, 768] -> [16, 256,
            # 768]) stays inline: its consumer (layer norm, gelu) computes it in its own
            # kernel, as TorchInductor's reshape of an unstored value
            return _view(x, new, split)
    base = x.realize(_source_order_stride(x, old, new))
    strides = _view_strides(base.layout, old, new)
    if strides is not None:
        layout = base.layout
        root = base.base if isinstance(base, ReinterpretView) else base
        return TensorBox(ReinterpretView(root, Layout(new, strides, layout.offset, layout.dtype, layout.device)))
    return _view(x, new, _flat_reindex(old, new))


def _view_strides(layout, old, new):
    """Strides of ``view(new)`` of a strided tensor (ATen's computeStride), or None."""
    graph = current_graph()
    if any(graph.bounds(s)[0] < 1 if graph.is_unbacked(s) else hint(s) == 0 for s in old):
        return None
    # Group old dims into contiguous chunks; each chunk maps to a run of new dims.
    chunks, cur = [], []
    for i in range(len(old)):
        if old[i] == 1:
            continue
        cur.append(i)
        nxt = [j for j in range(i + 1, len(old)) if old[j] != 1]
        if not nxt or sympy.expand(layout.stride[i] - layout.stride[nxt[0]] * old[nxt[0]]) != 0:
            chunks.append(cur)
            cur = []
    strides = [None] * len(new)
    ni = 0
    for chunk in chunks:
        numel = functools.reduce(lambda a, b: a * b, [old[i] for i in chunk], sympy.Integer(1))
        base_stride = layout.stride[chunk[-1]]
        acc = sympy.Integer(1)
        run = []
        while ni < len(new) and sympy.simplify(numel / acc) != 1:
            run.append(ni)
            acc = acc * new[ni]
            ni += 1
        if sympy.simplify(acc - numel) != 0:
            return None
        st = base_stride
        for j in reversed(run):
            strides[j] = st
            st = st * new[j]
    for j in range(len(new)):
        if strides[j] is None:
            if new[j] != 1:
                return None
            strides[j] = sympy.Integer(1)
    return strides


def _split_reindex(old, new):
    """A reindex for ``view(new)`` where every dim of ``old`` (size-1 dims aside) is one or
    several consecutive dims of ``new``: each old index is a linear sum of new ones; None
    when dims merge or sizes do not line up."""
    oi = [i for i, s in enumerate(old) if s != 1]
    ni = [j for j, s in enumerate(new) if s != 1]
    groups, j = [], 0
    for i in oi:
        group, prod = [], sympy.Integer(1)
        while j < len(ni) and sympy.expand(prod - old[i]) != 0:
            prod = prod * new[ni[j]]
            group.append(ni[j])
            j += 1
        if not group or sympy.expand(prod - old[i]) != 0:
            return None
        groups.append((i, group))
    if j != len(ni):
        return None

    def reindex(idx):
        out = [sympy.Integer(0)] * len(old)
        for i, group in groups:
            flat = sympy.Integer(0)
            for k in group:
                flat = flat * new[k] + idx[k]
            out[i] = flat
        return out

    return reindex


def _source_order_stride(x, old, new):
    """Strides to store ``x`` (a view of one buffer, such as a transposed key before a
    batched matmul) in before ``view(new)``: the order of the strides it reads its source
    with, so that the copy reads and writes consecutive elements, when ``view(new)`` of
    that layout needs no further copy (Triton kernels); None (contiguous) otherwise."""
    if not isinstance(x.data, (View, Pointwise)) or not triton_kernels(x.device) or not all(
            sympy.sympify(s).is_Integer for s in old):
        return None
    src = current_graph().current_node.args[0]
    if not isinstance(src, torch.fx.Node) or len(src.users) != 1:
        return None  # another user (an output: eager's strides) sees the stored value too
    xs = ir.index_vars("x", len(old))
    loads = []

    def walk(v):
        if isinstance(v, ir.Load):
            loads.append(v)
        elif isinstance(v, Op):
            for a in v.args:
                walk(a)

    walk(x.make_loader()(list(xs)))
    if len({ld.buffer for ld in loads}) != 1:
        return None
    index = sympy.expand(loads[0].index)
    keep = [i for i in range(len(old)) if old[i] != 1]
    coeffs = {i: index.coeff(xs[i]) for i in keep}
    if not all(c.is_Integer and c >= 0 for c in coeffs.values()) or (
            sympy.expand(index - sum(c * xs[i] for i, c in coeffs.items())).free_symbols & set(xs)):
        return None  # not a strided read of the source
    # the source's order, else the default one with the source's innermost dim innermost
    # (a key (b, h, d, s) read from (b, s, h, d): stored (b, h, s, d), still (b*h, d, s))
    source = sorted(keep, key=lambda i: (coeffs[i] != 0, -int(coeffs[i])))  # outermost first; broadcast dims out
    inner = [i for i in keep if i != source[-1]] + [source[-1]]
    for order in (source, inner):
        if order == keep:
            return None
        stride = [None] * len(old)
        step = sympy.Integer(1)
        for i in reversed(order):
            stride[i] = step
            step = step * old[i]
        stride = [step if s is None else s for s in stride]
        if _view_strides(Layout(list(old), stride, sympy.Integer(0), x.dtype, x.device), old, new) is not None:
            return stride
    return None


def _flat_reindex(old, new):
    from torch.utils._sympy.functions import ModularIndexing

    def reindex(idx):
        if any(n == 0 for n in old):  # no elements: never indexed (and no divisions by 0)
            return [sympy.Integer(0)] * len(old)
        flat = sympy.Integer(0)
        for i, n in zip(idx, new):
            flat = flat * n + i
        out = []
        stride = sympy.Integer(1)
        for n in reversed(old):
            out.append(ModularIndexing(flat, stride, n) if n != 1 else sympy.Integer(0))
            stride = stride * n
        return list(reversed(out))

    return reindex


@register(aten.as_strided.default)
def as_strided(x, size, stride, storage_offset=None):
    base = x.realize()
    root = base.base if isinstance(base, ReinterpretView) else base
    start = current_graph().storage_offset_of(root)
    offset = to_sympy(storage_offset) - start if storage_offset is not None else base.layout.offset
    return TensorBox(ReinterpretView(root, Layout([to_sympy(s) for s in size], [to_sympy(s) for s in stride],
                                                  offset, root.dtype, root.device)))


@register(aten.alias.default, aten.lift_fresh.default, aten.detach.default)
def alias(x):
    return x


@register(aten.split_with_sizes.default)
def split_with_sizes(x, sizes, dim=0):
    outs, start = [], sympy.Integer(0)
    dim = dim % len(x.get_size())
    for s in sizes:
        s = to_sympy(s)
        size = list(x.get_size())
        size[dim] = s

        def reindex(idx, start=start):
            old = list(idx)
            old[dim] = idx[dim] + start
            return old

        outs.append(_view(x, size, reindex))
        start = start + s
    return outs


# ---------------------------------------------------------------- reductions


def _dims(x, dim):
    n = len(x.get_size())
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(n))
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return sorted({d % max(n, 1) for d in dims}) if n else []


def make_reduction(x, dims, keepdim, rtype, dtype, acc_dtype, value_fn=None) -> TensorBox:
    """A Reduction box: ``rtype`` over ``dims`` of ``value_fn(load(x))`` (split in two
    stages where split_reduction says so)."""
    return split_reduction.maybe_split(_reduction(x, dims, keepdim, rtype, dtype, acc_dtype, value_fn))


def _reduction(x, dims, keepdim, rtype, dtype, acc_dtype, value_fn=None) -> Reduction:
    xs = list(x.get_size())
    n = len(xs)
    kept = [i for i in range(n) if i not in dims]
    size = [sympy.Integer(1) if i in dims else xs[i] for i in range(n)] if keepdim else [xs[i] for i in kept]
    rranges = [xs[i] for i in dims]
    load = x.make_loader()

    def inner(idx, ridx):
        full = [None] * n
        if keepdim:
            for i in kept:
                full[i] = idx[i]
        else:
            for j, i in enumerate(kept):
                full[i] = idx[j]
        for j, i in enumerate(dims):
            full[i] = ridx[j]
        v = load(full)
        return value_fn(v) if value_fn else v

    return Reduction(size, rranges, rtype, dtype, acc_dtype, x.device, inner)


def _acc(dtype: torch.dtype) -> torch.dtype:
    if dtype.is_floating_point:
        return compute_dtype(dtype)
    if dtype == torch.bool:
        return torch.bool
    return torch.int64


@register(aten.sum.dim_IntList, aten.sum.default)
def sum_(x, dim=None, keepdim=False, dtype=None):
    odt = out_dtype()
    acc = _acc(odt)
    return make_reduction(x, _dims(x, dim), keepdim, "sum", odt, acc, lambda v: cast(v, acc))


@register(aten.prod.dim_int, aten.prod.default)
def prod(x, dim=None, keepdim=False, dtype=None):
    odt = out_dtype()
    acc = _acc(odt)
    return make_reduction(x, _dims(x, dim), keepdim, "prod", odt, acc, lambda v: cast(v, acc))


@register(aten.amax.default, aten.amin.default)
def amax(x, dim=(), keepdim=False):
    rtype = "max" if current_graph().current_node.target == aten.amax.default else "min"
    acc = compute_dtype(x.dtype) if x.dtype != torch.bool else torch.bool
    return make_reduction(x, _dims(x, dim), keepdim, rtype, out_dtype(), acc, lambda v: cast(v, acc))


@register(aten.argmax.default, aten.argmin.default)
def argmax(x, dim=None, keepdim=False):
    rtype = "argmax" if current_graph().current_node.target == aten.argmax.default else "argmin"
    cdt = compute_dtype(x.dtype)
    if dim is None:
        numel = _numel(x.get_size())
        flat = TensorBox(View(x, [numel], _flat_reindex(x.get_size(), [numel])))
        red = make_reduction(flat, [0], False, rtype, torch.int64, torch.int64, lambda v: cast(v, cdt))
        if keepdim:
            return TensorBox(View(red, out_size(), lambda idx: []))
        return red
    _refuse_empty_extreme(x, _dims(x, dim))
    return make_reduction(x, _dims(x, dim), keepdim, rtype, torch.int64, torch.int64, lambda v: cast(v, cdt))


def _refuse_empty_extreme(x, dims) -> None:
    """max/min/argmax/argmin over a dimension of size 0 have no identity: eager raises
    (IndexError), so the graph falls back to eager (the kernel returned -inf and index 0)."""
    if any(sympy.sympify(x.get_size()[d]) == 0 for d in dims):
        raise NotImplementedError("max/min over a dimension of size 0: eager raises")


@register(aten.max.dim, aten.min.dim)
def max_dim(x, dim, keepdim=False):
    is_max = current_graph().current_node.target == aten.max.dim
    cdt = compute_dtype(x.dtype)
    dims = _dims(x, dim)
    _refuse_empty_extreme(x, dims)
    values = make_reduction(x, dims, keepdim, "max" if is_max else "min", x.dtype, cdt, lambda v: cast(v, cdt))
    indices = make_reduction(x, dims, keepdim, "argmax" if is_max else "argmin", torch.int64, torch.int64,
                             lambda v: cast(v, cdt))
    return (values, indices)


@register(aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim, aten.all.dims)
def any_all(x, dim=None, keepdim=False):
    target = current_graph().current_node.target
    rtype = "any" if target in (aten.any.default, aten.any.dim, aten.any.dims) else "all"
    odt = out_dtype()
    red = make_reduction(x, _dims(x, dim), keepdim, rtype, torch.bool, torch.bool, lambda v: cast(v, torch.bool))
    if odt != torch.bool:
        return pointwise(lambda v: cast(v, odt), red)
    return red


def _numel(size):
    return functools.reduce(lambda a, b: a * b, size, sympy.Integer(1))


@register(aten.mean.dim, aten.mean.default)
def mean(x, dim=None, keepdim=False, dtype=None):
    odt = out_dtype()
    acc = _acc(odt)
    dims = _dims(x, dim)
    total = make_reduction(x, dims, keepdim, "sum", acc, acc, lambda v: cast(v, acc))
    count = _numel([x.get_size()[d] for d in dims])
    return pointwise(lambda s: Op("truediv", (s, cast(IndexValue(count, torch.int64), acc)), acc), total)


def _var_mean(x, dim, correction, keepdim):
    """``(var, mean)`` of ``x`` over ``dim`` from one ``welford`` reduction (mean and M2
    in one pass over the data, as TorchInductor's ``welford_reduce``): var = M2 /
    max(n - correction, 0), accumulated in float32 for float16/bfloat16 inputs."""
    odt = out_dtype_safe()
    odt = odt[0] if isinstance(odt, tuple) else odt
    if not odt.is_floating_point:
        # eager refuses ("std and var only support floating point and complex dtypes"); the
        # welford kernel in bool/int divided by zero (SIGILL from GCC's trap on b.var())
        raise NotImplementedError(f"var/std of {odt}: eager raises")
    acc = _acc(odt)
    dims = _dims(x, dim)
    count = _numel([x.get_size()[d] for d in dims])
    n = cast(IndexValue(count, torch.int64), acc)
    corr = 1 if correction is None else correction
    denom = Op("maximum", (Op("sub", (n, cast(loader_for(corr)([]), acc)), acc), Constant(0.0, acc)), acc)
    mean, m2 = split_reduction.maybe_split_welford(
        _reduction(x, dims, keepdim, "welford_mean", acc, acc, lambda v: cast(v, acc)),
        _reduction(x, dims, keepdim, "welford_m2", acc, acc, lambda v: cast(v, acc)))
    if count in (0, 1):  # nothing to reduce; eager: var and mean of nothing are NaN
        data, first = mean.data, [sympy.Integer(0)] * len(dims)
        nan = Constant(math.nan, acc)
        var = nan if count == 0 else Op("truediv", (Constant(0.0, acc), denom), acc)  # M2 of one element: 0
        return (TensorBox(Pointwise(data.size, odt, x.device, lambda idx: cast(var, odt))),
                TensorBox(Pointwise(data.size, odt, x.device,
                                    lambda idx: cast(nan if count == 0 else data.inner_fn(idx, first), odt))))
    var = TensorBox(Pointwise(m2.get_size(), odt, x.device,
                              lambda idx, ld=m2.make_loader(): cast(Op("truediv", (ld(idx), denom), acc), odt)))
    mean_out = TensorBox(Pointwise(mean.get_size(), odt, x.device,
                                   lambda idx, ld=mean.make_loader(): cast(ld(idx), odt)))
    return var, mean_out


def out_dtype_safe():
    val = out_val()
    if isinstance(val, (tuple, list)):
        return tuple(v.dtype for v in val)
    return val.dtype


@register(aten.var_mean.correction)
def var_mean(x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(x, dim, correction, keepdim)


@register(aten.var.correction)
def var(x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(x, dim, correction, keepdim)[0]


# ---------------------------------------------------------------- cat, pad, indexing


@register(aten.cat.default)
def cat(tensors, dim=0):
    size = out_size()
    dim = dim % len(size)
    odt = out_dtype()
    parts = [t for t in tensors if not (len(t.get_size()) == 1 and t.get_size()[0] == 0 and len(size) != 1)]
    starts, acc = [], sympy.Integer(0)
    for t in parts:
        starts.append(acc)
        acc = acc + t.get_size()[dim]
    loaders = [t.make_loader() for t in parts]

    def inner(idx):
        # part k is read only where starts[k] <= idx[dim] < its end: elsewhere its index
        # (idx[dim] - starts[k]) is outside the part, and a GPU load there can fault
        pos = IndexValue(idx[dim], torch.int64)
        value = None
        for k in reversed(range(len(parts))):
            sub = list(idx)
            sub[dim] = idx[dim] - starts[k]
            body = cast(loaders[k](sub), odt)
            below = Op("lt", (pos, IndexValue(starts[k] + parts[k].get_size()[dim], torch.int64)), torch.bool)
            above = Op("ge", (pos, IndexValue(starts[k], torch.int64)), torch.bool)
            inside = [m for m, need in ((above, k > 0), (below, k < len(parts) - 1)) if need]
            if inside:
                mask = inside[0] if len(inside) == 1 else Op("logical_and", tuple(inside), torch.bool)
                body = Masked(mask, body, _zero(odt), odt)
            value = body if value is None else Op("where", (below, body, value), odt)
        return value if value is not None else _zero(odt)

    return TensorBox(Pointwise(size, odt, device(), inner))


def _zero(dt):
    return Constant(False if dt == torch.bool else (0.0 if dt.is_floating_point else 0), dt)


@register(aten.constant_pad_nd.default)
def constant_pad_nd(x, pad, value=0):
    size = out_size()
    xs = x.get_size()
    odt = out_dtype()
    n = len(size)
    load = x.make_loader()
    fill = cast(loader_for(value)([]), odt)

    def inner(idx):
        sub = list(idx)
        mask = None
        for k in range(len(pad) // 2):
            d = n - 1 - k
            left = to_sympy(pad[2 * k])
            sub[d] = idx[d] - left
            lo = Op("ge", (IndexValue(sub[d], torch.int64), Constant(0, torch.int64)), torch.bool)
            hi = Op("lt", (IndexValue(sub[d], torch.int64), IndexValue(xs[d], torch.int64)), torch.bool)
            both = Op("logical_and", (lo, hi), torch.bool)
            mask = both if mask is None else Op("logical_and", (mask, both), torch.bool)
        body = cast(load(sub), odt)
        return body if mask is None else Masked(mask, body, fill, odt)

    return TensorBox(Pointwise(size, odt, device(), inner))


def _pool_pairs(kernel_size, stride, padding, dilation):
    """``(kernel, stride, padding, dilation)`` of a 2-d pooling as [h, w] lists (an
    empty ``stride`` is the kernel size, as ATen's)."""
    def pair(v):
        v = [v] if isinstance(v, int) else list(v)
        return v * 2 if len(v) == 1 else v

    ks = pair(kernel_size)
    st = pair(stride) if (isinstance(stride, int) or len(stride)) else ks
    return ks, st, pair(padding), pair(dilation)


@register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """A generated kernel, fused with the batch norm/ReLU before it: the values only when
    nothing reads the indices (inference), the max over each window, positions outside
    the input skipped, NaN propagating (ATen's ``val > max || isnan(val)``); values and
    indices when the window lies inside the input (no padding, no ceil_mode: training's
    ``MaxPool2d(2)``), each index the flat ``h * W + w`` position in the input plane of
    the first maximum (the last NaN), as ATen's kernels.  Otherwise (padded windows
    with indices, integer dtypes, windows over 16 elements, and a padded window over a
    channels-last input on CPU) ATen's kernel: its NHWC kernel is vectorized over
    channels, where gcc leaves the generated window of masked loads scalar (hf_resnet's
    stem pooling: 0.2 ms in ATen, 5.3 ms generated with BN+ReLU fused).  Unpadded
    windows need no masks and vectorize."""
    node = current_graph().current_node
    indices_used = any(u.target is not operator.getitem or u.args[1] != 0 for u in node.users)
    ks, st, pd, dl = _pool_pairs(kernel_size, stride, padding, dilation)
    # without padding or ceil_mode every window lies inside the input: no masks, and
    # the kernel vectorizes (cnn's BN+ReLU+MaxPool2d(2): one pass, no NHWC temporary)
    padded = any(pd) or bool(ceil_mode)
    if ((indices_used and padded) or not x.dtype.is_floating_point or len(x.get_size()) not in (3, 4)
            or not all(isinstance(v, int) for v in ks + st + pd + dl) or ks[0] * ks[1] > 16
            or (x.device.type == "cpu" and padded and layout_opt.channels_last_input(x))):
        return make_extern(aten.max_pool2d_with_indices.default, [x, kernel_size, stride, padding, dilation, ceil_mode],
                           {}, fallback=False)
    values = out_val()[0]
    size = [to_sympy(s) for s in values.shape]
    dt = x.dtype
    cdt = compute_dtype(dt)
    xs = x.get_size()
    load = x.make_loader()
    lowest = Constant(float("-inf"), cdt)

    def window(idx):
        """(value, position, mask) of each window element, in ATen's scan order."""
        for i in range(ks[0]):
            for j in range(ks[1]):
                h = idx[-2] * st[0] - pd[0] + i * dl[0]
                w = idx[-1] * st[1] - pd[1] + j * dl[1]
                src = cast(load(list(idx[:-2]) + [h, w]), cdt)
                if not padded:
                    yield src, h * xs[-1] + w, None
                    continue
                conds = []
                for pos, extent in ((h, xs[-2]), (w, xs[-1])):
                    conds.append(Op("ge", (IndexValue(pos, torch.int64), Constant(0, torch.int64)), torch.bool))
                    conds.append(Op("lt", (IndexValue(pos, torch.int64), IndexValue(extent, torch.int64)), torch.bool))
                mask = conds[0]
                for c in conds[1:]:
                    mask = Op("logical_and", (mask, c), torch.bool)
                yield src, h * xs[-1] + w, mask

    def inner(idx):
        acc = None
        for src, _, mask in window(idx):
            v = src if mask is None else Masked(mask, src, lowest, cdt)
            acc = v if acc is None else Op("maximum", (acc, v), cdt)
        return cast(acc, dt)

    if not indices_used:
        return TensorBox(Pointwise(size, dt, device(), inner)), None

    def argmax(idx, want_index):
        acc = pos = None
        for src, at, _ in window(idx):
            here = IndexValue(at, torch.int64)
            if acc is None:
                acc, pos = src, here
                continue
            # ``src > acc || isnan(src)`` as two selects: gcc 12 turns the ``||`` of a
            # ReLU'd value into a select of booleans it cannot vectorize (scalar loop)
            bigger, nan = Op("gt", (src, acc), torch.bool), Op("isnan", (src,), torch.bool)
            acc = Op("where", (nan, src, Op("where", (bigger, src, acc), cdt)), cdt)
            pos = Op("where", (nan, here, Op("where", (bigger, here, pos), torch.int64)), torch.int64)
        return pos if want_index else cast(acc, dt)

    return (TensorBox(Pointwise(size, dt, device(), lambda idx: argmax(idx, False))),
            TensorBox(Pointwise(size, torch.int64, device(), lambda idx: argmax(idx, True))))


@register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """The input gradient of non-overlapping windows (stride equal to the kernel, no
    padding, no dilation, no ceil_mode, static sizes) as a generated kernel: each input
    position lies in at most one window and takes that window's gradient where the
    window's index names it, else 0 -- a gather the batch-norm backward after it reads
    without a buffer (ATen's kernel zero-fills and scatters).  Other windows: ATen's."""
    from torch.utils._sympy.functions import FloorDiv

    ks, st, pd, dl = _pool_pairs(kernel_size, stride, padding, dilation)
    xs, gs = x.get_size(), grad.get_size()
    static = all(isinstance(s, (int, sympy.Integer)) for s in list(xs[-2:]) + list(gs[-2:]))
    if (ks != st or any(pd) or dl != [1, 1] or ceil_mode or not static or len(xs) not in (3, 4)
            or not grad.dtype.is_floating_point or not all(isinstance(v, int) for v in ks)):
        return make_extern(aten.max_pool2d_with_indices_backward.default,
                           [grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices], {}, fallback=False)
    odt = out_dtype()
    gload, iload = grad.make_loader(), indices.make_loader()
    width = xs[-1]
    covered = [int(gs[-2]) * ks[0], int(gs[-1]) * ks[1]]  # positions past these lie in no window

    def inner(idx):
        h, w = idx[-2], idx[-1]
        sub = list(idx[:-2]) + [FloorDiv(h, ks[0]), FloorDiv(w, ks[1])]
        hit = Op("eq", (iload(sub), IndexValue(h * width + w, torch.int64)), torch.bool)
        value = Op("where", (hit, cast(gload(sub), odt), _zero(odt)), odt)
        bounds_ = [Op("lt", (IndexValue(v, torch.int64), Constant(n, torch.int64)), torch.bool)
                   for v, n, full in ((h, covered[0], xs[-2]), (w, covered[1], xs[-1])) if int(full) != n]
        if not bounds_:
            return value
        mask = bounds_[0] if len(bounds_) == 1 else Op("logical_and", tuple(bounds_), torch.bool)
        return Masked(mask, value, _zero(odt), odt)

    return TensorBox(Pointwise(out_size(), odt, device(), inner))


def _user_op() -> str:
    """The ATen op being lowered, named in index errors (read at lowering time: inner
    functions run again while scheduling)."""
    return str(current_graph().current_node.target)


def _indirect(index_value, size, op: str, dim: int, idx=(), ranges=(), wrap=True):
    """A fresh indirect symbol for ``index_value`` into a dimension of ``size``, checked
    (and, with ``wrap``, negatives wrapped: indexing, index_put; gather, scatter,
    index_select and embedding reject them as eager does) unless :func:`bounds.needs`
    proves it needless; ``idx``/``ranges``: the point's index variables and sizes."""
    sym = current_graph().new_indirect_symbol()
    value = cast(index_value, torch.int64)
    var_ranges = {i: r for i, r in zip(idx, ranges) if isinstance(i, sympy.Symbol)}
    check, wrap = bounds.needs(value, size, var_ranges, wrap)
    return sym, ir.Indirect(sym, value, size, check=check, wrap=wrap, op=op, dim=dim)


def _indirect_loader(x: TensorBox, out_numel=None):
    """Loader of ``x`` for indices with indirect symbols; realizes ``x`` now (at lowering
    time: inner functions run again while scheduling and must not create buffers).

    With ``out_numel`` (the reader's element count, at most ``x``'s), an unrealized
    pointwise ``x`` made of loads, constants and operations is read through its
    expression instead (each of its loads gets the indirect symbols it uses): a gather of
    ``log_softmax`` reads the logits and the row statistics at the target positions, and
    the full-size ``log_softmax`` is never written."""
    if out_numel is not None and _inline_for_indirect(x, out_numel):
        load = x.make_loader()

        def inlined(idx, indirects):
            return _with_indirects(load(idx), indirects)

        return inlined
    load = x.realize().make_loader()

    def loader(idx, indirects):
        value = load(idx)
        used = tuple(i for i in indirects if i.symbol in value.index.free_symbols)
        return ir.Load(value.buffer, value.index, value.dtype, used)

    return loader


def _inline_for_indirect(x: TensorBox, out_numel) -> bool:
    if not isinstance(x.data, Pointwise):
        return False
    try:
        if not bool(sympy.sympify(out_numel) <= sympy.Mul(*x.get_size())):
            return False
    except TypeError:  # symbolic sizes of unknown order
        return False
    probe = x.data.inner_fn([sympy.Symbol(f"t{i}", integer=True) for i in range(len(x.get_size()))])

    def plain(v) -> bool:  # loads without indirection, constants and operations only
        if isinstance(v, Op):
            return all(plain(a) for a in v.args)
        if isinstance(v, ir.Load):
            return not v.indirect
        return isinstance(v, Constant)
    return plain(probe)


def _with_indirects(v, indirects):
    if isinstance(v, Op):
        return Op(v.name, tuple(_with_indirects(a, indirects) for a in v.args), v.dtype)
    if isinstance(v, ir.Load):
        used = tuple(i for i in indirects if i.symbol in v.index.free_symbols)
        return ir.Load(v.buffer, v.index, v.dtype, used)
    return v


@register(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    size = out_size()
    nidx = len(indices.get_size())
    iload = indices.make_loader()
    vocab = weight.get_size()[0]
    wload = _indirect_loader(weight)
    op = _user_op()

    def inner(idx):
        sym, ind = _indirect(iload(idx[:nidx]), vocab, op, 0, idx, size, wrap=False)
        return wload([sym] + list(idx[nidx:]), [ind])

    return TensorBox(Pointwise(size, weight.dtype, device(), inner))


@register(aten.gather.default)
def gather(x, dim, index, sparse_grad=False):
    size = out_size()
    n = len(size)
    dim = dim % max(n, 1)
    iload = index.make_loader()
    dsize = x.get_size()[dim] if x.get_size() else sympy.Integer(1)
    xload = _indirect_loader(x, sympy.Mul(*size))
    op = _user_op()

    def inner(idx):
        if n == 0:
            return xload([], [])
        sym, ind = _indirect(iload(idx), dsize, op, dim, idx, size, wrap=False)
        sub = list(idx)
        sub[dim] = sym
        return xload(sub, [ind])

    return TensorBox(Pointwise(size, x.dtype, device(), inner))


@register(aten.index_select.default)
def index_select(x, dim, index):
    size = out_size()
    n = len(size)
    dim = dim % max(n, 1)
    iload = index.make_loader()
    xload = _indirect_loader(x)
    op = _user_op()

    def inner(idx):
        if not x.get_size():
            return xload([], [])
        sym, ind = _indirect(iload([idx[dim]] if index.get_size() else []), x.get_size()[dim], op, dim, idx, size, wrap=False)
        sub = list(idx)
        sub[dim] = sym
        return xload(sub, [ind])

    return TensorBox(Pointwise(size, x.dtype, device(), inner))


@register(aten.index.Tensor)
def index(x, indices):
    if any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in indices):
        return fallback_handler(x, indices)
    xs = x.get_size()
    positions = [k for k, i in enumerate(indices) if i is not None]
    size = out_size()
    bshape_len = len(size) - (len(xs) - len(positions))
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    first = positions[0] if adjacent else 0
    bsize = size[first:first + bshape_len]
    loaders = {k: broadcast_loader(indices[k], bsize) for k in positions}
    rest = [d for d in range(len(xs)) if d not in positions]
    xload = _indirect_loader(x)
    op = _user_op()

    def inner(idx):
        bidx = idx[first:first + bshape_len]
        other = list(idx[:first]) + list(idx[first + bshape_len:])
        sub, inds = [None] * len(xs), []
        for k in positions:
            sym, ind = _indirect(loaders[k](bidx), xs[k], op, k, idx, size)
            sub[k] = sym
            inds.append(ind)
        for d, i in zip(rest, other):
            sub[d] = i
        return xload(sub, inds)

    return TensorBox(Pointwise(size, x.dtype, device(), inner))


# ---------------------------------------------------------------- mutation: copy_, scatter, index_put


@register(aten.copy_.default)
def copy_(dst, src, non_blocking=False):
    """``dst.copy_(src)`` into a graph input (AOT autograd's kept input mutations)."""
    target = dst.data
    if not isinstance(target, InputBuffer):
        return fallback_handler(dst, src, non_blocking)
    size = list(target.layout.size)
    load = broadcast_loader(src, size)
    data = Pointwise(size, target.dtype, target.device, lambda idx: cast(load(idx), target.dtype))
    current_graph().register_buffer(lambda name: MutationBuffer(name, target, data))
    return dst


def _fresh_copy(x: TensorBox):
    """A new buffer holding ``x`` (contiguous), that a scatter then writes into; or
    ``x``'s own buffer when the node being lowered is its only reader (a chain of
    ``out = out.index_add(...)``: each writes into the last one's buffer, as
    TorchInductor's reinplacing of scatters does, instead of copying it first; a tied
    embedding's rows scattered into the LM head's weight-gradient matmul output,
    aot/scatter_accumulate.py): :func:`_dying_own_buffer`."""
    own = _dying_own_buffer(x)
    if own is not None:
        return own
    load = x.make_loader()
    copy = TensorBox(Pointwise(list(x.get_size()), x.dtype, x.device, load))
    return copy.realize()


def _dying_own_buffer(x: TensorBox):
    """The buffer ``x`` is, when an extern call may write into it in place: a buffer the
    wrapper computes or gets from an extern call that returns fresh storage (or from
    such an in-place ``index_add_``), read by nothing but the node being lowered and
    named once there (as :func:`_fresh_copy`); else None.  The wrapper keeps it alive
    as long as the in-place call's result (``index_add_`` returns an alias of it)."""
    data = x.data if isinstance(x, TensorBox) else None
    node = current_graph().current_node
    arg = node.args[0] if node is not None and node.args else None
    if not (isinstance(arg, torch.fx.Node) and len(arg.users) == 1 and _uses_of(node, arg) == 1):
        return None
    if data is not None and not isinstance(data, (Buffer, ReinterpretView, View)):
        data = x.realize()  # a computed value only this node reads (torch.zeros): stored once, here
    if isinstance(data, ComputedBuffer) and not isinstance(data, MutationBuffer):
        return data if data.layout is not None else None
    if (isinstance(data, ExternKernel) and data.layout is not None and isinstance(data.op, torch._ops.OpOverload)
            and (data.op is aten.index_add_.default
                 or not any(r.alias_info is not None for r in data.op._schema.returns))):
        return data
    return None


def _uses_of(node: torch.fx.Node, arg: torch.fx.Node) -> int:
    """How many times ``node``'s arguments name ``arg``."""
    count = [0]

    def seen(a):
        count[0] += a is arg
        return a

    torch.fx.node.map_arg((node.args, node.kwargs), seen)
    return count[0]


def _scatter_into(out, size, value_fn, store_index, mode):
    data = Scatter(size, out.dtype, out.device, value_fn, store_index, mode)
    current_graph().register_buffer(lambda name: MutationBuffer(name, out, data))
    return TensorBox(out)


@register(aten.scatter.src, aten.scatter.value, aten.scatter_add.default)
def scatter(x, dim, index, src, reduce=None):
    if reduce is not None:
        return fallback_handler(x, dim, index, src, reduce=reduce)
    add = current_graph().current_node.target == aten.scatter_add.default
    out = _fresh_copy(x)
    n = len(x.get_size())
    dim = dim % max(n, 1)
    isize = list(index.get_size())
    iload = index.make_loader()
    sload = src.make_loader() if isinstance(src, TensorBox) else loader_for(src, out.dtype)
    op = _user_op()

    def store_index(idx):
        sym, ind = _indirect(iload(idx), x.get_size()[dim] if n else sympy.Integer(1), op, dim, idx, isize,
                             wrap=False)
        sub = list(idx)
        if n:
            sub[dim] = sym
        return out.layout.index(sub), (ind,)

    return _scatter_into(out, isize, lambda idx: cast(sload(idx), out.dtype), store_index,
                         "atomic_add" if add else None)


@register(aten.index_add.default)
def index_add(x, dim, index, source, *, alpha=1):
    """``x.index_add(dim, index, source, alpha=alpha)`` for Triton kernels: a scatter with
    atomic adds (index checked, negatives raise as eager), into ``x``'s own buffer when
    nothing else reads it (:func:`_fresh_copy`); for C++ kernels ATen's, in place
    (``index_add_``) into such a buffer (:func:`_dying_own_buffer`)."""
    xs, ss = list(x.get_size()), list(source.get_size())
    if not triton_kernels(x.device):
        own = _dying_own_buffer(x) if source.dtype == x.dtype else None
        if own is not None:
            # ATen's ``index_add_`` into the dying accumulator: a chain of
            # ``out = out.index_add(...)`` (an MoE's expert outputs) copied the whole
            # accumulator on every call out of place
            return make_extern(aten.index_add_.default, [x, dim, index, source],
                               {"alpha": alpha} if alpha != 1 else {}, fallback=False, layout=own.layout)
        return fallback_handler(x, dim, index, source, alpha=alpha)
    if (not xs or len(ss) != len(xs) or len(index.get_size()) != 1
            or x.dtype not in (torch.float32, torch.float64) or source.dtype != x.dtype):
        return fallback_handler(x, dim, index, source, alpha=alpha)
    dim = dim % len(xs)
    out = _fresh_copy(x)
    iload, sload = index.make_loader(), source.make_loader()
    op = _user_op()

    def store_index(idx):
        sym, ind = _indirect(iload([idx[dim]]), xs[dim], op, dim, idx, ss, wrap=False)
        sub = list(idx)
        sub[dim] = sym
        return out.layout.index(sub), (ind,)

    def value(idx):
        v = sload(idx)
        return v if alpha == 1 else Op("mul", (v, Constant(alpha, x.dtype)), x.dtype)

    return _scatter_into(out, ss, value, store_index, "atomic_add")


@register(aten.index_put.default, aten._unsafe_index_put.default)
def index_put(x, indices, values, accumulate=False):
    xs = list(x.get_size())
    if any(i is None or i.dtype in (torch.bool, torch.uint8) for i in indices) or not indices:
        return fallback_handler(x, indices, values, accumulate)
    out = _fresh_copy(x)
    k = len(indices)
    bsize = list(torch.broadcast_shapes(*[tuple(current_graph().hint(s) for s in i.get_size()) for i in indices]))
    bsize = [sympy.Integer(b) for b in bsize] if all(not s.free_symbols for i in indices for s in map(sympy.sympify, i.get_size())) else None
    if bsize is None:
        return fallback_handler(x, indices, values, accumulate)
    size = bsize + xs[k:]
    loaders = [broadcast_loader(i, bsize) for i in indices]
    vload = broadcast_loader(values, size)
    op = _user_op()

    def store_index(idx):
        b, rest = idx[:len(bsize)], idx[len(bsize):]
        sub, inds = [], []
        for d, ld in enumerate(loaders):
            sym, ind = _indirect(ld(b), xs[d], op, d, idx, size)
            sub.append(sym)
            inds.append(ind)
        return out.layout.index(sub + list(rest)), tuple(inds)

    return _scatter_into(out, size, lambda idx: cast(vload(idx), out.dtype), store_index,
                         "atomic_add" if accumulate else None)


@register(aten.slice_scatter.default)
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    xs = x.get_size()
    dim = dim % len(xs)
    start = _norm_start(start, xs[dim])
    ssize = src.get_size()[dim]
    xload, sload = x.make_loader(), src.make_loader()
    odt = out_dtype()

    def inner(idx):
        rel = idx[dim] - start
        pos = IndexValue(rel, torch.int64)
        zero = Constant(0, torch.int64)
        mask = Op("logical_and", (Op("ge", (pos, zero), torch.bool),
                                  Op("lt", (pos, IndexValue(ssize * step, torch.int64)), torch.bool)), torch.bool)
        if step != 1:
            on_step = Op("eq", (Op("remainder", (pos, Constant(step, torch.int64)), torch.int64), zero), torch.bool)
            mask = Op("logical_and", (mask, on_step), torch.bool)
        sub = list(idx)
        from torch.utils._sympy.functions import FloorDiv
        sub[dim] = FloorDiv(rel, step) if step != 1 else rel
        return Op("where", (mask, Masked(mask, cast(sload(sub), odt), _zero(odt), odt), cast(xload(idx), odt)), odt)

    return TensorBox(Pointwise(out_size(), odt, device(), inner))


# ---------------------------------------------------------------- extern kernels and fallbacks


def make_extern(op, args, kwargs, fallback: bool, layout=None, fx_args=None):
    """An extern ATen call; returns a box, or a (nested) tuple of boxes for tuple outputs.

    ``layout``: the result's layout when the caller knows it differs from the fake
    value's (a channels-last convolution); otherwise, when an argument was stored in
    other strides than its fake value's (codegen/layout.py), the fake kernel runs again
    on fakes with those strides to learn the result's strides.  The wrapper checks them
    at run time either way."""
    graph = current_graph()
    val = out_val()
    node = graph.current_node

    def realize_args(a, fx_arg):
        # an unrealized argument is stored with the strides eager gives it (the fake
        # value's), so the kernel's outputs get the strides the graph expects: a
        # contiguous q for llama's attention, where eager's is a transpose, made the
        # wrapper copy every attention output to the expected strides
        if isinstance(a, TensorBox):
            fake = fx_arg.meta.get("val") if isinstance(fx_arg, torch.fx.Node) else None
            same = (isinstance(fake, torch.Tensor) and fake.dim() == len(a.get_size())
                    and all(to_sympy(s) == sympy.sympify(z) for s, z in zip(fake.shape, a.get_size())))
            if same and layout_opt.prefers_channels_last(a.data, a.get_size()):
                return a.realize(layout_opt.channels_last_strides(a.get_size()))
            dense = graph._dense_stride(fake) if same else None
            if same and dense is None and any(type(st) is int and st == 0 and not (type(sz) is int and sz == 1)
                                              for st, sz in zip(fake.stride(), fake.shape)):
                realize_expanded_root(a)  # eager passes a stride-0 alias: so do we
            return a.realize(dense)
        if isinstance(a, (list, tuple)):
            fx = fx_arg if isinstance(fx_arg, (list, tuple)) and len(fx_arg) == len(a) else [None] * len(a)
            return type(a)(realize_args(b, f) for b, f in zip(a, fx))
        return a

    if fx_args is None:  # ``fx_args``: the graph's arguments matching ``args``, when they differ from the node's
        fx_args = list(node.args) if node is not None else []
    fx_args = list(fx_args) + [None] * (len(args) - len(fx_args))
    fx_kwargs = dict(node.kwargs) if node is not None else {}
    args = [realize_args(a, f) for a, f in zip(args, fx_args)]
    kwargs = {k: realize_args(v, fx_kwargs.get(k)) for k, v in kwargs.items()}
    if layout is None and node is not None:
        val = _restrided_val(op, args, fx_args, fx_kwargs, val)
    if isinstance(val, torch.Tensor):
        layout = layout or graph.layout_of(val)
        return TensorBox(graph.register_buffer(lambda name: ExternKernel(name, layout, op, args, kwargs, fallback)))
    parent = graph.register_buffer(lambda name: ExternKernel(name, None, op, args, kwargs, fallback))

    def unpack(v, path):
        if isinstance(v, torch.Tensor):
            layout = graph.layout_of(v)
            return TensorBox(graph.register_buffer(lambda name: MultiOutput(name, layout, parent, path)))
        if isinstance(v, (tuple, list)):
            return type(v)(unpack(w, path + (i,)) for i, w in enumerate(v))
        return v

    return unpack(val, ())


def _restrided_val(op, args, fx_args, fx_kwargs, val):
    """The op's fake result for arguments stored in other strides than their fake
    values' (static sizes only); ``val`` when none is, or when that cannot be worked out."""
    changed = {}
    for i, (a, f) in enumerate(zip(args, fx_args)):
        # ``traced_val``: a backward's saved activation given the forward's strides
        # (aot/dispatch.py) after the graph's fake values were computed
        fake = f.meta.get("traced_val", f.meta.get("val")) if isinstance(f, torch.fx.Node) else None
        if isinstance(a, (Buffer, ReinterpretView)) and isinstance(fake, torch.Tensor) and a.layout is not None:
            strides = [sympy.sympify(s) for s in a.layout.stride]
            if list(fake.stride()) != strides and all(s.is_Integer for s in strides) \
                    and all(isinstance(n, int) for n in fake.shape):
                changed[i] = [int(s) for s in strides]
    tensors = [v for v in torch.utils._pytree.tree_leaves(val) if isinstance(v, torch.Tensor)]
    mode = getattr(tensors[0], "fake_mode", None) if tensors else None
    if not changed or mode is None:
        return val
    try:
        with mode:
            fakes = []
            for i, f in enumerate(fx_args):
                fake = torch.fx.node.map_arg(f, lambda n: n.meta.get("val")) if isinstance(f, (torch.fx.Node, list, tuple)) else f
                if f is None and i < len(args) and isinstance(args[i], (int, float, bool, list, tuple)):
                    fake = args[i]  # a default the graph's call left out (max pooling's padding)
                if i in changed:
                    fake = torch.empty_strided(fake.shape, changed[i], dtype=fake.dtype, device=fake.device)
                elif isinstance(f, torch.fx.Node) and "traced_val" in f.meta:
                    fake = f.meta["traced_val"]
                fakes.append(fake)
            kw = {k: torch.fx.node.map_arg(v, lambda n: n.meta.get("val")) for k, v in fx_kwargs.items()}
            new = op(*fakes, **kw)
    except Exception:
        return val
    try:
        same = torch.utils._pytree.tree_structure(new) == torch.utils._pytree.tree_structure(val) and all(
            isinstance(a, torch.Tensor) == isinstance(b, torch.Tensor) and (
                not isinstance(a, torch.Tensor) or (a.shape == b.shape and a.dtype == b.dtype))
            for a, b in zip(torch.utils._pytree.tree_leaves(new), torch.utils._pytree.tree_leaves(val)))
    except Exception:
        same = False
    return new if same else val


def fallback_handler(*args, **kwargs):
    """Run the current op's ATen kernel as an extern call (counted in metrics.fallback_ops)."""
    from . import config, metrics

    op = current_graph().current_node.target
    if not config.implicit_fallbacks:
        raise NotImplementedError(f"no lowering for {op} and implicit_fallbacks=False")
    metrics.fallback_ops[str(op)] += 1
    return make_extern(op, args, kwargs, fallback=True)


def register_extern(*ops):
    """Ops that run their ATen kernel on purpose (libraries do them best)."""
    for op in ops:
        overloads = [getattr(op, n) for n in op.overloads()] if isinstance(op, torch._ops.OpOverloadPacket) else [op]
        for o in overloads:
            extern_ops.add(o)
            lowerings[o] = lambda *args, _op=o, **kwargs: make_extern(_op, args, kwargs, fallback=False)


register_extern(aten.bmm, aten.baddbmm, aten.convolution,
                aten.sort, aten.topk, aten._scaled_dot_product_flash_attention_for_cpu,
                aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_flash_attention,
                aten._scaled_dot_product_cudnn_attention, aten._scaled_dot_product_flash_attention_for_cpu_backward,
                aten._scaled_dot_product_efficient_attention_backward, aten._scaled_dot_product_flash_attention_backward,
                aten._cdist_forward, aten.cumsum, aten.cumprod, aten._cdist_backward)


register_extern(aten.mm, aten.addmm)  # in extern_ops; the lowerings below pick the kernel


@register(aten.addmm.default)
def addmm(bias, mat1, mat2, *, beta=1, alpha=1):
    """A linear layer through oneDNN (codegen/mkldnn.py), else ATen's addmm."""
    fused = mkldnn.linear(bias, mat1, mat2, beta, alpha)
    if fused is not None:
        return make_extern(torch.ops.mkldnn._linear_pointwise.default, fused[0], {}, fallback=False, layout=fused[1])
    kwargs = {k: v for k, v in (("beta", beta), ("alpha", alpha)) if v != 1}
    if not kwargs and _prefer_unfused_addmm(bias, mat2):
        # cuBLAS's addmm with a bias epilogue picks slower tiles than its mm (H100, BERT's
        # fp32 linears: 64x64 vs 128x128, 0.5 ms of a 11 ms step); the bias add fuses into
        # the consumers' kernel instead, as TorchInductor's unfuse_bias_add_to_pointwise
        node = current_graph().current_node
        prod = make_extern(aten.mm.default, [mat1, mat2], {}, fallback=False, fx_args=node.args[1:3])
        cdt = compute_dtype(out_dtype())
        return pointwise(lambda m, b: Op("add", (cast(m, cdt), cast(b, cdt)), cdt), prod, bias)
    return make_extern(aten.addmm.default, [bias, mat1, mat2], kwargs, fallback=False)


_POINTWISE_USERS = {aten.add.Tensor, aten.add.Scalar, aten.mul.Tensor, aten.mul.Scalar, aten.sub.Tensor,
                    aten.div.Tensor, aten.gelu.default, aten.relu.default, aten.silu.default, aten.erf.default,
                    aten.tanh.default, aten.sigmoid.default, aten.clone.default, aten.pow.Tensor_Scalar}
_VIEW_USERS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
_UNFUSE_DEVICES = {"cuda"}


def _prefer_unfused_addmm(bias, mat2) -> bool:
    """On CUDA, ``addmm`` as ``mm`` + a bias add when every use of its result (through
    views) is a pointwise op, which then computes the add (no extra memory pass)."""
    from . import config

    node = current_graph().current_node
    val = out_val()
    if (not config.unfuse_bias_addmm or not isinstance(val, torch.Tensor) or val.device.type not in _UNFUSE_DEVICES
            or not isinstance(bias, TensorBox) or len(bias.get_size()) != 1):
        return False

    def pointwise_uses(n, depth=0) -> bool:
        for user in n.users:
            if user.target in _VIEW_USERS and depth < 2:
                if not pointwise_uses(user, depth + 1):
                    return False
            elif user.target not in _POINTWISE_USERS:
                return False
        return bool(n.users)

    return pointwise_uses(node)


@register(aten.mm.default)
def mm(mat1, mat2):
    fused = mkldnn.linear(None, mat1, mat2)
    if fused is not None:
        return make_extern(torch.ops.mkldnn._linear_pointwise.default, fused[0], {}, fallback=False, layout=fused[1])
    return make_extern(aten.mm.default, [mat1, mat2], {}, fallback=False)


@register(torch.ops.mkldnn._convolution_pointwise.default)
def convolution_pointwise(x, weight, bias, padding, stride, dilation, groups, attr, scalars, algorithm):
    """oneDNN's convolution with a fused post-op and a prepacked weight (a raw tensor
    argument, codegen/freezing.py); channels-last as ``convolution``."""
    args = [x, weight, bias, padding, stride, dilation, groups, attr, scalars, algorithm]
    node = current_graph().current_node
    fake = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if not layout_opt.conv_prefers_channels_last(fake, weight, False):
        return make_extern(torch.ops.mkldnn._convolution_pointwise.default, args, {}, fallback=False)
    args[0] = layout_opt.realize_channels_last(x)
    size = out_size()
    out = Layout(size, layout_opt.channels_last_strides(size), sympy.Integer(0), out_val().dtype, out_val().device)
    return make_extern(torch.ops.mkldnn._convolution_pointwise.default, args, {}, fallback=False, layout=out)


@register(aten.convolution_backward)
def convolution_backward(grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
                         output_mask):
    """ATen's convolution backward; for a 2-d convolution that runs channels-last
    (codegen/layout.py) whose input is stored NCHW (a graph input: the first layer)
    the gradient, input and weight are handed over channels-last: given an NCHW input
    and weight oneDNN ran the backward in NCHW, copying the gradient (cnn's first
    layer: 839 vs 313 us; hf_resnet training 28.8 -> 26.1 ms).  An input already
    channels-last makes ATen pick channels-last by itself.  The gradients come back
    channels-last (the wrapper checks)."""
    node = current_graph().current_node
    args = [grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask]
    fakes = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in node.args[1:3]]
    if (layout_opt.conv_prefers_channels_last(fakes[0], fakes[1], transposed) and len(grad.get_size()) == 4
            and not layout_opt.channels_last_input(x)):
        args[:3] = [layout_opt.realize_channels_last(a) for a in (grad, x, weight)]
    return make_extern(aten.convolution_backward.default, args, {}, fallback=False)


@register(aten.convolution)
def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """ATen's convolution (oneDNN); a 2-d one on channels-last input and result
    (codegen/layout.py), where oneDNN is several times faster than on NCHW."""
    node = current_graph().current_node
    args = [x, weight, bias, stride, padding, dilation, transposed, output_padding, groups]
    fakes = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in node.args[:2]]
    if not layout_opt.conv_prefers_channels_last(fakes[0], fakes[1], transposed):
        return make_extern(aten.convolution.default, args, {}, fallback=False)
    args[0] = layout_opt.realize_channels_last(x)
    args[1] = layout_opt.realize_channels_last(weight)  # else ATen copies it, slower, on each call
    size = out_size()
    out = Layout(size, layout_opt.channels_last_strides(size), sympy.Integer(0), out_val().dtype,
                       out_val().device)
    return make_extern(aten.convolution.default, args, {}, fallback=False, layout=out)
