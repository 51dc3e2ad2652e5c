"""Render one :class:`~torchkiln.codegen.ir.FusedKernel` as ``@triton.jit`` source.

Layout of a rendered kernel (the IR semantics of docs/codegen.md, blocked):

* the outer iteration space is flattened: each program handles ``XBLOCK`` consecutive
  points ``xindex`` (masked by ``xmask = xindex < xnumel``), and the per-dimension index
  variables ``x0, x1...`` are recovered with ``ir.split_flat_index`` (after merging the
  dims every access walks contiguously, ``merge_dims.py``);
* a pointwise kernel works on ``[XBLOCK]`` blocks; a reduction kernel on
  ``[XBLOCK, RBLOCK]`` tiles, with per-row values ``[XBLOCK, 1]``;
* a reduction kernel is rendered twice: *persistent* (one ``RBLOCK >= rnumel`` tile
  holds a whole row, values stay in registers across loops) and *looped* (each
  reduction loop becomes ``for roffset in range(0, rnumel, RBLOCK)`` with tile
  accumulators, reduced after the loop).  The launcher picks one at run time from
  ``rnumel``, so dynamic sizes need no recompile;
* every index expression and stored value is broadcast to the block shape, and loads
  and stores are masked by the block mask (and by enclosing ``Masked`` conditions);
* float16/bfloat16 values are computed in float32, rounded by ``to_dtype`` and stores;
* sizes are kernel arguments (``s0``...), plus ``xnumel``/``rnumel`` computed by the
  launcher; ``IDX64`` (constexpr) switches index arithmetic to int64 for big tensors.
"""
from __future__ import annotations

import math
import re

import sympy
import torch

from .. import ir
from .merge_dims import index_expressions, merge
from ..printers import pexpr
from .printer import texpr

_TL = {
    torch.float32: "tl.float32", torch.float64: "tl.float64", torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16", torch.int8: "tl.int8", torch.int16: "tl.int16", torch.int32: "tl.int32",
    torch.int64: "tl.int64", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}


def tl_dtype(dtype: torch.dtype) -> str:
    """The Triton type of a buffer element."""
    if dtype not in _TL:
        raise NotImplementedError(f"Triton kernels do not support {dtype}")
    return _TL[dtype]


def compute_dtype(dtype: torch.dtype) -> str:
    """The Triton type values of ``dtype`` are computed in (float32 for half types)."""
    if dtype in (torch.float16, torch.bfloat16):
        return "tl.float32"
    return tl_dtype(dtype)


