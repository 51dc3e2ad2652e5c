"""Bounds of indirect indices: which need a check, and the error eager raises.

An indirect index (gather, embedding, ``x[i]``, scatter, index_put...) comes from a
tensor, so the kernel cannot know it is in range; eager raises and so must we
(``codegen.config.assert_indirect_indexing``, default True, as
``torch._inductor.config.assert_indirect_indexing``).  :func:`value_range` proves the
range of an integer IR value where it can (an ``arange``, a ``clamp``, a
``where``/mask, a ``remainder`` by a constant), so the lowering drops the check (and
the negative wrap) for those; :func:`index_error` builds the exception eager raises.
"""
from __future__ import annotations

from typing import Optional

import sympy
import torch

from .ir import Constant, IndexValue, Masked, Op

_WIDENING = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _linear_range(expr, var_ranges: dict) -> Optional[tuple]:
    """``(lo, hi)`` of an expression linear in index variables over ``[0, size)`` each."""
    expr = sympy.expand(sympy.sympify(expr))
    free = [s for s in expr.free_symbols if s in var_ranges]
    lo = hi = expr.xreplace({s: 0 for s in free})
    for s in free:
        c = expr.coeff(s)
        if not c.is_number or (expr - c * s).has(s):
            return None
        span = c * (var_ranges[s] - 1)
        if c >= 0:
            hi += span
        else:
            lo += span
    if any(s not in var_ranges and not s.is_positive for s in expr.free_symbols):
        return None  # an index variable whose range we were not told, or an unbacked size
    return lo, hi


_UNKNOWN = (None, None)


def _both(f, a, b):
    return None if a is None or b is None else f(a, b)


def _either(f, a, b):
    return a if b is None else b if a is None else f(a, b)


def value_range(v, var_ranges: dict) -> Optional[tuple]:
    """``(lo, hi)`` (sympy) bounding the integer IR value ``v``, or None if unknown.

    ``var_ranges`` maps index variables to their sizes (each runs over ``[0, size)``).
    Loads of tensors are unknown: their values are the user's."""
    lo, hi = _range(v, var_ranges)
    return None if lo is None or hi is None else (lo, hi)


def _range(v, var_ranges: dict) -> tuple:
    """``(lo, hi)``, either None where unknown (``max(i, 0)`` has a lower bound only)."""
    if isinstance(v, Constant):
        if isinstance(v.value, (bool, int)):
            return sympy.Integer(int(v.value)), sympy.Integer(int(v.value))
        return _UNKNOWN
    if isinstance(v, IndexValue):
        return _linear_range(v.expr, var_ranges) or _UNKNOWN
    if isinstance(v, Masked):
        other = v.other if isinstance(v.other, Constant) else Constant(v.other, v.dtype)
        (alo, ahi), (blo, bhi) = _range(v.body, var_ranges), _range(other, var_ranges)
        return _both(sympy.Min, alo, blo), _both(sympy.Max, ahi, bhi)
    if not isinstance(v, Op) or v.dtype.is_floating_point or v.dtype == torch.bool:
        return _UNKNOWN
    if v.name == "where":
        (alo, ahi) = _narrow(v.args[0], v.args[1], _range(v.args[1], var_ranges), var_ranges)
        (blo, bhi) = _range(v.args[2], var_ranges)
        return _both(sympy.Min, alo, blo), _both(sympy.Max, ahi, bhi)
    args = [_range(a, var_ranges) for a in v.args]
    if v.name == "to_dtype":
        src = v.args[0].dtype
        if src == torch.bool:
            return sympy.Integer(0), sympy.Integer(1)
        if src in _WIDENING and v.dtype in _WIDENING and src.itemsize <= v.dtype.itemsize:
            return args[0]
        return _UNKNOWN
    if len(args) != 2:
        return _UNKNOWN
    (alo, ahi), (blo, bhi) = args
    if v.name == "maximum":  # at least either argument's lower bound
        return _either(sympy.Max, alo, blo), _both(sympy.Max, ahi, bhi)
    if v.name == "minimum":
        return _both(sympy.Min, alo, blo), _either(sympy.Min, ahi, bhi)
    if v.name == "add":
        return _both(sympy.Add, alo, blo), _both(sympy.Add, ahi, bhi)
    if v.name == "sub":
        return _both(lambda a, b: a - b, alo, bhi), _both(lambda a, b: a - b, ahi, blo)
    if v.name == "mul" and blo is not None and blo == bhi and blo.is_number:
        lo, hi = (_both(sympy.Mul, alo, blo), _both(sympy.Mul, ahi, blo))
        return (lo, hi) if blo >= 0 else (hi, lo)
    if v.name == "remainder" and blo is not None and blo == bhi and blo.is_number and blo > 0:
        return sympy.Integer(0), blo - 1  # Python/ATen remainder: the divisor's sign
    return _UNKNOWN


