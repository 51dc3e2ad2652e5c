"""A numpy stand-in for ``triton.language.extra.libdevice`` under ``TRITON_INTERPRET=1``.

Triton's interpreter runs kernels as Python on numpy arrays, but it has no
implementation of libdevice's math functions (they return ``None``).  Kernels for CPU
tensors import this module as ``libdevice`` instead (each function runs torch's CPU
kernel of the same name on the array); on CUDA they use the real one, so the kernel
text is the same on both.  Each function takes interpreter tensors (or
Python scalars) and returns an interpreter tensor of the first argument's type.
"""
from __future__ import annotations

import numpy as np
import torch
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


_NAMES = {"nearbyint": "round", "rint": "round"}  # round half to even, like rint


def __getattr__(name):
    fn = getattr(torch, _NAMES.get(name, name), None)
    if fn is None or name.startswith("_"):
        raise AttributeError(f"libdevice stand-in has no {name!r}")
    return _wrap(lambda *arrays: fn(*[torch.as_tensor(a) for a in arrays]).numpy())
