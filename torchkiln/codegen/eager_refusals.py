"""Calls that eager PyTorch refuses but whose fake (meta) kernels accept.

ATen's kernels have no version for some dtypes (``abs`` of bool: "not implemented for
'Bool'"; ``softmax``, ``gelu``, ``lerp`` of integers) and check some values only when
they run (``masked_fill`` of a float16 tensor with 1e6); fake tensors check neither, so a
decomposition or a lowering would compute an answer where eager raises.  Such a call is
not decomposed (:mod:`.decompositions`) and is lowered to an extern call of its ATen
kernel (:mod:`.graph`), which raises eager's own error when the compiled graph runs.
Refusing more than eager does is safe (an extern call computes eager's answer); refusing
less is a silent wrong answer, so each entry names what eager refuses, from its CPU
kernels (torch 2.13; CUDA's refuse the same or more)."""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten

_INTEGRAL = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                       torch.uint16, torch.uint32, torch.uint64})


def scalar_fits(value, dtype: torch.dtype) -> bool:
    """Whether ATen converts the Python number ``value`` to ``dtype`` without its
    "value cannot be converted to type ... without overflow" error (inf and NaN fit a
    floating type; unsigned types also take the negated range, as ATen's check)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or dtype == torch.bool or dtype.is_complex:
        return True
    if dtype.is_floating_point:
        return not (math.isfinite(value) and abs(value) > torch.finfo(dtype).max)
    info = torch.iinfo(dtype)
    lo = -info.max if info.min == 0 else info.min
    return lo <= value <= info.max  # NaN and inf compare False


def _kind(v) -> str | None:
    """'bool', 'int' or 'float' (complex too): the category of a tensor's or number's type."""
    if isinstance(v, torch.Tensor):
        return "bool" if v.dtype == torch.bool else "float" if v.dtype not in _INTEGRAL else "int"
    if isinstance(v, (bool, torch.SymBool)):
        return "bool"
    if isinstance(v, (int, torch.SymInt)):
        return "int"
    if isinstance(v, (float, complex, torch.SymFloat)):
        return "float"
    return None


def _result_kind(args) -> str | None:
    """The category of the type ATen computes ``args`` in (``torch.result_type``): the
    highest category of any of them, bool < int < float."""
    kinds = {_kind(a) for a in args} - {None}
    if not any(isinstance(a, torch.Tensor) for a in args):
        return None
    return "float" if "float" in kinds else "int" if "int" in kinds else "bool"


def _bool_result(n):
    """The first ``n`` arguments compute in bool (ATen's kernel has no bool version)."""
    return lambda *a, **k: _result_kind(a[:n]) == "bool"


def _integral_result(n):
    """The first ``n`` arguments compute in an integer or bool type (float kernels only)."""
    return lambda *a, **k: _result_kind(a[:n]) in ("bool", "int")


def _bool_input(*a, **k) -> bool:
    return isinstance(a[0], torch.Tensor) and a[0].dtype == torch.bool


def _alpha(*a, alpha=1, **k) -> bool:
    """add/sub: a bool ``alpha`` with a result that is not bool, or a float one with an
    integer result (eager raises)."""
    out = _result_kind(a[:2])
    return (isinstance(alpha, (bool, torch.SymBool)) and out != "bool") or (
        isinstance(alpha, (float, torch.SymFloat)) and out in ("bool", "int"))


def _masked_fill(a, mask, value, **k) -> bool:
    """masked_fill converts its value with an overflow check; a tensor value is checked
    when the kernel runs: refused unless every value of its dtype fits ``a``'s."""
    if isinstance(value, torch.Tensor):
        return not _dtype_fits(value.dtype, a.dtype)
    return not scalar_fits(value, a.dtype)


def _dtype_fits(src: torch.dtype, dst: torch.dtype) -> bool:
    """Whether every value of ``src`` passes ``scalar_fits`` for ``dst``."""
    if src == dst or src == torch.bool or dst == torch.bool or dst.is_complex:
        return True
    if src.is_complex:
        return False
    top = torch.finfo(src).max if src.is_floating_point else torch.iinfo(src).max
    if dst.is_floating_point:
        return top <= torch.finfo(dst).max
    if src.is_floating_point:
        return False
    info = torch.iinfo(dst)
    return (-info.max if info.min == 0 else info.min) <= torch.iinfo(src).min and top <= info.max


def _arange_dtype(*a, dtype=None, **k) -> bool:
    return dtype == torch.bool


def _bool_clamp(x, lo=None, hi=None, **k) -> bool:
    """clamp of bool with both bounds (one bound is clamp_min/clamp_max, which eager takes)."""
    return x.dtype == torch.bool and lo is not None and hi is not None


def _integer_addcdiv(x, t1, t2, **k) -> bool:
    """addcdiv refuses integer division (both divided tensors integral)."""
    return all(t.dtype in _INTEGRAL for t in (t1, t2))


_BOOL_ONLY = (aten.abs, aten.floor, aten.ceil, aten.trunc, aten.fix, aten.relu, aten.hardtanh, aten.argmax,
              aten.argmin, aten.trace, aten.threshold, aten.clamp_min.default, aten.clamp_max.default,
              aten.clamp.default, aten.round.default)
_BOOL_RESULT = {aten.remainder: 2, aten.fmod: 2, aten.floor_divide: 2, aten.div.Tensor_mode: 2, aten.div.Scalar_mode: 2,
                aten.pow.Tensor_Tensor: 2, aten.pow.Scalar: 2, aten.bitwise_left_shift: 2, aten.bitwise_right_shift: 2,
                aten.__lshift__: 2, aten.__rshift__: 2, aten.addcmul: 3, aten.dot: 2, aten.vdot: 2, aten.mv: 2}
_FLOAT_ONLY = {aten.frac: 1, aten.hypot: 2, aten._softmax: 1, aten._log_softmax: 1, aten.gelu: 1, aten.silu: 1,
               aten.hardswish: 1, aten.hardsigmoid: 1, aten.softplus: 1, aten.mish: 1, aten.logaddexp: 2,
               aten.logaddexp2: 2, aten.lerp: 1, aten.elu: 1, aten.leaky_relu: 1, aten.glu: 1, aten.softshrink: 1,
               aten.hardshrink: 1, aten.log_sigmoid_forward: 1, aten.mse_loss: 2, aten.smooth_l1_loss: 2,
               aten.huber_loss: 2, aten.binary_cross_entropy: 2, aten.native_layer_norm: 1, aten.nextafter: 2,
               aten.round.decimals: 1, aten.rrelu_with_noise: 1, aten.logcumsumexp: 1}

REFUSALS: dict = {
    **{op: _bool_input for op in _BOOL_ONLY},
    **{op: _bool_result(n) for op, n in _BOOL_RESULT.items()},
    **{op: _integral_result(n) for op, n in _FLOAT_ONLY.items()},
    aten.clamp.Tensor: _bool_clamp, aten.addcdiv: _integer_addcdiv,
    aten.add.Tensor: _alpha, aten.sub.Tensor: _alpha, aten.add.Scalar: _alpha, aten.sub.Scalar: _alpha,
    aten.masked_fill: _masked_fill, aten.arange: _arange_dtype,
}


def eager_refuses(op, args, kwargs) -> bool:
    """Whether eager raises on ``op(*args, **kwargs)`` (fake tensors and numbers) where
    the fake kernel does not.  A predicate that cannot judge its arguments refuses."""
    check = REFUSALS.get(op) or REFUSALS.get(getattr(op, "overloadpacket", None))
    if check is None:
        return False
    try:
        return bool(check(*args, **kwargs))
    except Exception:  # an unexpected argument form: the ATen kernel decides
        return True