def _narrow(cond, value, rng: tuple, var_ranges: dict) -> tuple:
    """The bounds ``(lo, hi)`` (either may be None: unknown) of ``value`` where the bool
    IR value ``cond`` holds (``where((i >= 0) & (i < n), i, 0)``), narrowing ``rng``."""
    if not isinstance(cond, Op):
        return rng
    if cond.name in ("logical_and", "bitwise_and"):
        return _narrow(cond.args[1], value, _narrow(cond.args[0], value, rng, var_ranges), var_ranges)
    flip = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
    if cond.name not in flip:
        return rng
    a, b = cond.args
    name = cond.name
    if b == value and a != value:
        a, b, name = b, a, flip[name]
    if a != value:
        return rng
    olo, ohi = _range(b, var_ranges)
    lo, hi = rng
    if name in ("lt", "le") and ohi is not None:
        bound = ohi - (1 if name == "lt" else 0)
        hi = bound if hi is None else sympy.Min(hi, bound)
    elif name in ("gt", "ge") and olo is not None:
        bound = olo + (1 if name == "gt" else 0)
        lo = bound if lo is None else sympy.Max(lo, bound)
    return lo, hi


def _holds(cond) -> bool:
    try:
        return bool(cond)
    except TypeError:  # symbolic: sympy could not decide
        return False


def needs(value, size, var_ranges: dict, wrap: bool = True) -> tuple[bool, bool]:
    """``(check, wrap)`` for an indirect index ``value`` into a dimension of ``size``:
    whether its range must be checked at run time, and whether negatives must be wrapped
    (only if the op wraps them, ``wrap``; else a negative index is out of range)."""
    from . import config

    rng = value_range(value, var_ranges)
    if rng is None:
        return bool(config.assert_indirect_indexing), wrap
    lo, hi = rng
    wrap = wrap and not _holds(sympy.simplify(lo) >= 0)
    in_range = _holds(sympy.simplify(lo + (size if wrap else 0)) >= 0) and _holds(sympy.simplify(size - 1 - hi) >= 0)
    return bool(config.assert_indirect_indexing) and not in_range, wrap


_IS_RUNTIME_ERROR = ("aten.gather", "aten.scatter")


ZERO_DIVISION = "integer division by zero"  # the op of a kernel's divisor check (C++ kernels)


def index_error(op: str, dim: int, index: int, size: int) -> Exception:
    """The exception eager raises for ``index`` out of ``[-size, size)`` at ``dim`` of
    ``op`` (an ATen op name): ``RuntimeError`` for gather/scatter, else ``IndexError``;
    the message names the index, the size and the op."""
    if op == ZERO_DIVISION:
        return RuntimeError("ZeroDivisionError")  # eager's message for an integer tensor divided by 0
    where = f"index {index} is out of bounds for dimension {dim} with size {size}"
    if op.startswith(("aten.index_select", "aten.embedding", "aten.index_add")):
        msg = f"index out of range in self ({where})"
    elif op.startswith("aten.take"):
        msg = f"out of range: tried to access index {index} on a tensor of {size} elements."
    else:
        msg = where
    msg += f" [torchkiln: in the compiled kernel of {op or 'an indirect index'}]"
    return (RuntimeError if op.startswith(_IS_RUNTIME_ERROR) else IndexError)(msg)
