"""Calls that eager PyTorch refuses but whose fake (meta) kernels accept.

ATen's kernels have no version for some dtypes (``abs`` of bool: "not implemented for
'Bool'"; ``softmax``, ``gelu``, ``lerp`` of integers) and check some values only when
they run (``masked_fill`` of a float16 tensor with 1e6); fake tensors check neither, so a
decomposition or a lowering would compute an answer where eager raises.  Such a call is
not decomposed (:mod:`.decompositions`) and is lowered to an extern call of its ATen
kernel (:mod:`.graph`), which raises eager's own error when the compiled graph runs.
Refusing more than eager does is safe (an extern call computes eager's answer); refusing
less is a silent wrong answer, so each entry names what eager refuses, from its CPU
kernels (torch 2.13).  CUDA's kernels accept some of these (torch 2.11 on the H100); the
extern call then gives their answer."""
from __future__ import annotations

import math

import torch

from ..aot.torch_level_refusals import INTEGRAL as _INTEGRAL
from ..aot.torch_level_refusals import multi_margin_loss_refused as _multi_margin_loss

aten = torch.ops.aten


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


def _signed_or_bool(x, *a, **k) -> bool:
    """Resampling kernels with a uint8 version but none for bool or signed integers."""
    return x.dtype in _INTEGRAL and x.dtype != torch.uint8


def _hardtanh(x, lo=-1.0, hi=1.0, **k) -> bool:
    """hardtanh of bool, or of an unsigned tensor with a negative limit."""
    return x.dtype == torch.bool or x.dtype == torch.uint8 and (lo < 0 or hi < 0)


def _half_or_integral(x, *a, **k) -> bool:
    return x.dtype in _INTEGRAL or x.dtype == torch.float16


def _tensor(v) -> bool:
    return isinstance(v, torch.Tensor)


def _same_dtype_args(*positions):
    """Kernels that read the tensor arguments at ``positions`` in the first argument's
    dtype and refuse another ("expected scalar type Float but found Double", addmv,
    heaviside, linalg_cross); a decomposition promoted them instead (and for
    ``binary_cross_entropy``'s weight, ``soft_margin_loss``/``huber_loss``'s target gave a
    float64 result where eager's is the input's float32)."""
    def check(x, *a, **k) -> bool:
        others = [a[i - 1] for i in positions if i - 1 < len(a)]
        return any(_tensor(o) and o.dtype != x.dtype for o in others)
    return check


def _float_only_same_dtype(*positions):
    same = _same_dtype_args(*positions)
    integral = _integral_result(1)
    return lambda *a, **k: integral(*a, **k) or same(*a, **k)


def _nll_loss(x, target, weight=None, *a, **k) -> bool:
    """nll_loss: a float input, a Long or Byte target, a weight of the input's dtype."""
    return (x.dtype in _INTEGRAL or target.dtype not in (torch.int64, torch.uint8)
            or _tensor(weight) and weight.dtype != x.dtype)


def _norm_params(*positions):
    """native_layer_norm / native_group_norm on CPU: weight and bias of the input's dtype,
    or float32 ones with a bfloat16/float16 input (its mixed-type kernel)."""
    def check(x, *a, **k) -> bool:
        if x.dtype in _INTEGRAL:
            return True
        for i in positions:
            p = a[i - 1] if i - 1 < len(a) else None
            if _tensor(p) and p.dtype != x.dtype and not (
                    x.dtype in (torch.bfloat16, torch.float16) and p.dtype == torch.float32):
                return True
        return False
    return check


def _index_put(x, indices, values, *a, **k) -> bool:
    """index_put refuses values of another dtype ("Index put requires the source and
    destination dtypes match"); the lowering converted them."""
    return _tensor(values) and values.dtype != x.dtype


def _integer_addcdiv(x, t1, t2, **k) -> bool:
    """addcdiv refuses integer division (both divided tensors integral)."""
    return all(t.dtype in _INTEGRAL for t in (t1, t2))


_BOOL_ONLY = ("abs", "floor", "ceil", "trunc", "fix", "relu", "argmax",
              "argmin", "trace", "threshold", "clamp_min.default", "clamp_max.default",
              "clamp.default", "round.default", "max_pool2d_with_indices", "max_pool3d_with_indices",
              "reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "median", "kthvalue", "searchsorted",
              "bucketize")