def _literal(value, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "1" if value else "0"
    if dtype.is_floating_point:
        v = float(value)
        if v != v:
            return 'float("nan")'
        if math.isinf(v):
            return f'float("{v}")'
        return repr(v)
    return str(int(value))


def _identity(reduction_type: str, dtype: torch.dtype) -> str:
    if reduction_type in ("sum", "any"):
        return "0"
    if reduction_type in ("prod", "all"):
        return "1"
    low = reduction_type in ("max", "argmax")
    if dtype.is_floating_point:
        return 'float("-inf")' if low else 'float("inf")'
    if dtype == torch.bool:
        return "0" if low else "1"
    info = torch.iinfo(dtype)
    if low and info.min == -(2**63):
        return f"({info.min + 1} - 1)"  # -2**63 is not a literal Triton can parse
    return str(info.min if low else info.max)


def _value_dtype(r: ir.Reduce) -> torch.dtype:
    """The dtype values are compared in: the input's for argmax/argmin, else the accumulator's."""
    return r.value.dtype if r.reduction_type in ("argmax", "argmin") else r.dtype


def _compensated(r: ir.Reduce) -> bool:
    """A float32 sum of a looped reduction keeps a Kahan compensation tile: each lane
    adds rnumel / RBLOCK values in turn (2**19 in a column sum of 2**24 rows with the
    GPU's 32-row tiles, not split under dynamic shapes), and a plain float32 lane's error
    grows with that count (``(3, 2**20, 2).sum((0, 1))``: 58x eager's)."""
    return r.reduction_type == "sum" and _tile_dtype(r) == "tl.float32"


def _tile_dtype(r: ir.Reduce) -> str:
    if r.reduction_type in ("any", "all") or _value_dtype(r) == torch.bool:
        return "tl.int32"
    return compute_dtype(_value_dtype(r))


_UNARY_LIBDEVICE = {
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "lgamma",
    "floor", "ceil", "trunc",
}
_BINARY_INFIX = {"add": "+", "sub": "-", "mul": "*", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
                 "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
                 "ge": ">="}
_BINARY_LIBDEVICE = {"atan2", "hypot", "copysign", "fmod", "pow"}


# a string literal, or a name that is not an attribute (``tl.arange`` keeps its name
# when a buffer is called ``arange``)
_TOKEN = re.compile(r"'[^'\\\n]*'|\"[^\"\\\n]*\"|(?<![.\w])[A-Za-z_]\w*")


def _rename(src: str, names: dict[str, str]) -> str:
    """``src`` with each identifier in ``names`` renamed, and identifiers ``<name>_<suffix>``
    (a reduction's accumulators ``acc_buf3_mean``) to ``<new name>_<suffix>``; string
    literals are left alone."""
    prefixes = sorted(names, key=len, reverse=True)

    def sub(m):
        tok = m.group(0)
        if tok[0] in "'\"":
            return tok
        new = names.get(tok)
        if new is not None:
            return new
        for p in prefixes:
            if tok.startswith(p + "_") and tok[len(p) + 1:] in _ACC_SUFFIXES:
                return names[p] + tok[len(p):]
        return tok

    return _TOKEN.sub(sub, src)


_ACC_SUFFIXES = frozenset({"acc", "idx", "mean", "m2", "weight", "tmean", "tm2", "tweight", "shift"})

# A looped Welford's float32 lane states restart from zero every WELFORD_CHUNK iterations
# of the reduction loop, merged first into float64 lane states (Chan et al.): a float32
# lane state updated by each of its points in turn loses accuracy with their count
# (rnumel / RBLOCK: 8192 in a 2**24 row, 2**19 in a column of 2**24 with 32-row tiles;
# var over rows with 4096 points a lane was 130x eager's error).  The float32 states
# are of the values minus the lane's first value (``_shift``), so that the running mean
# of values far from zero (rand() + 100) does not round at their magnitude.
WELFORD_CHUNK = 32


class _Scope:
    """CSE scope: IR value (with its mask) → variable; lookups fall back to the parent."""

    def __init__(self, parent=None):
        self.parent = parent
        self.vars: dict = {}

    def get(self, key):
        s = self
        while s is not None:
            if key in s.vars:
                return s.vars[key]
            s = s.parent
        return None


class _Context:
    """Where values are being emitted: block shape, mask, CSE scope, output lines."""

    def __init__(self, shape: str, mask: str, zero: str, scope: _Scope, lines: list, indent: str):
        self.shape, self.mask, self.zero, self.scope, self.lines, self.indent = shape, mask, zero, scope, lines, indent

    def with_mask(self, mask: str) -> "_Context":
        return _Context(self.shape, f"({self.mask} & {mask})", self.zero, self.scope, self.lines, self.indent)


class KernelRenderer:
    """Renders one fused kernel; ``render()`` returns the source of its jit functions and launcher."""

    def __init__(self, kernel: ir.FusedKernel):
        self.k = kernel
        self.buffers = {b.name: b for b in kernel.buffers}
        self.counter = 0
        self.reduced: dict[str, str] = {}  # Reduce name -> variable
        self.checks = False  # whether some indirect index is range-checked
        exprs = index_expressions(kernel.loops)
        self.xvars, self.xranges, xsubs = merge(kernel.index_vars, kernel.ranges, exprs, "x")
        exprs = [e.xreplace(xsubs) for e in exprs]
        self.rvars, self.rranges, rsubs = merge(kernel.reduction_vars, kernel.reduction_ranges, exprs, "r")
        self.subs = {**xsubs, **rsubs}  # original index variables -> merged ones

    def outer_reduction(self) -> bool:
        """Whether some load of a reduction loop is contiguous in ``x`` but strided in ``r``."""
        if not self.rvars or not self.xvars:
            return False
        x_in, r_in = self.xvars[-1], self.rvars[-1]
        for e in index_expressions([loop for loop in self.k.loops if loop.reduction]):
            e = sympy.expand(self.sub(e))
            if e.coeff(x_in) == 1 and r_in in e.free_symbols and e.coeff(r_in) != 1:
                return True
        return False

    def sub(self, expr) -> sympy.Expr:
        """An index expression in the kernel's (merged) index variables."""
        return sympy.sympify(expr).xreplace(self.subs)

    # ------------------------------------------------------------------ values
    def tmp(self) -> str:
        self.counter += 1
        return f"tmp{self.counter}"

    def emit(self, ctx: _Context, expr: str) -> str:
        name = self.tmp()
        ctx.lines.append(f"{ctx.indent}{name} = {expr}")
        return name

    def value(self, v, ctx: _Context) -> str:
        key = (v, ctx.mask)
        hit = ctx.scope.get(key)
        if hit is not None:
            return hit
        out = self._value(v, ctx)
        ctx.scope.vars[key] = out
        return out

    def index(self, expr, indirect, ctx: _Context) -> str:
        subs = {}
        for ind in indirect:
            key = ("indirect", ind.value, ind.size, ind.check, ind.wrap, ctx.mask)
            var = ctx.scope.get(key)  # the same index value again: wrapped and checked once
            if var is not None:
                subs[ind.symbol] = sympy.Symbol(var, integer=True, nonnegative=True)
                continue
            raw = self.value(ind.value, ctx)
            size = texpr(ind.size)
            var = self.emit(ctx, f"tl.where({raw} < 0, {raw} + {size}, {raw})") if ind.wrap else raw
            if ind.check:  # out of range: device_assert (a raise in the interpreter), then 0
                self.checks = True
                msg = f"index out of bounds in {ind.op} (dim {ind.dim})"
                var = self.emit(ctx, f"kiln_check_index({raw}, {var}, {size}, {ctx.mask}, {msg!r}, {ind.op!r}, {ind.dim})")
            ctx.scope.vars[key] = var
            subs[ind.symbol] = sympy.Symbol(var, integer=True, nonnegative=True)  # after wrapping
        expr = self.sub(expr)
        if subs:
            expr = expr.xreplace(subs)
        return f"({texpr(expr)}) + {ctx.zero}"

    def _value(self, v, ctx: _Context) -> str:
        if isinstance(v, ir.Load):
            buf = self.buffers[v.buffer]
            idx = self.index(v.index, v.indirect, ctx)
            load = f"tl.load({v.buffer} + {idx}, {ctx.mask}, other=0)"
            if buf.dtype in (torch.float16, torch.bfloat16):
                load += ".to(tl.float32)"
            return self.emit(ctx, load)
        # a scalar tile of the context's rank: tl.broadcast_to refuses a rank-1 value in a
        # 2-d (reduction) tile, e.g. torch.ones(n).sum()
        unit = "[1, 1]" if "," in ctx.shape else "[1]"
        if isinstance(v, ir.Constant):
            if v.dtype.is_floating_point and float(v.value) == 0 and math.copysign(1.0, float(v.value)) < 0:
                # -0.0 from its bit pattern: compiled Triton (3.6, H100) turns a float
                # constant equal to 0 into +0.0, and its unary minus into ``0 - x`` (so
                # ``-tl.full(.., 0.0, ..)`` is +0.0 too); the interpreter kept the sign
                neg_zero = f"tl.full({unit}, -2147483648, tl.int32).to(tl.float32, bitcast=True)"
                return self.emit(ctx, f"{neg_zero}.to({compute_dtype(v.dtype)})")
            return self.emit(ctx, f"tl.full({unit}, {_literal(v.value, v.dtype)}, {compute_dtype(v.dtype)})")
        if isinstance(v, ir.IndexValue):
            if v.dtype == torch.bool:
                return self.emit(ctx, f"(tl.full({unit}, 0, tl.int64) + ({texpr(self.sub(v.expr))})) != 0")
            return self.emit(ctx, f"tl.full({unit}, 0, {compute_dtype(v.dtype)}) + ({texpr(self.sub(v.expr))})")
        if isinstance(v, ir.ReductionValue):
            return self.reduced[v.name]
        if isinstance(v, ir.Masked):
            mask = self.value(v.mask, ctx)
            body = self.value(v.body, ctx.with_mask(mask))
            other = v.other if isinstance(v.other, ir.Constant) else ir.Constant(v.other, v.dtype)
            return self.emit(ctx, f"tl.where({mask}, {body}, {self.value(other, ctx)})")
        if isinstance(v, ir.Op):
            args = [self.value(a, ctx) for a in v.args]
            return self.emit(ctx, self.op(v, args))
        raise NotImplementedError(f"Triton kernels: unknown IR value {v!r}")

    def op(self, v: ir.Op, a: list[str]) -> str:
        name, dt = v.name, v.dtype
        cdt = compute_dtype(dt)
        is_float = dt.is_floating_point
        if name == "to_dtype":  # float -> int truncates toward zero, as eager
            if dt == torch.bool:
                return f"({a[0]} != 0)"
            if dt in (torch.float16, torch.bfloat16):
                # through float32, as eager's conversions (c10's Half/BFloat16 are made from a
                # float); Triton 3.9's interpreter also bitcast an integer to bfloat16 (-8 gave NaN)
                return f"{a[0]}.to(tl.float32).to({tl_dtype(dt)}).to(tl.float32)"
            return f"{a[0]}.to({cdt})"
        if name == "add" and dt == torch.bool:  # int1 ``+`` wraps (True + True gave False)
            return f"({a[0]} | {a[1]})"
        if name in ("lshift", "rshift"):  # as ATen's: a count < 0 or >= the width gives 0 / the sign
            width = torch.iinfo(dt).bits
            out = f"(({a[1]} < 0) | ({a[1]} >= {width}))" if dt.is_signed else f"({a[1]} >= {width})"
            count = f"tl.where({out}, 0, {a[1]})"
            if name == "lshift":
                return f"tl.where({out}, 0, {a[0]} << {count})"
            edge = f"({a[0]} >> {width - 1})" if dt.is_signed else "0"
            return f"tl.where({out}, {edge}, {a[0]} >> {count})"
        if name in _BINARY_INFIX:
            return f"({a[0]} {_BINARY_INFIX[name]} {a[1]})"
        if name in _UNARY_LIBDEVICE:
            return f"libdevice.{name}({a[0]})"
        if name in ("fmod", "remainder", "floordiv", "truncdiv") and dt == torch.uint8:
            # unsigned: C's truncating ``//`` and ``%`` are ATen's (the signed helpers compare
            # with -1, which Triton refuses for an unsigned tensor: the graph fell back to eager)
            return f"({a[0]} {'%' if name in ('fmod', 'remainder') else '//'} {a[1]})"
        if name in ("fmod", "pow") and not is_float and dt != torch.bool:
            return f"kiln_ivalue_{name}({a[0]}, {a[1]})"
        if name in _BINARY_LIBDEVICE:
            if not is_float:
                return f"libdevice.{name}({a[0]}.to(tl.float64), {a[1]}.to(tl.float64)).to({cdt})"
            return f"libdevice.{name}({a[0]}, {a[1]})"
        simple = {
            # floats: ``x * -1.0``, exact, and -0.0 for +0.0 (compiled Triton's ``-x`` is ``0 - x``)
            "neg": f"({a[0]} * -1.0)" if is_float else f"(-{a[0]})" if dt != torch.bool else f"{a[0]}",
            "abs": f"tl.abs({a[0]})",
            "sigmoid": f"(1.0 / (1.0 + tl.exp(-{a[0]})))",
            "relu": f"tl.where({a[0]} < 0, 0, {a[0]})",
            "round": f"libdevice.nearbyint({a[0]})",
            "sign": f"(({a[0]} > 0).to({cdt}) - ({a[0]} < 0).to({cdt}))",
            "signbit": f"(({a[0]} < 0) | (({a[0]} == 0) & ((1.0 / {a[0]}) < 0)))",
            "reciprocal": f"(1.0 / {a[0]})",
            "isnan": f"({a[0]} != {a[0]})",
            "isinf": f"(tl.abs({a[0]}) == float(\"inf\"))",
            "isfinite": f"(({a[0]} == {a[0]}) & (tl.abs({a[0]}) != float(\"inf\")))",
            "logical_not": f"({a[0]} == 0)",
            "bitwise_not": f"(~{a[0]})" if dt != torch.bool else f"({a[0]} == 0)",
            "logical_and": f"(({a[0]} != 0) & ({a[1]} != 0))" if len(a) > 1 else "",
            "logical_or": f"(({a[0]} != 0) | ({a[1]} != 0))" if len(a) > 1 else "",
            "logical_xor": f"(({a[0]} != 0) != ({a[1]} != 0))" if len(a) > 1 else "",
            "maximum": f"kiln_maximum({a[0]}, {a[1]})" if len(a) > 1 else "",
            "minimum": f"kiln_minimum({a[0]}, {a[1]})" if len(a) > 1 else "",
            "where": f"tl.where({a[0]}, {a[1]}, {a[2]})" if len(a) > 2 else "",
        }
        if name in simple:
            return simple[name]
        if name == "truediv":
            return f"({a[0]} / {a[1]})" if is_float else f"({a[0]}.to(tl.float64) / {a[1]}).to({cdt})"
        if name == "floordiv":
            return f"libdevice.floor({a[0]} / {a[1]})" if is_float else f"kiln_ivalue_floordiv({a[0]}, {a[1]})"
        if name == "truncdiv":
            return f"libdevice.trunc({a[0]} / {a[1]})" if is_float else f"kiln_ivalue_truncdiv({a[0]}, {a[1]})"
        if name == "remainder":
            if is_float:
                return f"kiln_fremainder({a[0]}, {a[1]})"
            return f"kiln_ivalue_mod({a[0]}, {a[1]})"
        raise NotImplementedError(f"Triton kernels: no rendering of op {name!r}")

    # ------------------------------------------------------------------ statements
    def store(self, s: ir.Store, ctx: _Context) -> None:
        buf = self.buffers[s.buffer]
        val = self.value(s.value, ctx)
        idx = self.index(s.index, s.indirect, ctx)
        val = f"tl.broadcast_to({val}, {ctx.shape}).to({tl_dtype(buf.dtype)})"
        if s.mode == "atomic_add":
            # ``tl.where`` makes the value a block of its own: Triton 3.6's interpreter hands
            # ``atomic_rmw`` the raw buffer of a broadcast (stride-0) numpy view and reads past
            # its one element (a constant added by index_add/index_put lost its adds and wrote
            # garbage); masked lanes add nothing either way
            val = f"tl.where({ctx.mask}, {val}, 0)"
            ctx.lines.append(f"{ctx.indent}tl.atomic_add({s.buffer} + {idx}, {val}, {ctx.mask}, sem=\"relaxed\")")
        elif s.mode is None:
            ctx.lines.append(f"{ctx.indent}tl.store({s.buffer} + {idx}, {val}, {ctx.mask})")
        else:
            raise NotImplementedError(f"Triton kernels: store mode {s.mode!r}")

    def reduce_value(self, r: ir.Reduce, ctx: _Context) -> tuple[str, str]:
        """The masked tile to accumulate (value with the identity where masked) and its index."""
        val = self.value(r.value, ctx)
        if r.reduction_type in ("any", "all"):
            val = f"({val} != 0).to(tl.int32)"
        else:
            val = f"{val}.to({_tile_dtype(r)})"
        masked = self.emit(ctx, f"tl.where({ctx.mask}, tl.broadcast_to({val}, {ctx.shape}), "
                                f"{_identity(r.reduction_type, _value_dtype(r))})")
        index = None
        if r.reduction_type in ("argmax", "argmin"):
            index = self.emit(ctx, f"(({texpr(self.sub(r.index))}) + {ctx.zero}).to(tl.int64)")
        return masked, index

    def finish_reduce(self, r: ir.Reduce, tile: str, index: str | None, ctx: _Context) -> str:
        """Reduce a tile along the reduction axis to a ``[XBLOCK, 1]`` value.

        Only Triton's built-in ``tl.sum``/``tl.max``/``tl.min`` reduce across lanes (fast
        on GPUs and vectorized in the interpreter); NaN propagation and first-index
        argmax/argmin are built from them.
        """
        t = r.reduction_type
        if t == "sum":
            out = f"tl.sum({tile}, 1)[:, None]"
        elif t == "prod":
            out = f"tl.reduce({tile}, 1, kiln_prod)[:, None]"
        elif t == "any":
            out = f"(tl.max({tile}, 1)[:, None] != 0)"
        elif t == "all":
            out = f"(tl.min({tile}, 1)[:, None] != 0)"
        elif t in ("max", "min", "argmax", "argmin"):
            out = self._extreme(t, tile, _value_dtype(r), ctx)
            if t in ("argmax", "argmin"):
                match = f"({tile} == {out})"
                if _value_dtype(r).is_floating_point:
                    match = f"({match} | (({tile} != {tile}) & ({out} != {out})))"
                out = f"tl.min(tl.where({match}, {index}, {2 ** 62}), 1)[:, None].to(tl.int64)"
        else:
            raise NotImplementedError(f"Triton kernels: reduction {t!r}")
        if r.dtype == torch.bool and t not in ("any", "all"):
            out = f"({out} != 0)"
        return self.emit(ctx, out)

    def _extreme(self, t: str, tile: str, dtype: torch.dtype, ctx: _Context) -> str:
        """Per-row max/min of a tile; NaN if the row has a NaN (as eager)."""
        fn = "tl.max" if t in ("max", "argmax") else "tl.min"
        if not dtype.is_floating_point:
            return self.emit(ctx, f"{fn}({tile}, 1)[:, None]")
        has_nan = self.emit(ctx, f"tl.max(({tile} != {tile}).to(tl.int32), 1)[:, None]")
        clean = f"tl.where({tile} != {tile}, {_identity(t, dtype)}, {tile})"
        return self.emit(ctx, f"tl.where({has_nan} != 0, float(\"nan\"), {fn}({clean}, 1)[:, None])")

    # ------------------------------------------------------------------ kernels
    def _header(self, name: str, reduction: bool) -> list[str]:
        params = [b.name for b in self.k.buffers] + [str(s) for s in self.k.size_args] + ["xnumel"]
        if reduction:
            params.append("rnumel")
        params += ["XBLOCK: tl.constexpr"] + (["RBLOCK: tl.constexpr"] if reduction else []) + ["IDX64: tl.constexpr"]
        dont_specialize = ", ".join(repr(str(a)) for a in self.k.size_args)
        lines = [f"@triton.jit(do_not_specialize=[{dont_specialize}])" if self.k.size_args else "@triton.jit",
                 f"def {name}({', '.join(params)}):", "    xoffset = tl.program_id(0) * XBLOCK"]
        if reduction:
            lines += ["    rbase = tl.arange(0, RBLOCK)[None, :]",
                      "    xzero = tl.zeros([XBLOCK, 1], tl.int32)",
                      "    rzero = tl.zeros([XBLOCK, RBLOCK], tl.int32)",
                      "    if IDX64:", "        xoffset = xoffset.to(tl.int64)", "        rbase = rbase.to(tl.int64)",
                      "        xzero = tl.zeros([XBLOCK, 1], tl.int64)",
                      "        rzero = tl.zeros([XBLOCK, RBLOCK], tl.int64)",
                      "    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]"]
        else:
            lines += ["    xzero = tl.zeros([XBLOCK], tl.int32)",
                      "    if IDX64:", "        xoffset = xoffset.to(tl.int64)",
                      "        xzero = tl.zeros([XBLOCK], tl.int64)",
                      "    xindex = xoffset + tl.arange(0, XBLOCK)"]
        lines.append("    xmask = xindex < xnumel")
        for var, e in zip(self.xvars, ir.split_flat_index(sympy.Symbol("xindex", integer=True, nonnegative=True), self.xranges)):
            lines.append(f"    {var} = {texpr(e)}")
        return lines

    def _rvars(self, indent: str) -> list[str]:
        flat = sympy.Symbol("rindex", integer=True, nonnegative=True)
        return [f"{indent}{var} = {texpr(e)}" for var, e in zip(self.rvars, ir.split_flat_index(flat, self.rranges))]

    def render_pointwise(self) -> str:
        lines = self._header(self.k.name, reduction=False)
        ctx = _Context("[XBLOCK]", "xmask", "xzero", _Scope(), lines, "    ")
        for loop in self.k.loops:
            for s in loop.body:
                if isinstance(s, ir.Reduce):
                    self.reduce_one_point(s, ctx)
                else:
                    self.store(s, ctx)
        return "\n".join(lines)

    def reduce_one_point(self, r: ir.Reduce, ctx: _Context) -> None:
        """A Reduce in a kernel without reduction dims (all reduced dims have size 1)."""
        val, t = self.value(r.value, ctx), r.reduction_type
        if t == "welford":
            self.reduced[ir.welford_mean(r.name)] = self.emit(ctx, f"{val}.to({_tile_dtype(r)})")
            self.reduced[ir.welford_m2(r.name)] = self.emit(ctx, f"tl.zeros({ctx.shape}, {_tile_dtype(r)})")
        elif t in ("argmax", "argmin"):
            self.reduced[r.name] = self.emit(ctx, f"tl.zeros({ctx.shape}, tl.int64)")
        elif t in ("any", "all") or r.dtype == torch.bool:
            self.reduced[r.name] = self.emit(ctx, f"({val} != 0)")
        else:
            self.reduced[r.name] = self.emit(ctx, f"{val}.to({compute_dtype(r.dtype)})")

    def render_persistent(self) -> str:
        self.reduced.clear()
        lines = self._header(f"{self.k.name}_persistent", reduction=True)
        lines += ["    rindex = rbase", "    rmask = rindex < rnumel", "    xrmask = xmask & rmask"]
        lines += self._rvars("    ")
        outer = _Context("[XBLOCK, 1]", "xmask", "xzero", _Scope(), lines, "    ")
        inner = _Context("[XBLOCK, RBLOCK]", "xrmask", "rzero", _Scope(outer.scope), lines, "    ")
        for loop in self.k.loops:
            ctx = inner if loop.reduction else outer
            for s in loop.body:
                if isinstance(s, ir.Reduce) and s.reduction_type == "welford":
                    self.welford_persistent(s, ctx)
                elif isinstance(s, ir.Reduce):
                    tile, index = self.reduce_value(s, ctx)
                    self.reduced[s.name] = self.finish_reduce(s, tile, index, ctx)
                else:
                    self.store(s, ctx)
        return "\n".join(lines)

    def render_looped(self) -> str:
        self.reduced.clear()
        lines = self._header(f"{self.k.name}_looped", reduction=True)
        outer = _Context("[XBLOCK, 1]", "xmask", "xzero", _Scope(), lines, "    ")
        for loop in self.k.loops:
            if not loop.reduction:
                for s in loop.body:
                    self.store(s, outer)
                continue
            reduces = [s for s in loop.body if isinstance(s, ir.Reduce)]
            for r in reduces:  # tile accumulators
                if r.reduction_type == "welford":
                    lines += [f"    {r.name}_{part} = tl.zeros([XBLOCK, RBLOCK], {_tile_dtype(r)})"
                              for part in ("mean", "m2", "weight")]
                    lines += [f"    {r.name}_{part} = tl.zeros([XBLOCK, RBLOCK], tl.float64)"
                              for part in ("tmean", "tm2", "tweight")]
                    lines.append(f"    {r.name}_shift = tl.zeros([XBLOCK, RBLOCK], {_tile_dtype(r)})")
                    continue
                init = _identity(r.reduction_type, _value_dtype(r))
                lines.append(f"    {r.name}_acc = tl.full([XBLOCK, RBLOCK], {init}, {_tile_dtype(r)})")
                if _compensated(r):
                    lines.append(f"    {r.name}_comp = tl.zeros([XBLOCK, RBLOCK], tl.float32)")
                if r.reduction_type in ("argmax", "argmin"):
                    lines.append(f"    {r.name}_idx = tl.full([XBLOCK, RBLOCK], {2 ** 62}, tl.int64)")
            lines += ["    for roffset in range(0, rnumel, RBLOCK):", "        rindex = roffset + rbase",
                      "        rmask = rindex < rnumel", "        xrmask = xmask & rmask"]
            lines += self._rvars("        ")
            inner = _Context("[XBLOCK, RBLOCK]", "xrmask", "rzero", _Scope(outer.scope), lines, "        ")
            for s in loop.body:
                if isinstance(s, ir.Reduce) and s.reduction_type == "welford":
                    self.welford_update(s, inner)
                elif isinstance(s, ir.Reduce):
                    tile, index = self.reduce_value(s, inner)
                    self._accumulate(s, tile, index, inner)
                else:
                    self.store(s, inner)
            welfords = [r for r in reduces if r.reduction_type == "welford"]
            if welfords:
                lines.append(f"        if (roffset // RBLOCK) % {WELFORD_CHUNK} == {WELFORD_CHUNK - 1}:")
                chunk_end = _Context(inner.shape, inner.mask, inner.zero, _Scope(), lines, "            ")
                for r in welfords:
                    self.welford_merge(r, chunk_end)
            for r in welfords:
                self.welford_merge(r, outer, restart=False)
            for r in reduces:
                if r.reduction_type == "welford":
                    self.welford_finish(r, outer)
                    continue
                index = f"{r.name}_idx" if r.reduction_type in ("argmax", "argmin") else None
                tile = f"({r.name}_acc - {r.name}_comp)" if _compensated(r) else f"{r.name}_acc"
                self.reduced[r.name] = self.finish_reduce(r, tile, index, outer)
        return "\n".join(lines)

    # ------------------------------------------------------------------ welford
    def welford_persistent(self, r: ir.Reduce, ctx: _Context) -> None:
        """Mean and M2 of a whole-row tile in registers: the mean first, then the sum of
        squared deviations from it (two passes over registers, as TorchInductor does)."""
        t = _tile_dtype(r)
        val = self.emit(ctx, f"tl.broadcast_to({self.value(r.value, ctx)}.to({t}), {ctx.shape})")
        count = self.emit(ctx, f"tl.sum(tl.where(rmask, 1.0, 0.0).to({t}), 1)[:, None]")  # [1, 1]: rnumel
        total = self.emit(ctx, f"tl.sum(tl.where({ctx.mask}, {val}, 0.0), 1)[:, None]")
        mean = self.emit(ctx, f"{total} / tl.maximum({count}, 1.0)")
        dev = self.emit(ctx, f"tl.where({ctx.mask}, {val} - {mean}, 0.0)")
        self.reduced[ir.welford_mean(r.name)] = mean
        self.reduced[ir.welford_m2(r.name)] = self.emit(ctx, f"tl.sum({dev} * {dev}, 1)[:, None]")

    def welford_update(self, r: ir.Reduce, ctx: _Context) -> None:
        """One Welford step per tile element (looped reductions): each element of the
        ``[XBLOCK, RBLOCK]`` accumulators ``_mean``/``_m2``/``_weight`` is its own stream,
        of the values minus the lane's first one (``_shift``, taken in the first tile)."""
        t, a, ind = _tile_dtype(r), r.name, ctx.indent
        val = self.emit(ctx, f"tl.broadcast_to({self.value(r.value, ctx)}.to({t}), {ctx.shape})")
        ctx.lines += [f"{ind}if roffset == 0:", f"{ind}    {a}_shift = tl.where({ctx.mask}, {val}, 0.0)"]
        val = self.emit(ctx, f"{val} - {a}_shift")
        weight = self.emit(ctx, f"tl.where({ctx.mask}, {a}_weight + 1.0, {a}_weight)")
        delta = self.emit(ctx, f"{val} - {a}_mean")
        ctx.lines.append(f"{ind}{a}_mean = tl.where({ctx.mask}, {a}_mean + {delta} / tl.maximum({weight}, 1.0), {a}_mean)")
        ctx.lines.append(f"{ind}{a}_m2 = tl.where({ctx.mask}, {a}_m2 + {delta} * ({val} - {a}_mean), {a}_m2)")
        ctx.lines.append(f"{ind}{a}_weight = {weight}")

    def welford_merge(self, r: ir.Reduce, ctx: _Context, restart: bool = True) -> None:
        """Merge each lane's float32 chunk state (``_mean``/``_m2``/``_weight``, shifted by
        ``_shift``) into its float64 state (``_tmean``/``_tm2``/``_tweight``; Chan et al.'s
        pairwise formula), then (``restart``) zero the chunk; a lane that saw no point
        keeps its state."""
        a, t, ind = r.name, _tile_dtype(r), ctx.indent
        weight, delta, share = self.tmp(), self.tmp(), self.tmp()
        ctx.lines += [f"{ind}{weight} = {a}_tweight + {a}_weight.to(tl.float64)",
                      f"{ind}{delta} = ({a}_shift.to(tl.float64) + {a}_mean.to(tl.float64)) - {a}_tmean",
                      f"{ind}{share} = {a}_weight.to(tl.float64) / tl.maximum({weight}, 1.0)",
                      f"{ind}{a}_tmean = {a}_tmean + {delta} * {share}",
                      f"{ind}{a}_tm2 = {a}_tm2 + {a}_m2.to(tl.float64) + {delta} * {delta} * {a}_tweight * {share}",
                      f"{ind}{a}_tweight = {weight}"]
        if restart:
            ctx.lines += [f"{ind}{a}_{part} = tl.zeros([XBLOCK, RBLOCK], {t})" for part in ("mean", "m2", "weight")]

    def welford_finish(self, r: ir.Reduce, ctx: _Context) -> None:
        """Merge the tile's float64 Welford lane states per row: mean = weighted mean of
        the lane means; M2 = sum of lane M2s + sum of weight * (lane mean - mean)**2 (Chan
        et al.'s formula for many parts; only ``tl.sum`` crosses lanes)."""
        a, t = r.name, _tile_dtype(r)
        total = self.emit(ctx, f"tl.sum({a}_tweight, 1)[:, None]")
        mean = self.emit(ctx, f"tl.sum({a}_tweight * {a}_tmean, 1)[:, None] / tl.maximum({total}, 1.0)")
        dev = self.emit(ctx, f"{a}_tmean - {mean}")
        self.reduced[ir.welford_mean(a)] = self.emit(ctx, f"{mean}.to({t})")
        self.reduced[ir.welford_m2(a)] = self.emit(ctx, f"tl.sum({a}_tm2 + {a}_tweight * {dev} * {dev}, 1)[:, None].to({t})")

    def _accumulate(self, r: ir.Reduce, tile: str, index: str | None, ctx: _Context) -> None:
        acc, t, ind = f"{r.name}_acc", r.reduction_type, ctx.indent
        if _compensated(r):  # Kahan: comp holds what the last add lost (0 once not finite)
            comp = f"{r.name}_comp"
            y, total, lost = self.emit(ctx, f"{tile} - {comp}"), self.tmp(), self.tmp()
            ctx.lines += [f"{ind}{total} = {acc} + {y}", f"{ind}{lost} = ({total} - {acc}) - {y}",
                          f"{ind}{comp} = tl.where(tl.abs({lost}) < float('inf'), {lost}, 0.0)",
                          f"{ind}{acc} = {total}"]
        elif t == "sum":
            ctx.lines.append(f"{ind}{acc} = {acc} + {tile}")
        elif t == "prod":
            ctx.lines.append(f"{ind}{acc} = {acc} * {tile}")
        elif t in ("max", "min"):
            ctx.lines.append(f"{ind}{acc} = kiln_{t}imum({acc}, {tile})")
        elif t == "any":
            ctx.lines.append(f"{ind}{acc} = tl.maximum({acc}, {tile})")
        elif t == "all":
            ctx.lines.append(f"{ind}{acc} = tl.minimum({acc}, {tile})")
        elif t in ("argmax", "argmin"):
            ctx.lines.append(f"{ind}{acc}, {r.name}_idx = kiln_{t}({acc}, {r.name}_idx, {tile}, {index})")
        else:
            raise NotImplementedError(f"Triton kernels: reduction {t!r}")

    def render_launcher(self, interpret: bool) -> str:
        """``<name>_launch(buffers..., sizes..., _cu=None)``: sizes → numels, launch config
        and grid by integer arithmetic, then the launch.  On a GPU it goes through a
        :class:`runtime.Launcher` bound once per specialization; ``_cu`` is the
        ``(device, stream)`` pair the wrapper reads once per call.  Under the
        interpreter it calls the jit function as ``fn[grid](...)``."""
        k = self.k
        names = [b.name for b in k.buffers]
        sizes = [str(s) for s in k.size_args]
        lines = [f"def {k.name}_launch({', '.join(names + sizes + ([] if interpret else ['_cu=None']))}):"]
        # a SymFloat argument is always a Python float (Triton types it fp32); not a size
        lines += [f"    {s} = float({s})" for s in k.size_args if ir.is_float_symbol(s)]
        int_sizes = [str(s) for s in k.size_args if not ir.is_float_symbol(s)]
        if k.device.type == "cuda":
            # A graph on CUDA may read CPU tensors (eager allows 0-dim CPU operands);
            # a GPU kernel cannot, so copy them over.
            for b in k.buffers:
                if not b.stored:
                    lines.append(f"    if {b.name}.device.type == 'cpu':")
                    lines.append(f"        {b.name} = {b.name}.to({str(k.device)!r})")
        lines.append(f"    xnumel = {pexpr(k.numel)}")
        static = self.static_config(interpret)
        if static is not None:  # static sizes: the config, grid and key parts are literals
            if static["xnumel"] <= 0:
                return "\n".join(lines[:1] + ["    return"])
            lines = lines[:-1] + [f"    {name} = {value!r}" for name, value in static.items()]
        if k.reduction_ranges:
            if static is None:
                lines += [f"    rnumel = {pexpr(k.reduction_numel)}",
                          "    if xnumel <= 0:", "        return",
                          "    idx64 = " + ("False" if self.static_int32() else
                                           f"_rt.needs_int64(xnumel * max(rnumel, 1), {', '.join(names)})"),
                          f"    persistent, XBLOCK, RBLOCK, warps = _rt.reduction_config(xnumel, rnumel, INTERPRET, {self.outer_reduction()})",
                          "    grid = (xnumel + XBLOCK - 1) // XBLOCK"]
            specialized = ["xnumel", "rnumel"]
            args = names + sizes + specialized + ["XBLOCK", "RBLOCK", "idx64"]
            fns = (f"{k.name}_persistent", f"{k.name}_looped")
        else:
            if static is None:
                lines += ["    if xnumel <= 0:", "        return",
                          "    idx64 = " + ("False" if self.static_int32() else f"_rt.needs_int64(xnumel, {', '.join(names)})"),
                          "    XBLOCK, warps = _rt.pointwise_config(xnumel, INTERPRET)",
                          "    grid = (xnumel + XBLOCK - 1) // XBLOCK"]
            specialized = ["xnumel"]
            args = names + sizes + specialized + ["XBLOCK", "idx64"]
            fns = (k.name,)
        options = "num_warps=warps" + (", debug=True, sanitize_overflow=False" if self.checks else "")
        pick = f"{fns[0]} if persistent else {fns[1]}" if len(fns) == 2 else fns[0]
        if interpret:
            lines.append(f"    ({pick})[(grid,)]({', '.join(args)}, {options})")
        else:
            launcher = f"{fns[0]}_L if persistent else {fns[1]}_L" if len(fns) == 2 else f"{fns[0]}_L"
            if static is not None:  # the config is fixed: its parts of the key are literals
                from .runtime import int_spec

                launcher = f"{fns[0] if static.get('persistent', True) else fns[1]}_L"
                # identical kernels share one jit function and so one Launcher (render's
                # aliases): its bindings must still tell their configs and sizes apart
                key = (["_cu[0]"] + [repr(static[n]) for n in ("warps", "XBLOCK", "RBLOCK", "idx64") if n in static]
                       + [f"{n}.data_ptr() % 16 == 0" for n in names] + [repr(int_spec(static[v])) for v in specialized])
            else:
                key = (["_cu[0]", "warps", "XBLOCK"] + (["RBLOCK", "persistent"] if len(fns) == 2 else []) + ["idx64"]
                       + [f"{n}.data_ptr() % 16 == 0" for n in names] + [f"_rt.int_spec({v})" for v in specialized])
            key += [f"({' | '.join(int_sizes)}) > 0x7fffffff"] if int_sizes else []
            lines += ["    if _cu is None:", "        _cu = _rt.cuda_context()",
                      f"    L = {launcher}",
                      f"    key = ({', '.join(key)})",
                      "    launch = L.bound.get(key)",
                      "    if launch is None:",
                      f"        launch = L.bind(key, ({', '.join(args)},), dict({options}))",
                      f"    launch(grid, _cu[1], {', '.join(args)})"]
        if self.checks:  # device_assert needs debug; no int32 overflow asserts
            lines = lines[:1] + ["    try:"] + ["    " + line for line in lines[1:]] + [
                "    except Exception as e:", "        _rt.raise_index_error(e)"]
        return "\n".join(lines)

    def static_config(self, interpret: bool) -> dict | None:
        """The launcher's variables when every size is static: ``xnumel`` (``rnumel``),
        the config, ``idx64`` (when provably int32) and ``grid``; else None."""
        k = self.k
        if interpret or k.size_args or not (sympy.sympify(k.numel).is_Integer and sympy.sympify(k.reduction_numel).is_Integer):
            return None
        if not self.static_int32():
            return None
        from .runtime import pointwise_config, reduction_config

        xnumel, rnumel = int(k.numel), int(k.reduction_numel)
        if xnumel <= 0:
            return {"xnumel": xnumel}
        if k.reduction_ranges:
            persistent, xblock, rblock, warps = reduction_config(xnumel, rnumel, False, self.outer_reduction())
            out = {"xnumel": xnumel, "rnumel": rnumel, "persistent": persistent, "XBLOCK": xblock,
                   "RBLOCK": rblock, "warps": warps}
        else:
            xblock, warps = pointwise_config(xnumel, False)
            out = {"xnumel": xnumel, "XBLOCK": xblock, "warps": warps}
        return {**out, "idx64": False, "grid": (xnumel + xblock - 1) // xblock}

    def static_int32(self) -> bool:
        """Whether every index and index value of the kernel provably fits int32: static
        sizes and affine indices in the loop variables (no indirect or size symbols).
        The launcher then passes ``IDX64=False`` without looking at storages."""
        k = self.k
        ranges = dict(zip(k.index_vars, k.ranges))
        ranges.update(zip(k.reduction_vars, k.reduction_ranges))
        if not all(sympy.sympify(r).is_Integer for r in ranges.values()):
            return False
        if int(sympy.sympify(k.numel)) * max(int(sympy.sympify(k.reduction_numel)), 1) > 2**31 - 1:
            return False
        for e in index_expressions(k.loops):
            e = sympy.expand(sympy.sympify(e))
            if e.free_symbols - set(ranges):
                return False
            bound = 0
            for term in sympy.Add.make_args(e):
                coeff, rest = term.as_coeff_Mul()
                if rest == 1:
                    bound += abs(coeff)
                elif rest in ranges:
                    bound += abs(coeff) * max(int(ranges[rest]) - 1, 0)
                else:
                    return False
            if bound > 2**31 - 1:
                return False
        return True

    def precompile_jobs(self, hints: dict) -> list[tuple[str, tuple, dict]]:
        """``(jit function name, warmup args, options)`` of the specialization the launcher
        will pick for sizes ``hints`` (the kernel's size hints, exact for static shapes),
        with tensors given as their dtypes (Triton's ``warmup``); empty when a size has no
        hint."""
        k = self.k
        subs = {**{s: v for s, v in k.size_hints.items()}, **hints}
        try:
            xnumel = int(sympy.sympify(k.numel).xreplace(subs))
            rnumel = int(sympy.sympify(k.reduction_numel).xreplace(subs))
            size_values = [int(sympy.sympify(s).xreplace(subs)) for s in k.size_args]
        except (TypeError, ValueError):
            return []
        if xnumel <= 0:
            return []
        from .runtime import pointwise_config, reduction_config

        dtypes = [b.dtype for b in k.buffers]
        options = {"num_warps": 0}
        if self.checks:
            options.update(debug=True, sanitize_overflow=False)
        if k.reduction_ranges:
            idx64 = xnumel * max(rnumel, 1) > 2**31 - 1
            persistent, xblock, rblock, warps = reduction_config(xnumel, rnumel, False, self.outer_reduction())
            name = f"{k.name}_persistent" if persistent else f"{k.name}_looped"
            args = (*dtypes, *size_values, xnumel, rnumel, xblock, rblock, idx64)
        else:
            idx64 = xnumel > 2**31 - 1
            xblock, warps = pointwise_config(xnumel, False)
            name = k.name
            args = (*dtypes, *size_values, xnumel, xblock, idx64)
        options["num_warps"] = warps
        return [(name, args, options)]

    def render(self, interpret: bool = True) -> str:
        """Source of the kernel's jit function(s) and its launcher ``<name>_launch``
        (for the interpreter or for a GPU); on a GPU also the ``<fn>_L`` launchers."""
        jit, launcher = self.render_parts(interpret)
        parts = [src for _, src in jit]
        if not interpret:
            parts.append("\n".join(f"{f}_L = _rt.Launcher({f})" for f, _ in jit))
        return "\n\n\n".join(parts + [launcher])

    def render_parts(self, interpret: bool = True) -> tuple[list[tuple[str, str]], str]:
        """``([(jit function name, source)...], launcher source)``.  The jit functions'
        parameters and accumulators have canonical names (``in_ptr0``, ``out_ptr1``,
        ``red0``...; the launcher passes buffers by position), so kernels that differ
        only in the buffers they touch (a model's identical layers) have the same source
        but for the function's name (the generator compiles one of them)."""
        if self.k.reduction_ranges:
            fns = [(f"{self.k.name}_persistent", self.render_persistent()),
                   (f"{self.k.name}_looped", self.render_looped())]
        else:
            fns = [(self.k.name, self.render_pointwise())]
        launcher = self.render_launcher(interpret)  # after the bodies: they set self.checks
        rename = self.canonical_names()
        return [(name, _rename(src, rename)) for name, src in fns], launcher

    def canonical_names(self) -> dict[str, str]:
        names = {b.name: f"{'out' if b.stored else 'in'}_ptr{i}" for i, b in enumerate(self.k.buffers)}
        reduces = [s.name for loop in self.k.loops for s in loop.body if isinstance(s, ir.Reduce)]
        for j, r in enumerate(dict.fromkeys(reduces)):
            names.setdefault(r, f"red{j}")
        return names
