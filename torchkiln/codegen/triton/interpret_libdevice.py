"""A numpy stand-in for ``triton.language.extra.libdevice`` under ``TRITON_INTERPRET=1``.

Triton's interpreter runs kernels as Python on numpy arrays, but it has no
implementation of libdevice's math functions (they return ``None``).  Kernels for CPU
tensors import this module as ``libdevice`` instead; on CUDA they use the real one, so
the kernel text is the same on both.  Each function takes interpreter tensors (or
Python scalars) and returns an interpreter tensor of the first argument's type.
"""
from __future__ import annotations

import math

import numpy as np
import triton.language as tl


def _handle_cls():
    from triton.runtime.interpreter import TensorHandle

    return TensorHandle


def _data(x):
    if isinstance(x, tl.constexpr):
        x = x.value
    if isinstance(x, tl.tensor):
        return x.handle.data
    return np.asarray(x)


def _first_tensor(args):  # the result dtype is the first tensor argument's
    for a in args:
        if isinstance(a, tl.tensor):
            return a
    raise TypeError("libdevice stand-in needs a tensor argument")


def _wrap(fn):
    def apply(*args):
        first = _first_tensor(args)
        with np.errstate(all="ignore"):
            out = np.asarray(fn(*[_data(a) for a in args])).astype(first.handle.data.dtype)
        like = [a for a in args if isinstance(a, tl.tensor) and a.handle.data.shape == out.shape]
        if not like:
            raise ValueError("libdevice stand-in: no argument has the broadcast shape")
        return tl.tensor(_handle_cls()(out, first.handle.dtype), like[0].type.with_element_ty(first.dtype)
                         if hasattr(like[0].type, "with_element_ty") else first.type)

    return apply


_erfinv = np.vectorize(lambda v: _erfinv_scalar(float(v)), otypes=[np.float64])
_lgamma = np.vectorize(lambda v: math.lgamma(v) if v > 0 or v != int(v) else math.inf, otypes=[np.float64])
_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _erfinv_scalar(y: float) -> float:
    if y <= -1.0:
        return -math.inf if y == -1.0 else math.nan
    if y >= 1.0:
        return math.inf if y == 1.0 else math.nan
    # Initial guess (Giles' approximation), then Newton steps on erf(x) - y.
    w = -math.log((1.0 - y) * (1.0 + y))
    if w < 5.0:
        w -= 2.5
        p = 2.81022636e-08
        for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                  -0.00417768164, 0.246640727, 1.50140941):
            p = c + p * w
    else:
        w = math.sqrt(w) - 3.0
        p = -0.000200214257
        for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                  0.00943887047, 1.00167406, 2.83297682):
            p = c + p * w
    x = p * y
    for _ in range(2):
        x -= (math.erf(x) - y) / (2.0 / math.sqrt(math.pi) * math.exp(-x * x))
    return x


_FUNCS = {
    "abs": np.abs, "acos": np.arccos, "acosh": np.arccosh, "asin": np.arcsin, "asinh": np.arcsinh,
    "atan": np.arctan, "atan2": np.arctan2, "atanh": np.arctanh, "ceil": np.ceil, "copysign": np.copysign,
    "cos": np.cos, "cosh": np.cosh, "erf": _erf, "erfc": _erfc, "erfinv": _erfinv, "exp": np.exp,
    "exp2": np.exp2, "expm1": np.expm1, "floor": np.floor, "fmod": np.fmod, "hypot": np.hypot,
    "lgamma": _lgamma, "log": np.log, "log10": np.log10, "log1p": np.log1p, "log2": np.log2,
    "nearbyint": np.rint, "rint": np.rint, "pow": np.power, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sin": np.sin, "sinh": np.sinh, "sqrt": np.sqrt, "tan": np.tan, "tanh": np.tanh, "trunc": np.trunc,
}


def __getattr__(name):
    if name in _FUNCS:
        return _wrap(_FUNCS[name])
    raise AttributeError(f"libdevice stand-in has no {name!r}")