_BOOL_RESULT = {"remainder": 2, "fmod": 2, "floor_divide": 2, "div.Tensor_mode": 2, "div.Scalar_mode": 2,
                "pow.Tensor_Tensor": 2, "pow.Scalar": 2, "bitwise_left_shift": 2, "bitwise_right_shift": 2,
                "__lshift__": 2, "__rshift__": 2, "addcmul": 3, "dot": 2, "vdot": 2, "mv": 2,
                "mm": 2, "bmm": 2, "addmm": 3, "baddbmm": 3, "addmv": 3, "gcd": 2, "lcm": 2}
_FLOAT_ONLY = {"frac": 1, "hypot": 2, "_softmax": 1, "_log_softmax": 1, "gelu": 1, "silu": 1,
               "hardswish": 1, "hardsigmoid": 1, "softplus": 1, "mish": 1, "logaddexp": 2,
               "logaddexp2": 2, "lerp": 1, "elu": 1, "leaky_relu": 1, "glu": 1, "softshrink": 1,
               "hardshrink": 1, "log_sigmoid_forward": 1, "mse_loss": 2, "smooth_l1_loss": 2,
                "nextafter": 2,
               "round.decimals": 1, "rrelu_with_noise": 1, "logcumsumexp": 1, "native_batch_norm": 1,
               "_native_batch_norm_legit": 1, "_native_batch_norm_legit_no_training": 1,
               "_native_batch_norm_legit_functional": 1, "_fused_rms_norm": 1,
               "max_pool1d": 1, "_adaptive_avg_pool2d": 1, "_adaptive_avg_pool3d": 1,
               "adaptive_max_pool2d": 1, "adaptive_max_pool3d": 1, "im2col": 1, "col2im": 1,
               "_prelu_kernel": 1, "_cdist_forward": 1,
               "_pdist_forward": 1, "max_unpool2d": 1, "max_unpool3d": 1,
               "upsample_linear1d": 1, "upsample_trilinear3d": 1, "histc": 1, "celu": 1, "selu": 1}

_BY_NAME = {
    **{op: _bool_input for op in _BOOL_ONLY},
    **{op: _bool_result(n) for op, n in _BOOL_RESULT.items()},
    **{op: _integral_result(n) for op, n in _FLOAT_ONLY.items()},
    "clamp.Tensor": _bool_clamp, "addcdiv": _integer_addcdiv, "hardtanh": _hardtanh,
    **{op: _signed_or_bool for op in ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
                                      "_upsample_nearest_exact1d", "_upsample_nearest_exact2d",
                                      "_upsample_nearest_exact3d", "upsample_bilinear2d",
                                      "upsample_bicubic2d", "_upsample_bilinear2d_aa")},
    "multi_margin_loss": _multi_margin_loss, "multilabel_margin_loss_forward": _half_or_integral,
    "nll_loss_forward": _nll_loss, "nll_loss2d_forward": _nll_loss,
    "native_layer_norm": _norm_params(2, 3), "native_group_norm": _norm_params(1, 2),
    "binary_cross_entropy": _float_only_same_dtype(1, 2), "huber_loss": _float_only_same_dtype(1),
    "soft_margin_loss": _float_only_same_dtype(1),
    **{op: _same_dtype_args(1) for op in ("mv", "heaviside", "linalg_cross")},
    "special_log_ndtr": lambda x, *a, **k: x.dtype == torch.float16,
    "add.Tensor": _alpha, "sub.Tensor": _alpha, "add.Scalar": _alpha, "sub.Scalar": _alpha,
    "masked_fill": _masked_fill, "arange": _arange_dtype, "index_put": _index_put, "index_put_": _index_put,
}


def _resolve(name: str):
    """``aten.<name>`` (a packet, or ``packet.overload``), or None where this torch lacks it."""
    op = aten
    for part in name.split("."):
        op = getattr(op, part, None)
        if op is None:
            return None
    return op


# {OpOverloadPacket or OpOverload: predicate(*args, **kwargs) -> whether eager raises}
REFUSALS: dict = {op: check for op, check in ((_resolve(n), c) for n, c in _BY_NAME.items()) if op is not None}


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
