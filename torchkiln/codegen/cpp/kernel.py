"""C++ source of one FusedKernel: OpenMP-parallel outer loops, ``omp simd`` inner loops.

Every value is computed into a named local (common subexpressions once per scope);
float16/bfloat16 are loaded as float and rounded on store.  Reductions accumulate in
the ``Reduce.dtype`` accumulator with ``omp simd reduction`` clauses where the
accumulation is associative (sum, prod, any, all; max/min with a separate NaN flag);
argmax/argmin run a scalar compare loop (first extreme wins, NaN counts as extreme).
"""
from __future__ import annotations

import dataclasses
import math

import sympy
import torch

from .. import config
from ..ir import (
    TRANSCENDENTAL, Constant, FusedKernel, IndexValue, Load, Loop, Masked, Op, Reduce, ReductionValue, Store,
    is_float_symbol, welford_m2, welford_mean,
)
from ..bounds import ZERO_DIVISION
from ..printers import cexpr
from .cascade import COLUMN_CASCADE, WELFORD_BLOCK, blocked_nest, cascade_split, close_loops, open_loops, welford_merge

CTYPES = {
    torch.float32: "float", torch.float64: "double", torch.float16: "uint16_t", torch.bfloat16: "uint16_t",
    torch.int64: "int64_t", torch.int32: "int32_t", torch.int16: "int16_t", torch.int8: "int8_t",
    torch.uint8: "uint8_t", torch.bool: "uint8_t",
}


def ctype(dtype: torch.dtype) -> str:
    """C type of a buffer element.  A bool tensor's bytes are read as ``uint8_t`` and
    compared with 0: GCC vectorizes ``bool`` loads in ``omp simd`` loops poorly (a
    masked softmax ran 4-9x slower with ``const bool*``)."""
    if dtype not in CTYPES:
        raise NotImplementedError(f"C++ kernels do not support {dtype}")
    return CTYPES[dtype]


def vtype(dtype: torch.dtype) -> str:
    """C type a value of ``dtype`` is computed in (float for half and bfloat16)."""
    if dtype == torch.bool:
        return "bool"
    return "float" if dtype in (torch.float16, torch.bfloat16) else ctype(dtype)


def literal(value, dtype: torch.dtype) -> str:
    t = vtype(dtype)
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        v = float(value)
        if math.isnan(v):
            return f"kiln::limits<{t}>::quiet_NaN()"
        if math.isinf(v):
            return ("-" if v < 0 else "") + f"kiln::limits<{t}>::infinity()"
        return f"static_cast<{t}>({v!r})"
    return f"static_cast<{t}>({int(value)}LL)"


_UNARY = {
    "neg": "(-{0})", "exp": "kiln::exp({0})", "exp2": "kiln::exp2({0})", "expm1": "kiln::expm1({0})",
    "log": "kiln::log({0})", "log2": "kiln::log2({0})", "log10": "kiln::log10({0})", "log1p": "kiln::log1p({0})",
    "sqrt": "kiln::sqrt({0})", "sin": "kiln::sin({0})", "cos": "kiln::cos({0})", "tan": "kiln::tan({0})",
    "asin": "kiln::asin({0})", "acos": "kiln::acos({0})", "atan": "kiln::atan({0})", "sinh": "kiln::sinh({0})",
    "cosh": "kiln::cosh({0})", "tanh": "kiln::tanh({0})", "asinh": "kiln::asinh({0})", "acosh": "kiln::acosh({0})",
    "atanh": "kiln::atanh({0})", "erf": "kiln::erf({0})", "erfc": "kiln::erfc({0})", "floor": "kiln::floor({0})",
    "ceil": "kiln::ceil({0})", "round": "kiln::nearbyint({0})", "trunc": "kiln::trunc({0})",
    "signbit": "kiln::signbit({0})", "isnan": "({0} != {0})", "isinf": "kiln::isinf({0})",
    "isfinite": "kiln::isfinite({0})", "logical_not": "(!{0})", "lgamma": "kiln::lgamma({0})",
    "sign": "kiln_sign({0})", "sigmoid": "kiln::sigmoid({0})",
}
_BINARY = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "truediv": "({0} / {1})",
    "atan2": "kiln::atan2({0}, {1})", "maximum": "kiln_maximum({0}, {1})", "minimum": "kiln_minimum({0}, {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})",
    "ge": "({0} >= {1})", "logical_and": "({0} && {1})", "logical_or": "({0} || {1})",
    "logical_xor": "({0} != {1})", "bitwise_and": "({0} & {1})", "bitwise_or": "({0} | {1})",
    "bitwise_xor": "({0} ^ {1})",
    "copysign": "kiln::copysign({0}, {1})", "hypot": "kiln::hypot({0}, {1})",
}

# integer ops that wrap (or divide) through the prelude's kiln_<name>_<type> helpers
_WRAPPING = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
_INTEGER_OPS = {"add": "wadd", "sub": "wsub", "mul": "wmul", "neg": "wneg", "abs": "wabs", "truncdiv": "idiv",
                "fmod": "ifmod", "floordiv": "ifloordiv", "remainder": "imod"}
_DIVISIONS = ("truncdiv", "fmod", "floordiv", "remainder")


class Scope:
    """Emitted lines plus the CSE table of one C++ block (children see parents' names)."""

    def __init__(self, parent=None, indent="", hoist=None, loop_vars=()) -> None:
        self.parent = parent
        self.lines: list[str] = []
        self.names: dict = {}
        self.indent = indent
        # values that do not depend on loop_vars are computed in ``hoist`` (before the loop)
        self.hoist = hoist
        self.loop_vars = set(loop_vars)
        # (lines before the loop nest, outer vars, inner var, its range): costly values of
        # the inner var alone go to a table filled once (:meth:`CppKernel._tabled`)
        self.table = None

    def lookup(self, value):
        scope = self
        while scope is not None:
            if value in scope.names:
                return scope.names[value]
            scope = scope.parent
        return None


class CppKernel:
    """Renders one :class:`FusedKernel` as an ``extern "C"`` function."""

    def __init__(self, kernel: FusedKernel) -> None:
        self.k = kernel
        self.counter = 0
        self.dtypes = {b.name: b.dtype for b in kernel.buffers}
        self.reductions: dict[str, str] = {}
        self.serial = any(isinstance(s, Store) and (s.mode or s.indirect) for lp in kernel.loops for s in lp.body)
        self.sites: list[tuple[str, int]] = []  # (op, dim) of each indirect-index check

    def tmp(self) -> str:
        self.counter += 1
        return f"t{self.counter}"

    # ---- values
    def emit(self, value, scope: Scope) -> str:
        name = scope.lookup(value)
        if name is not None:
            return name
        if isinstance(value, Constant):
            return literal(value.value, value.dtype)
        if isinstance(value, ReductionValue):
            return self.reductions[value.name]
        if scope.hoist is not None and not self._depends(value, scope.loop_vars, {}):
            return self.emit(value, scope.hoist)
        if scope.table is not None:
            ref = self._tabled(value, scope)
            if ref is not None:
                scope.names[value] = ref
                return ref
        expr = self._expr(value, scope)
        name = self.tmp()
        scope.lines.append(f"{scope.indent}{vtype(value.dtype)} {name} = {expr};")
        scope.names[value] = name
        return name

    def _tabled(self, value, scope: Scope):
        """``tbl[x]`` for a costly value (a division, square root, transcendental) of the
        inner loop variable ``x`` alone, the table filled once before the loop nest: a
        channels-last batch norm computes ``1 / sqrt(var[c] + eps)`` per channel, not per
        element.  None when ``value`` is not such a value."""
        lines, outer, inner, extent = scope.table
        if not isinstance(value, Op) or not _table_safe(value, {}) or self._depends(value, outer, {}) \
                or _cost([value]) < 10:
            return None
        name = f"tbl{self.counter + 1}"
        self.counter += 1
        body = Scope(None, "    ")
        v = self.emit(value, body)
        lines.append(f"  {vtype(value.dtype)} {name}[{extent}];")
        lines.append(f"  for (int64_t {inner} = 0; {inner} < {extent}; {inner}++) {{")
        lines.extend(body.lines)
        lines.append(f"    {name}[{inner}] = {v};")
        lines.append("  }")
        return f"{name}[{inner}]"

    def _depends(self, value, loop_vars, memo) -> bool:
        """Whether ``value`` changes with ``loop_vars`` (Masked values always stay in the loop)."""
        key = id(value)
        if key not in memo:
            if isinstance(value, Load):
                memo[key] = bool(value.index.free_symbols & loop_vars) or any(
                    self._depends(i.value, loop_vars, memo) or sympy.sympify(i.size).free_symbols & loop_vars
                    for i in value.indirect)
            elif isinstance(value, IndexValue):
                memo[key] = bool(value.expr.free_symbols & loop_vars)
            elif isinstance(value, Op):
                memo[key] = any(self._depends(a, loop_vars, memo) for a in value.args)
            else:
                memo[key] = isinstance(value, Masked)
        return memo[key]

    def _index(self, index, indirect, scope) -> str:
        subs = {}
        for ind in indirect:
            sym = str(ind.symbol)
            # the same index value checked again (one per loop of a fused kernel): reuse it
            same = scope.lookup(("indirect_value", ind.value, ind.size, ind.check, ind.wrap))
            if same is not None and same != sym:
                subs[ind.symbol] = sympy.Symbol(same, integer=True)
                continue
            if scope.lookup(("indirect", sym)) is None:
                # computed (and checked) before the inner loop when it does not change along it
                at = scope
                while at.hoist is not None and not self._depends(ind.value, at.loop_vars, {}) and not (
                        sympy.sympify(ind.size).free_symbols & at.loop_vars):
                    at = at.hoist
                v = self.emit(ind.value, at)
                size = cexpr(ind.size)
                if ind.check:
                    self.sites.append((ind.op, ind.dim))
                    rhs = f"kiln_check_index({v}, {size}, {len(self.sites) - 1}, &kiln_err, {'true' if ind.wrap else 'false'})"
                elif ind.wrap:
                    rhs = f"{v} < 0 ? {v} + {size} : {v}"
                else:
                    rhs = v
                at.lines.append(f"{at.indent}int64_t {sym} = {rhs};")
                at.names[("indirect", sym)] = sym
                at.names[("indirect_value", ind.value, ind.size, ind.check, ind.wrap)] = sym
        return cexpr(index.xreplace(subs) if subs else index)

    @staticmethod
    def _empty_dim(indirect) -> bool:
        """An indirect index into a dimension of size 0: every index fails its check, and
        element 0 does not exist (the data pointer may be null), so no access is made."""
        return any(ind.check and sympy.sympify(ind.size) == 0 for ind in indirect)

    def _expr(self, value, scope) -> str:
        if isinstance(value, Load):
            ref = f"{value.buffer}[{self._index(value.index, value.indirect, scope)}]"
            if self._empty_dim(value.indirect):
                return literal(0, value.dtype)
            if value.dtype == torch.float16:
                return f"kiln_h2f({ref})"
            if value.dtype == torch.bfloat16:
                return f"kiln_bf2f({ref})"
            if value.dtype == torch.bool:
                return f"({ref} != 0)"
            return ref
        if isinstance(value, IndexValue):
            return f"static_cast<{vtype(value.dtype)}>({cexpr(value.expr)})"
        if isinstance(value, Masked):
            name = self.tmp()
            scope.lines.append(f"{scope.indent}{vtype(value.dtype)} {name} = {literal(value.other, value.dtype) if not isinstance(value.other, Constant) else literal(value.other.value, value.dtype)};")
            mask = self.emit(value.mask, scope)
            scope.lines.append(f"{scope.indent}if ({mask}) {{")
            inner = Scope(scope, scope.indent + "  ")
            body = self.emit(value.body, inner)
            scope.lines.extend(inner.lines)
            scope.lines.append(f"{scope.indent}  {name} = {body};")
            scope.lines.append(f"{scope.indent}}}")
            return name
        if isinstance(value, Op):
            if (value.name == "truediv" and value.dtype.is_floating_point and scope.hoist is not None
                    and not self._depends(value.args[1], scope.loop_vars, {})):
                # a divisor fixed across the vector loop: multiply by its reciprocal,
                # computed once before the loop (as ATen's softmax/normalization kernels do)
                recip = self.emit(Op("reciprocal", (value.args[1],), value.dtype), scope)
                return f"({self.emit(value.args[0], scope)} * {recip})"
            return self._op(value, [self.emit(a, scope) for a in value.args])
        raise NotImplementedError(f"cannot emit {value!r}")

    def _op(self, op: Op, args: list[str]) -> str:
        name, dt = op.name, op.dtype
        adt = op.args[0].dtype if op.args else dt
        floating = adt.is_floating_point
        if name in _INTEGER_OPS and adt == dt and dt in _WRAPPING:  # see the prelude's KILN_WRAPPING
            if name in _DIVISIONS:
                self.sites.append((ZERO_DIVISION, 0))
                args = [args[0], f"kiln_check_divisor({args[1]}, {len(self.sites) - 1}, &kiln_err)"]
            return f"kiln_{_INTEGER_OPS[name]}_{vtype(dt)}({', '.join(args)})"
        if name == "to_dtype":
            src = op.args[0].dtype
            if dt == torch.bool:
                return f"({args[0]} != 0)"
            if dt == torch.float16:
                return f"kiln_round_half(static_cast<float>({args[0]}))"
            if dt == torch.bfloat16:
                return f"kiln_round_bf16(static_cast<float>({args[0]}))"
            if src in (torch.float16, torch.bfloat16) and not dt.is_floating_point:
                return f"static_cast<{vtype(dt)}>({args[0]})"
            return f"static_cast<{vtype(dt)}>({args[0]})"
        if name == "where":
            return f"({args[0]} ? {args[1]} : {args[2]})"
        if name == "abs":
            return f"kiln::fabs({args[0]})" if floating else f"kiln_abs({args[0]})"
        if name == "relu":
            return f"({args[0]} < 0 ? static_cast<{vtype(dt)}>(0) : {args[0]})"
        if name == "rsqrt":
            return f"(static_cast<{vtype(dt)}>(1) / kiln::sqrt({args[0]}))"
        if name == "reciprocal":
            return f"(static_cast<{vtype(dt)}>(1) / {args[0]})"
        if name == "bitwise_not":
            return f"(!{args[0]})" if adt == torch.bool else f"(~{args[0]})"
        if name == "floordiv":
            return f"kiln::floor({args[0]} / {args[1]})" if floating else f"kiln_floordiv({args[0]}, {args[1]})"
        if name == "truncdiv":
            return f"kiln::trunc({args[0]} / {args[1]})" if floating else f"({args[0]} / {args[1]})"
        if name == "remainder":
            return f"kiln_fremainder({args[0]}, {args[1]})" if floating else f"kiln_mod({args[0]}, {args[1]})"
        if name == "fmod":
            return f"kiln::fmod({args[0]}, {args[1]})" if floating else f"({args[0]} % {args[1]})"
        if name == "pow":
            return f"kiln::pow({args[0]}, {args[1]})" if floating else f"kiln_ipow({args[0]}, {args[1]})"
        if name in ("lshift", "rshift"):
            return f"kiln_{name}<{vtype(dt)}>({args[0]}, {args[1]})"
        if name in ("maximum", "minimum") and not floating:
            return f"kiln::{name[:3]}<{vtype(dt)}>({args[0]}, {args[1]})"
        if name in _UNARY:
            return _UNARY[name].format(*args)
        if name in _BINARY:
            return _BINARY[name].format(*args)
        raise NotImplementedError(f"C++ kernels: no op {name}")

    def _store(self, st: Store, scope: Scope) -> None:
        v = self.emit(st.value, scope)
        dt = self.dtypes[st.buffer]
        if dt == torch.float16:
            v = f"kiln_f2h({v})"
        elif dt == torch.bfloat16:
            v = f"kiln_f2bf({v})"
        else:
            v = f"static_cast<{ctype(dt)}>({v})"
        ref = f"{st.buffer}[{self._index(st.index, st.indirect, scope)}]"
        if self._empty_dim(st.indirect):
            return
        if st.mode == "atomic_add":
            if dt in (torch.float16, torch.bfloat16):
                conv = "kiln_f2h" if dt == torch.float16 else "kiln_f2bf"
                back = "kiln_h2f" if dt == torch.float16 else "kiln_bf2f"
                scope.lines.append(f"{scope.indent}{ref} = {conv}({back}({ref}) + {self.emit(st.value, scope)});")
            else:
                scope.lines.append(f"{scope.indent}{ref} += {v};")
        else:
            scope.lines.append(f"{scope.indent}{ref} = {v};")

    # ---- loops
    def _loop_nest(self, vars_, ranges, indent, pragma=None):
        lines = []
        if pragma:
            lines.append(f"{indent}{pragma}")
        for v, r in zip(vars_, ranges):
            lines.append(f"{indent}for (int64_t {v} = 0; {v} < {cexpr(r)}; {v}++) {{")
            indent += "  "
        return lines, indent

    def render(self) -> str:
        k = self.k
        params = []
        for b in k.buffers:
            const = "" if b.stored else "const "
            params.append(f"{const}{ctype(b.dtype)}* __restrict__ {b.name}")
        params += [f"{'double' if is_float_symbol(s) else 'int64_t'} {s}" for s in k.size_args]
        lines = [f'extern "C" void {k.name}({", ".join(params)}) {{']
        work = cexpr(k.numel * k.reduction_numel) if k.reduction_ranges else cexpr(k.numel)
        ranges = list(k.ranges)
        xs = list(k.index_vars)
        pure_pointwise = not k.reduction_ranges
        # a static size below the threshold: no OpenMP region at all (one with a false
        # ``if`` still costs ~0.8 us per launch in libgomp, more than a small kernel's work)
        small = _static_below(k.numel * k.reduction_numel if k.reduction_ranges else k.numel,
                              config.cpp_parallel_min_work)
        parallel = "" if self.serial or small else (
            f"#pragma omp parallel for if(kiln_threads > 1 && ({work}) >= {config.cpp_parallel_min_work}) "
            f"num_threads(kiln_threads)")
        if not ranges:
            body_lines, indent = [], "  "
        elif is_column_reduction(k) and not self.serial:
            return self._render_tiled(lines, parallel)
        elif pure_pointwise and len(ranges) == 1:
            pragma = parallel.replace("parallel for", "parallel for simd") if parallel else "#pragma omp simd"
            body_lines, indent = self._loop_nest(xs, ranges, "  ", pragma)
        elif pure_pointwise:
            outer, inner = xs[:-1], xs[-1:]
            pragma = f"{parallel} collapse({len(outer)})" if parallel and len(outer) > 1 else parallel
            body_lines, oindent = self._loop_nest(outer, ranges[:-1], "  ", pragma or None)
            more, indent = self._loop_nest(inner, ranges[-1:], oindent, "#pragma omp simd")
            pre = Scope(None, oindent)
            tables: list[str] = []
            table = None
            if all(sympy.sympify(r).is_Integer and int(r) > 0 for r in ranges) and int(ranges[-1]) <= TABLE_MAX:
                table = (tables, set(outer), inner[0], int(ranges[-1]))
            stores = [st for loop in k.loops for st in loop.body]
            segments = inner_segments(stores, inner[0], ranges[-1])
            loops = []
            for lo, hi, known in segments or [(None, None, {})]:
                scope = Scope(pre, indent, hoist=pre, loop_vars=inner)
                scope.table = table
                for st in stores:
                    self._store(dataclasses.replace(st, value=substitute(st.value, known)) if known else st, scope)
                if lo is None:
                    loops += more + scope.lines
                else:  # one branch-free vector loop per stretch of the inner index
                    loops += [f"{oindent}#pragma omp simd", f"{oindent}for (int64_t {inner[0]} = {lo}; "
                              f"{inner[0]} < {hi}; {inner[0]}++) {{"] + scope.lines + [f"{oindent}}}"]
            lines += tables + body_lines + pre.lines + loops
            for d in range(len(xs) - (1 if segments else 0), 0, -1):
                lines.append("  " * d + "}")
            lines.append("}")
            return "\n".join(lines)
        else:
            pragma = f"{parallel} collapse({len(xs)})" if parallel and len(xs) > 1 else parallel
            body_lines, indent = self._loop_nest(xs, ranges, "  ", pragma or None)
        lines += body_lines
        scope = Scope(None, indent)
        for loop in k.loops:
            if loop.reduction:
                self._reduction_loop(loop, scope)
            else:
                for st in loop.body:
                    self._store(st, scope)
        lines += scope.lines
        n_open = sum(1 for line in body_lines if line.rstrip().endswith("{"))
        for d in range(n_open, 0, -1):
            lines.append("  " * d + "}")
        lines.append("}")
        return "\n".join(lines)

    _INIT = {"sum": "0", "prod": "1", "any": "false", "all": "true"}
    _CLAUSE = {"sum": "+", "prod": "*", "any": "||", "all": "&&"}

    def _reduction_loop(self, loop, scope: Scope) -> None:
        k = self.k
        ind = scope.indent
        clauses, after = [], []
        reduces = [s for s in loop.body if isinstance(s, Reduce)]
        scalar = (any(r.reduction_type in ("argmax", "argmin") for r in reduces) or self.serial
                  or not k.reduction_vars)  # no reduction dims (all of size 1): one point, no loop
        welfords = [r for r in reduces if r.reduction_type == "welford"]
        two_pass = welfords and not scalar and self._short_inner_rows()
        for r in reduces:
            acc = f"{r.name}"
            t = vtype(r.dtype)
            rt = r.reduction_type
            if rt in self._INIT:
                scope.lines.append(f"{ind}{t} {acc} = static_cast<{t}>({self._INIT[rt]});")
                clauses.append(f"reduction({self._CLAUSE[rt]}:{acc})")
                self.reductions[r.name] = acc
            elif rt in ("max", "min"):
                vt = vtype(r.value.dtype)
                init = ("-" if rt == "max" else "") + (f"kiln::limits<{vt}>::infinity()"
                                                       if r.value.dtype.is_floating_point else "")
                if not r.value.dtype.is_floating_point:
                    init = f"kiln::limits<{vt}>::{'lowest' if rt == 'max' else 'max'}()"
                scope.lines.append(f"{ind}{vt} {acc} = {init};")
                scope.lines.append(f"{ind}int {acc}_nan = 0;")
                clauses.append(f"reduction({rt}:{acc}) reduction(|:{acc}_nan)")
                fin = f"{acc}_f"
                after.append(f"{ind}{vt} {fin} = {acc}_nan ? kiln::limits<{vt}>::quiet_NaN() : {acc};")
                self.reductions[r.name] = fin
            elif rt == "welford" and scalar:
                # in double, as eager's Welford: a float running mean of values far from zero
                # rounds at their magnitude (var(1) beside an argmax, rand() + 100 over 2**16
                # points: 320x eager's error, 2**20 points: 12700x; double: ~1x)
                scope.lines.append(f"{ind}double {acc}_smean = 0, {acc}_sm2 = 0; int64_t {acc}_sn = 0;")
                after.append(f"{ind}const {t} {acc}_smean_t = static_cast<{t}>({acc}_smean), "
                             f"{acc}_sm2_t = static_cast<{t}>({acc}_sm2);")
                self.reductions[welford_mean(acc)], self.reductions[welford_m2(acc)] = f"{acc}_smean_t", f"{acc}_sm2_t"
            elif rt == "welford" and two_pass:
                scope.lines.append(f"{ind}{t} {acc}_sum = 0, {welford_m2(acc)} = 0;")
                clauses.append(f"reduction(+:{welford_m2(acc)})")
                self.reductions[welford_mean(acc)], self.reductions[welford_m2(acc)] = welford_mean(acc), welford_m2(acc)
            elif rt == "welford":
                scope.lines.append(f"{ind}{t} " + ", ".join(f"{acc}_{p}[{self.LANES}] = {{}}"
                                                            for p in ("lmean", "lm2", "lsum", "tmean", "tm2", "tsum")) + ";")
                self._welford_shift(r, scope)
            else:
                vt = vtype(r.value.dtype)
                init = ("-" if rt == "argmax" else "") + f"kiln::limits<{vt}>::infinity()"
                if not r.value.dtype.is_floating_point:
                    init = f"kiln::limits<{vt}>::{'lowest' if rt == 'argmax' else 'max'}()"
                scope.lines.append(f"{ind}{vt} {acc}_v = {init};")
                scope.lines.append(f"{ind}int64_t {acc} = 0;")
                scope.lines.append(f"{ind}bool {acc}_first = true;")
                self.reductions[r.name] = acc
        sums = [(r.name, "float") for r in reduces if r.reduction_type == "sum" and vtype(r.dtype) == "float"]
        if welfords and not scalar and not two_pass:
            after += self._welford_lanes(loop, scope, clauses, welfords, sums)
        else:
            if two_pass:
                self._welford_mean_pass(welfords, scope)
                sums += [(welford_m2(r.name), "float") for r in welfords if vtype(r.dtype) == "float"]
            pragma = None if scalar else "#pragma omp simd " + " ".join(clauses)
            finals = self._summing_nest(scope, pragma, sums,
                                        lambda inner: self._reduction_body(loop, inner, "two_pass" if two_pass else None))
            self.reductions.update(finals)
        scope.lines += after

    def _summing_nest(self, scope: Scope, pragma, sums, fill) -> dict:
        """Emit the reduction loop nest around the statements ``fill(inner scope)`` adds,
        ``pragma`` (``omp simd`` and its clauses) on the nest (see ``_reduction_loops``).
        The float accumulators ``sums`` (``[(name, type)]``) are cascaded: the nest runs
        in blocks of at most ``cascade.CASCADE`` points (``cascade.cascade_split``), each
        accumulator reset to zero before a block and added into a double ``name_o`` after
        it.  Returns the names holding their final values (``name_t``)."""
        k, ind = self.k, scope.indent
        split = cascade_split(k.reduction_ranges) if sums else None
        outer, block = blocked_nest(k.reduction_vars, k.reduction_ranges, split)
        inner = Scope(scope, ind + "  " * (len(outer) + len(block)), hoist=scope, loop_vars=k.reduction_vars)
        fill(inner)  # first: its invariants hoist before the nest
        if split is None:
            scope.lines += self._reduction_loops(block, ind, pragma, inner.lines) + inner.lines
            scope.lines += close_loops(len(block), ind)
            return {}
        scope.lines += [f"{ind}double {name}_o = 0;" for name, _ in sums]
        lines, bind = open_loops(outer, ind)
        lines += [f"{bind}{name} = 0;" for name, _ in sums]
        lines += self._reduction_loops(block, bind, pragma, inner.lines) + inner.lines + close_loops(len(block), bind)
        lines += [f"{bind}{name}_o += {name};" for name, _ in sums]
        scope.lines += lines + close_loops(len(outer), ind)
        scope.lines += [f"{ind}const {t} {name}_t = static_cast<{t}>({name}_o);" for name, t in sums]
        return {name: f"{name}_t" for name, _ in sums}

    def _reduction_loops(self, heads, indent: str, pragma, body: list[str]) -> list[str]:
        """The opening lines of the loop nest ``heads`` (``cascade.open_loops``) around
        ``body``, with ``pragma`` (``omp simd`` and its reduction clauses) on the whole nest
        as ``collapse(n)``, or on the innermost loop alone when the body selects (``?:``)
        or computes a bool: GCC vectorizes such a collapsed nest very badly (batch_norm
        backward's sum of ``relu``-masked gradients over N, H, W: 2.7 ms collapsed, 0.2 ms
        innermost; a plain sum: 0.06 ms collapsed, 0.2 ms innermost, one horizontal add
        per row)."""
        n = len(heads)
        if pragma is None or n == 1 or not any(" ? " in line or line.lstrip().startswith("bool ") for line in body):
            if pragma is not None and n > 1:
                pragma += f" collapse({n})"
            return open_loops(heads, indent, pragma)[0]
        outer, indent = open_loops(heads[:-1], indent)
        return outer + open_loops(heads[-1:], indent, pragma)[0]

    def _short_inner_rows(self) -> bool:
        """Several reduction dims, the innermost shorter than the widest lane group (a
        batch_norm over N, H, W): lanes would stay mostly idle, one dependent update per
        short row, so welford runs as two vectorized passes over the (collapsed) loop
        nest instead: the mean, then the sum of squared deviations from it."""
        k = self.k
        if len(k.reduction_vars) < 2:
            return False
        inner = sympy.sympify(sympy.sympify(k.reduction_ranges[-1]).xreplace(k.size_hints))
        return bool(inner.is_number and int(inner) < 64)

    def _welford_mean_pass(self, welfords, scope: Scope) -> None:
        """The first pass of a two-pass welford: ``name_mean`` = sum(value) / n (the sum
        cascaded as any float sum)."""
        k, ind = self.k, scope.indent
        clauses = " ".join(f"reduction(+:{r.name}_sum)" for r in welfords)

        def fill(inner):
            for r in welfords:
                inner.lines.append(f"{inner.indent}{r.name}_sum += {self.emit(r.value, inner)};")

        finals = self._summing_nest(scope, f"#pragma omp simd {clauses}",
                                    [(f"{r.name}_sum", "float") for r in welfords if vtype(r.dtype) == "float"], fill)
        n = cexpr(k.reduction_numel)
        for r in welfords:
            t, total = vtype(r.dtype), finals.get(f"{r.name}_sum", f"{r.name}_sum")
            scope.lines.append(f"{ind}const {t} {welford_mean(r.name)} = ({n}) > 0 ? "
                               f"{total} / static_cast<{t}>({n}) : static_cast<{t}>(0);")

    #: Welford lanes: the innermost reduction index runs in chunks of LANES points, one
    #: per lane, so every lane has seen the same count and ``1/count`` is one scalar per
    #: chunk; several vector registers of lanes hide the latency of the update chain
    #: (4 with AVX-512, 64 lanes; 4 with AVX2, 32: 64 would spill).  A C++ macro, so the
    #: source does not depend on the host (see ``_LANES_DEFINE``).
    LANES = "KILN_WELFORD_LANES"

    def _welford_lanes(self, loop, scope: Scope, clauses, welfords, sums) -> list[str]:
        """A reduction loop with ``welford`` Reduces, vectorized: the outer reduction dims
        run plainly; the innermost in chunks of :attr:`LANES` under ``omp simd`` (per-lane
        Welford state in arrays ``_lmean``/``_lm2``, other reductions as ``omp simd
        reduction`` clauses), then its ``n % LANES`` last points as tail lanes (arrays
        ``_tmean``/``_tm2``, also one count for all).  Returns the lines (for after the
        loop) that merge them (``_welford_combine``).

        Blocked (float states, a reduction not statically at most ``CASCADE`` points): once
        a group's lanes have seen ``WELFORD_BLOCK / LANES`` points each, they merge into
        per-lane double states (``_dlmean``... ``cascade.welford_merge``) and restart from
        zero, and the float ``sums`` of the loop are added into doubles then (a float
        lane's mean and M2 drift with its count as a float sum does)."""
        k = self.k
        ind = scope.indent
        counter = loop_counter(loop)
        blocked = cascade_split(k.reduction_ranges) is not None and all(vtype(r.dtype) == "float" for r in welfords)
        scope.lines.append(f"{ind}int64_t {counter}_l = 0, {counter}_t = 0;")
        merges = {}
        if blocked:
            scope.lines.append(f"{ind}double {counter}_dl = 0, {counter}_dt = 0;")
            for r in welfords:
                scope.lines.append(f"{ind}double " + ", ".join(f"{r.name}_d{p}[{self.LANES}] = {{}}"
                                                               for p in ("lmean", "lm2", "lsum", "tmean", "tm2", "tsum")) + ";")
            scope.lines += [f"{ind}double {name}_o = 0;" for name, _ in sums]
            for part in ("l", "t"):
                pairs = [(f"{r.name}_{part}mean", f"{r.name}_{part}m2", f"{r.name}_d{part}mean", f"{r.name}_d{part}m2")
                         for r in welfords]
                merges[part] = lambda indent, pairs=pairs, part=part: welford_merge(
                    pairs, f"{counter}_{part}", f"{counter}_d{part}", self.LANES, indent) + [
                    f"{indent}for (int64_t l = 0; l < {self.LANES}; l++) {{ {r.name}_d{part}sum[l] += {r.name}_{part}sum[l]; "
                    f"{r.name}_{part}sum[l] = 0; }}" for r in welfords]
        outer_lines, indent = self._loop_nest(k.reduction_vars[:-1], k.reduction_ranges[:-1], ind)
        last, n = k.reduction_vars[-1], cexpr(k.reduction_ranges[-1])
        lines = list(outer_lines)
        lines.append(f"{indent}const int64_t {last}_end = ({n}) - ({n}) % {self.LANES};")
        types = sorted({vtype(r.dtype) for r in welfords})
        for part, head, lane in (
                ("l", f"for (int64_t {last}_b = 0; {last}_b < {last}_end; {last}_b += {self.LANES}) {{",
                 f"{last}_l"),
                ("t", f"if ({last}_end < {n}) {{", f"{last} - {last}_end")):
            pind, segment = indent, blocked and part == "l"
            if segment:  # blocks of WELFORD_BLOCK points: the merge outside the lane-chunk loop
                lines += [f"{indent}for (int64_t {last}_s = 0; {last}_s < {last}_end; {last}_s += {WELFORD_BLOCK}) {{",
                          f"{indent}  const int64_t {last}_se = {last}_end - {last}_s < {WELFORD_BLOCK} ? {last}_end : "
                          f"{last}_s + {WELFORD_BLOCK};"]
                head = head.replace(f"{last}_b = 0; {last}_b < {last}_end", f"{last}_b = {last}_s; {last}_b < {last}_se")
                pind = indent + "  "
            lines.append(pind + head)
            lines.append(f"{pind}  {counter}_{part}++;")
            for t in types:
                lines.append(f"{pind}  const {t} {counter}_{part}_inv_{t} = static_cast<{t}>(1) / "
                             f"static_cast<{t}>({counter}_{part});")
            lines.append(f"{pind}  #pragma omp simd {' '.join(clauses)}")
            if part == "l":
                lines.append(f"{pind}  for (int64_t {lane} = 0; {lane} < {self.LANES}; {lane}++) {{")
                body = Scope(scope, pind + "    ", hoist=scope, loop_vars=k.reduction_vars)
                body.lines.append(f"{body.indent}const int64_t {last} = {last}_b + {lane};")
            else:
                lines.append(f"{pind}  for (int64_t {last} = {last}_end; {last} < {n}; {last}++) {{")
                body = Scope(scope, pind + "    ", hoist=scope, loop_vars=k.reduction_vars)
            self._reduction_body(loop, body, (part, lane, f"{counter}_{part}_inv_"))
            lines += body.lines
            lines.append(f"{pind}  }}")
            if segment:
                lines.append(f"{pind}}}")
            if blocked:  # a lane has seen at most 2 * WELFORD_BLOCK / LANES points in float
                lines.append(f"{pind}if ({counter}_{part} >= {WELFORD_BLOCK} / {self.LANES}) {{"
                             if segment else f"{pind}  if ({counter}_{part} == {WELFORD_BLOCK} / {self.LANES}) {{")
                mind = pind + ("  " if segment else "    ")
                lines += merges[part](mind)
                if part == "l":
                    lines += [f"{mind}{name}_o += {name}; {name} = 0;" for name, _ in sums]
                lines.append(f"{pind}{'' if segment else '  '}}}")
            lines.append(f"{indent}}}")
        for d in range(len(k.reduction_vars) - 1, 0, -1):
            lines.append(ind + "  " * (d - 1) + "}")
        scope.lines += lines
        after = []
        if blocked:
            for part in ("l", "t"):
                after += [f"{ind}if ({counter}_{part} > 0)"] + merges[part](ind + "  ")
            after += [f"{ind}const float {name}_t = static_cast<float>({name}_o + {name});" for name, _ in sums]
            self.reductions.update({name: f"{name}_t" for name, _ in sums})
        for r in welfords:
            after += self._welford_combine(r, counter, ind, blocked)
        return after

    def _welford_shift(self, r: Reduce, scope: Scope) -> None:
        """``<name>_shift``: the value at the first reduction point (0 for an empty row).
        The lanes take the values minus it, so that their float means stay near zero: a
        float running mean of values far from zero (``rand() + 100``) rounds at their
        magnitude, and ``var(1)`` over rows of 1024-4096 points was 115-140x eager's error.
        The mean is then the sum of the values over their count (per-lane sums ``_lsum``,
        ``_tsum``, blocked as the states): the shifted lane means lose ``eps * |first value
        - mean|`` (``randn``: 194x eager's)."""
        ind, t = scope.indent, vtype(r.dtype)
        scope.lines += [f"{ind}{t} {r.name}_shift = 0;"] + self._first_point(r, scope, f"{r.name}_shift", ind)

    def _first_point(self, r: Reduce, parent, target: str, ind: str, head: str | None = None) -> list[str]:
        """Lines setting ``target`` to ``r``'s value at the first reduction point when
        there is one (inside the loop ``head`` when given: a tiled kernel's columns)."""
        inner = ind + ("    " if head else "  ")
        block = Scope(parent, inner)
        block.lines += [f"{inner}const int64_t {v} = 0;" for v in self.k.reduction_vars]
        value = self.emit(r.value, block)
        lines = [f"{ind}if ({self._reduction_numel()} > 0) {{"] + ([f"{ind}  {head} {{"] if head else [])
        lines += block.lines + [f"{inner}{target} = {value};"] + ([f"{ind}  }}"] if head else [])
        return lines + [f"{ind}}}"]

    def _reduction_numel(self) -> str:
        return " * ".join(f"({cexpr(n)})" for n in self.k.reduction_ranges)

    def _welford_mean(self, a: str, wmean: str, xsum: str) -> str:
        """The mean output of a shifted Welford: the values' sum ``xsum`` (double) over
        their count, unless the lanes' mean ``wmean`` is not finite (an inf or NaN seen:
        eager's Welford gives NaN there, and so do the lanes)."""
        numel = self._reduction_numel()
        return f"(kiln::isfinite({wmean}) && {numel} > 0 ? {xsum} / static_cast<double>({numel}) : {wmean})"

    def _welford_combine(self, r: Reduce, counter: str, ind: str, blocked: bool) -> list[str]:
        """Lines merging the Welford lanes of a ``welford`` Reduce into its mean and M2.

        The lanes of one group (main lanes, tail lanes) share a count ``c``, so a group
        merges in closed form (mean of the lane means; M2 = sum of lane M2s + c * sum of
        squared deviations of the lane means), vectorized; the two groups then merge
        with Chan et al.'s pairwise formula.  ``blocked``: the lanes are the double
        states (``_dlmean``...), merged in double, the results rounded to float."""
        a = r.name
        mean, m2 = welford_mean(a), welford_m2(a)
        self.reductions[mean], self.reductions[m2] = mean, m2
        t, d, out_mean, out_m2 = vtype(r.dtype), "", mean, m2
        if blocked:
            t, d, out_mean, out_m2 = "double", "d", f"{mean}_d", f"{m2}_d"
        tail = f"({cexpr(self.k.reduction_ranges[-1])}) % {self.LANES}"
        out = [f"{ind}{t} {out_mean} = 0, {out_m2} = 0, {a}_w = 0;"]
        for part, lanes in (("l", str(self.LANES)), ("t", tail)):
            count = f"{counter}_{d}{part}"
            c, lm, l2 = f"static_cast<{t}>({count})", f"{a}_{d}{part}mean", f"{a}_{d}{part}m2"
            out += [f"{ind}if ({count} > 0) {{",
                    f"{ind}  const int64_t k = {lanes};",
                    f"{ind}  {t} s = 0, g2 = 0;",
                    f"{ind}  #pragma omp simd reduction(+:s)",
                    f"{ind}  for (int64_t l = 0; l < k; l++) s += {lm}[l];",
                    f"{ind}  const {t} g = s / static_cast<{t}>(k);",
                    f"{ind}  #pragma omp simd reduction(+:g2)",
                    f"{ind}  for (int64_t l = 0; l < k; l++) g2 += {l2}[l] + {c} * ({lm}[l] - g) * ({lm}[l] - g);",
                    f"{ind}  const {t} gw = {c} * static_cast<{t}>(k), w = {a}_w + gw, d = g - {out_mean}, f = gw / w;",
                    f"{ind}  {out_mean} += d * f; {out_m2} += g2 + d * d * {a}_w * f; {a}_w = w;",
                    f"{ind}}}"]
        # the mean from the sum of the values, unless the lanes' is not finite (inf or NaN
        # seen: as eager's Welford, which turns an inf into NaN)
        parts = [f"static_cast<double>({a}_{p}sum[l])" for p in ("l", "t")]
        parts += [f"{a}_d{p}sum[l]" for p in ("l", "t")] if blocked else []
        out += [f"{ind}double {a}_xsum = 0;",
                f"{ind}for (int64_t l = 0; l < {self.LANES}; l++) {a}_xsum += {' + '.join(parts)};",
                f"{ind}const double {a}_wmean = static_cast<double>({out_mean}) + {a}_shift;"]
        final = self._welford_mean(a, f"{a}_wmean", f"{a}_xsum")
        if blocked:
            out.append(f"{ind}const float {mean} = static_cast<float>({final}), {m2} = static_cast<float>({out_m2});")
        else:
            out.append(f"{ind}{mean} = static_cast<{t}>({final});")
        return out

    def _reduction_body(self, loop, inner: Scope, lanes=None) -> None:
        """The statements of one reduction point; ``lanes``: inside a Welford lane loop,
        ``(part, lane index, 1/count variable prefix)`` (see ``_welford_lanes``), or
        ``"two_pass"``: the second pass of a two-pass welford."""
        indent = inner.indent
        for st in loop.body:
            if isinstance(st, Store):
                self._store(st, inner)
                continue
            v = self.emit(st.value, inner)
            acc, rt = st.name, st.reduction_type
            if rt == "sum":
                inner.lines.append(f"{indent}{acc} += {v};")
            elif rt == "prod":
                inner.lines.append(f"{indent}{acc} *= {v};")
            elif rt == "any":
                inner.lines.append(f"{indent}{acc} = {acc} || {v};")
            elif rt == "all":
                inner.lines.append(f"{indent}{acc} = {acc} && {v};")
            elif rt in ("max", "min"):
                cmp = ">" if rt == "max" else "<"
                inner.lines.append(f"{indent}{acc} = ({v} {cmp} {acc}) ? {v} : {acc};")
                if st.value.dtype.is_floating_point:
                    inner.lines.append(f"{indent}{acc}_nan |= ({v} != {v});")
            elif rt == "welford" and lanes == "two_pass":
                inner.lines.append(f"{indent}{{ const {vtype(st.dtype)} d = {v} - {welford_mean(acc)}; "
                                   f"{welford_m2(acc)} += d * d; }}")
            elif rt == "welford" and lanes is None:
                inner.lines.append(f"{indent}{{ {acc}_sn++; const double y = {v}, d = y - {acc}_smean; "
                                   f"{acc}_smean += d / static_cast<double>({acc}_sn); {acc}_sm2 += d * (y - {acc}_smean); }}")
            elif rt == "welford":
                part, lane, inv = lanes
                mean, m2, inv = f"{acc}_{part}mean[{lane}]", f"{acc}_{part}m2[{lane}]", inv + vtype(st.dtype)
                t = vtype(st.dtype)
                inner.lines.append(f"{indent}{{ const {t} y = {v} - {acc}_shift, d = y - {mean}; {mean} += d * {inv}; "
                                   f"{m2} += d * (y - {mean}); {acc}_{part}sum[{lane}] += {v}; }}")
            else:
                cmp = ">" if rt == "argmax" else "<"
                nan = f" || ({v} != {v} && {acc}_v == {acc}_v)" if st.value.dtype.is_floating_point else ""
                inner.lines.append(
                    f"{indent}if ({acc}_first || ({v} {cmp} {acc}_v){nan}) {{ {acc}_v = {v}; {acc} = {cexpr(st.index)}; {acc}_first = false; }}")

    TILE = 128  # outputs per tile: 512 contiguous bytes per row of a float column reduction (16: 5x slower)

    def _render_tiled(self, lines, parallel) -> str:
        """A reduction over outer dims (``sum(0)`` of a row-major tensor): for each tile of
        the innermost outer index, accumulate into arrays while walking the reduction
        ranges, so every load is contiguous and the tile loop vectorizes."""
        k = self.k
        xs, ranges = list(k.index_vars), list(k.ranges)
        last, n = xs[-1], cexpr(ranges[-1])
        head = [f"for (int64_t {v} = 0; {v} < {cexpr(r)}; {v}++) {{" for v, r in zip(xs[:-1], ranges[:-1])]
        head.append(f"for (int64_t xb = 0; xb < {n}; xb += {self.TILE}) {{")
        if parallel:
            pragma = f"{parallel} collapse({len(head)})" if len(head) > 1 else parallel
            lines.append("  " + pragma)
        indent = "  "
        for h in head:
            lines.append(indent + h)
            indent += "  "
        lines.append(f"{indent}const int64_t xe = kiln::min<int64_t>({n}, xb + {self.TILE});")
        lane = f"[{last} - xb]"
        for loop in k.loops:
            if loop.reduction:
                for r in loop.body:
                    vt = vtype(r.value.dtype) if r.reduction_type in ("max", "min") else vtype(r.dtype)
                    if r.reduction_type == "welford":  # per output: mean, M2; one count for the tile
                        for part in (welford_mean(r.name), welford_m2(r.name)):
                            lines.append(f"{indent}{vt} {part}[{self.TILE}] = {{}};")
                            self.reductions[part] = f"{part}{lane}"
                        lines.append(f"{indent}int64_t {r.name}_n = 0;")
                        continue
                    if r.reduction_type in self._INIT:
                        init = f"static_cast<{vt}>({self._INIT[r.reduction_type]})"
                        self.reductions[r.name] = f"{r.name}{lane}"
                    else:
                        init = ("-" if r.reduction_type == "max" else "") + f"kiln::limits<{vt}>::infinity()"
                        if not r.value.dtype.is_floating_point:
                            init = f"kiln::limits<{vt}>::{'lowest' if r.reduction_type == 'max' else 'max'}()"
                        lines.append(f"{indent}int {r.name}_nan[{self.TILE}] = {{0}};")
                        self.reductions[r.name] = (f"({r.name}_nan{lane} ? kiln::limits<{vt}>::quiet_NaN() "
                                                   f": {r.name}{lane})")
                    lines.append(f"{indent}{vt} {r.name}[{self.TILE}];")
                    lines.append(f"{indent}for (int i = 0; i < {self.TILE}; i++) {r.name}[i] = {init};")
                sums = [r for r in loop.body if r.reduction_type == "sum" and vtype(r.dtype) == "float"]
                wels = [r for r in loop.body if r.reduction_type == "welford" and vtype(r.dtype) == "float"]
                split = cascade_split(k.reduction_ranges, COLUMN_CASCADE) if sums or wels else None
                if split is not None:  # cascaded: every block of rows is added into double arrays
                    for r in sums:
                        lines.append(f"{indent}double {r.name}_d[{self.TILE}] = {{}};")
                        self.reductions[r.name] = f"static_cast<float>({r.name}_d{lane})"
                    for r in wels:
                        lines.append(f"{indent}double {welford_mean(r.name)}_d[{self.TILE}] = {{}}, "
                                     f"{welford_m2(r.name)}_d[{self.TILE}] = {{}}, {r.name}_xs_d[{self.TILE}] = {{}}, "
                                     f"{r.name}_dn = 0;")
                        self.reductions[welford_m2(r.name)] = f"static_cast<float>({welford_m2(r.name)}_d{lane})"
                for r in loop.body:  # shifted by each column's first value, the mean from the sum (as the lanes)
                    if r.reduction_type == "welford":
                        t, mean = vtype(r.dtype), welford_mean(r.name)
                        lines.append(f"{indent}{t} {r.name}_shift[{self.TILE}] = {{}}, {r.name}_xs[{self.TILE}] = {{}};")
                        lines += self._first_point(r, None, f"{r.name}_shift{lane}", indent,
                                                   f"for (int64_t {last} = xb; {last} < xe; {last}++)")
                        cascaded = split is not None and r in wels
                        wmean = f"({mean}_d{lane} + {r.name}_shift{lane})" if cascaded else f"({mean}{lane} + {r.name}_shift{lane})"
                        xsum = (f"({r.name}_xs_d{lane} + {r.name}_xs{lane})" if cascaded
                                else f"static_cast<double>({r.name}_xs{lane})")
                        self.reductions[mean] = f"static_cast<{t}>({self._welford_mean(r.name, wmean, xsum)})"
                outer, block = blocked_nest(k.reduction_vars, k.reduction_ranges, split)
                olines, bindent = open_loops(outer, indent)
                rlines, rindent = open_loops(block, bindent)
                lines += olines + rlines
                for r in loop.body:
                    if r.reduction_type == "welford":
                        t = vtype(r.dtype)
                        lines.append(f"{rindent}{r.name}_n++;")
                        lines.append(f"{rindent}const {t} {r.name}_inv = static_cast<{t}>(1) / static_cast<{t}>({r.name}_n);")
                lines.append(f"{rindent}#pragma omp simd")
                lines.append(f"{rindent}for (int64_t {last} = xb; {last} < xe; {last}++) {{")
                scope = Scope(None, rindent + "  ")
                for r in loop.body:
                    v = self.emit(r.value, scope)
                    acc = f"{r.name}{lane}"
                    rt = r.reduction_type
                    if rt == "welford":
                        mean, m2 = f"{welford_mean(r.name)}{lane}", f"{welford_m2(r.name)}{lane}"
                        scope.lines.append(f"{scope.indent}{{ const {vtype(r.dtype)} y = {v} - {r.name}_shift{lane}, "
                                           f"d = y - {mean}; {mean} += d * {r.name}_inv; {m2} += d * (y - {mean}); "
                                           f"{r.name}_xs{lane} += {v}; }}")
                    elif rt in ("max", "min"):
                        cmp = ">" if rt == "max" else "<"
                        scope.lines.append(f"{scope.indent}{acc} = ({v} {cmp} {acc}) ? {v} : {acc};")
                        if r.value.dtype.is_floating_point:
                            scope.lines.append(f"{scope.indent}{r.name}_nan{lane} |= ({v} != {v});")
                    else:
                        op = {"sum": "+", "prod": "*", "any": "||", "all": "&&"}[rt]
                        scope.lines.append(f"{scope.indent}{acc} = {acc} {op} {v};")
                lines += scope.lines
                lines.append(f"{rindent}}}")
                lines += close_loops(len(block), bindent)
                if split is not None:
                    for r in sums:
                        lines += [f"{bindent}#pragma omp simd",
                                  f"{bindent}for (int64_t i = 0; i < xe - xb; i++) {{ {r.name}_d[i] += {r.name}[i]; "
                                  f"{r.name}[i] = 0; }}"]
                    for r in wels:
                        mean, m2 = welford_mean(r.name), welford_m2(r.name)
                        lines += [f"{bindent}for (int64_t i = 0; i < xe - xb; i++) {{ {r.name}_xs_d[i] += {r.name}_xs[i]; "
                                  f"{r.name}_xs[i] = 0; }}"]
                        lines += welford_merge([(mean, m2, f"{mean}_d", f"{m2}_d")], f"{r.name}_n", f"{r.name}_dn",
                                               "xe - xb", bindent)
                lines += close_loops(len(outer), indent)
            else:
                lines.append(f"{indent}for (int64_t {last} = xb; {last} < xe; {last}++) {{")
                scope = Scope(None, indent + "  ")
                for st in loop.body:
                    self._store(st, scope)
                lines += scope.lines
                lines.append(f"{indent}}}")
        for d in range(len(head), 0, -1):
            lines.append("  " * d + "}")
        lines.append("}")
        return "\n".join(lines)


def _static_below(work, threshold: int) -> bool:
    """Whether ``work`` (a sympy size) is a known integer below ``threshold``."""
    work = sympy.sympify(work)
    return bool(work.is_Integer) and int(work) < threshold


def is_column_reduction(k: FusedKernel) -> bool:
    """True for a kernel that only reduces (sum/prod/max/min/any/all/welford, stores after the
    reductions) where loads are contiguous in the innermost outer index but not in the
    innermost reduction index: walking the reduction innermost would stride memory."""
    if not k.reduction_ranges or not k.ranges:
        return False
    x, r = k.index_vars[-1], k.reduction_vars[-1]
    contiguous_x = contiguous_r = False
    for loop in k.loops:
        for st in loop.body:
            if loop.reduction != isinstance(st, Reduce):
                return False
            if isinstance(st, Reduce):
                if st.reduction_type not in ("sum", "prod", "max", "min", "any", "all", "welford"):
                    return False
                for load in _loads(st.value):
                    if load.indirect:
                        return False
                    index = sympy.expand(load.index)
                    contiguous_x |= index.coeff(x) == 1
                    # loads along r that do not move with x are broadcast over the tile
                    contiguous_r |= index.coeff(r) == 1 and index.coeff(x) != 0
    return contiguous_x and not contiguous_r


def _loads(value, seen=None):
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, Load):
        yield value
    elif isinstance(value, Op):
        for a in value.args:
            yield from _loads(a, seen)
    elif isinstance(value, Masked):
        yield from _loads(value.mask, seen)
        yield from _loads(value.body, seen)


def _subexpressions(value, out: dict, seen=None) -> dict:
    """Every Op/Masked node under ``value`` with its tree size."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return out
    seen.add(id(value))
    if isinstance(value, Op):
        for a in value.args:
            _subexpressions(a, out, seen)
        out[value] = 1 + sum(out.get(a, 0) for a in value.args)
    return out


def _replace(value, old, new, memo=None):
    memo = {} if memo is None else memo
    if value == old:
        return new
    if id(value) in memo:
        return memo[id(value)]
    out = value
    if isinstance(value, Op):
        args = tuple(_replace(a, old, new, memo) for a in value.args)
        if args != value.args:
            out = Op(value.name, args, value.dtype)
    elif isinstance(value, Masked):
        out = Masked(value.mask, _replace(value.body, old, new, memo), value.other, value.dtype)
    memo[id(value)] = out
    return out


_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
MAX_SEGMENTS = 4


def _index_expr(value):
    """An integer IR value as a sympy expression (index values, integer constants), else None."""
    if isinstance(value, IndexValue) and not value.dtype.is_floating_point:
        return sympy.sympify(value.expr)
    if isinstance(value, Constant) and not isinstance(value.value, bool) and isinstance(value.value, int):
        return sympy.Integer(value.value)
    return None


def _inner_comparison(value, var):
    """``(kind, p)`` when ``value`` compares two integer index values whose difference
    is ``+-var`` plus a constant: the comparison holds exactly for ``var < p`` (kind
    "lt") or for ``var >= p`` ("ge"); else None."""
    if not (isinstance(value, Op) and value.name in _FLIP and len(value.args) == 2):
        return None
    a, b = (_index_expr(x) for x in value.args)
    if a is None or b is None:
        return None
    d = sympy.expand(a - b)  # value is ``d <op> 0``
    name = value.name
    if d.coeff(var) == -1:
        d, name = -d, _FLIP[name]
    c = sympy.expand(d - var)
    if not c.is_Integer:
        return None
    c = int(c)  # var + c <op> 0
    if name == "lt":
        return "lt", -c
    if name == "le":
        return "lt", -c + 1
    if name == "gt":
        return "ge", -c + 1
    return "ge", -c


def _comparisons(value, var, out: dict, seen: set) -> None:
    if id(value) in seen:
        return
    seen.add(id(value))
    found = _inner_comparison(value, var)
    if found is not None:
        out[value] = found
    elif isinstance(value, Op):
        for a in value.args:
            _comparisons(a, var, out, seen)
    elif isinstance(value, Masked):
        for a in (value.mask, value.body, value.other):
            _comparisons(a, var, out, seen)


def inner_segments(stores, var, extent):
    """Stretches ``[(lo, hi, {comparison: Constant})]`` of the vector index ``var``
    over a static ``extent`` on which every comparison of ``var`` with a constant (a
    ``cat``'s or a padding's mask, ``rotate_half``) has one value; None when there is
    no such comparison that changes inside the range, or too many stretches.  The
    stores then run once per stretch with those comparisons as constants: no masked
    load is left in the loop, which GCC would not vectorize ("control flow in loop")."""
    if not sympy.sympify(extent).is_Integer:
        return None
    n = int(extent)
    found: dict = {}
    seen: set = set()
    for st in stores:
        _comparisons(st.value, var, found, seen)
    cuts = sorted({p for _, p in found.values() if 0 < p < n})
    if not cuts or len(cuts) >= MAX_SEGMENTS:
        return None
    bounds = [0] + cuts + [n]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        known = {cmp: Constant((hi <= p) if kind == "lt" else (lo >= p), torch.bool)
                 for cmp, (kind, p) in found.items()}
        out.append((lo, hi, known))
    return out


def substitute(value, known: dict, memo=None):
    """``value`` with each subtree in ``known`` replaced by its value there."""
    memo = {} if memo is None else memo
    if id(value) in memo:
        return memo[id(value)]
    out = known.get(value) if isinstance(value, Op) else None
    if out is None:
        out = value
        if isinstance(value, Op):
            args = tuple(substitute(a, known, memo) for a in value.args)
            if args != value.args:
                out = Op(value.name, args, value.dtype)
        elif isinstance(value, Masked):
            parts = (substitute(value.mask, known, memo), substitute(value.body, known, memo),
                     substitute(value.other, known, memo))
            if parts != (value.mask, value.body, value.other):
                out = Masked(*parts, value.dtype)
    memo[id(value)] = out
    return out


_EXPENSIVE = TRANSCENDENTAL | {"truediv", "sqrt", "rsqrt"}


TABLE_MAX = 4096  # entries of a per-column table (CppKernel._tabled)


def _table_safe(value, memo) -> bool:
    """Whether ``value`` can be computed for every point of the inner range outside
    the loop nest: direct loads only (indirect ones are checked in place), no masks."""
    key = id(value)
    if key not in memo:
        if isinstance(value, Load):
            memo[key] = not value.indirect
        elif isinstance(value, Op):
            memo[key] = all(_table_safe(a, memo) for a in value.args)
        else:
            memo[key] = isinstance(value, (Constant, IndexValue))
    return memo[key]


def _cost(values) -> int:
    """Rough cost of computing ``values`` once (transcendentals and division count 10)."""
    subs: dict = {}
    for v in values:
        _subexpressions(v, subs)
    return sum(10 if e.name in _EXPENSIVE else 1 for e in subs)


def reuse_across_loops(k: FusedKernel) -> FusedKernel:
    """Softmax's pattern: a reduction loop computes ``e = exp(x - max)`` and a later loop
    stores ``e / sum`` to ``out``.  Store ``e`` into ``out`` in the first loop and load it
    back in the later one instead of recomputing it (same dtype: bit-identical).  Valid
    here because a C++ outer point runs its loops in order; ``out`` must be written by
    that one store only and read nowhere else in the kernel."""
    loops = [Loop(lp.reduction, list(lp.body)) for lp in k.loops]
    dtypes = {b.name: b.dtype for b in k.buffers}
    loaded = {ld.buffer for lp in loops for st in lp.body for ld in _loads(st.value)}
    rvars = set(k.reduction_vars)
    for later in range(len(loops)):
        if not loops[later].reduction:
            continue
        for si, st in enumerate(loops[later].body):
            if (not isinstance(st, Store) or st.mode or st.indirect or st.buffer in loaded
                    or not (st.index.free_symbols & rvars)
                    or sum(1 for lp in loops for t in lp.body if isinstance(t, Store) and t.buffer == st.buffer) != 1):
                continue
            mine = _subexpressions(st.value, {})
            best = None
            for earlier in range(later):
                if not loops[earlier].reduction:
                    continue
                theirs = {}
                for t in loops[earlier].body:
                    _subexpressions(t.value, theirs)
                for e, size in mine.items():
                    if e in theirs and e.dtype == dtypes[st.buffer] and size > 1:
                        load = Load(st.buffer, st.index, dtypes[st.buffer])
                        cost = _cost([_replace(t.value, e, load) for t in loops[later].body])
                        if best is None or cost < best[2]:
                            best = (earlier, e, cost)
            if best is None:
                continue
            earlier, e, _ = best
            loops[earlier].body.append(Store(st.buffer, st.index, e))
            load = Load(st.buffer, st.index, dtypes[st.buffer])
            loops[later].body = [dataclasses.replace(t, value=_replace(t.value, e, load)) for t in loops[later].body]
            loaded.add(st.buffer)
    return dataclasses.replace(k, loops=loops)


def loop_counter(loop: Loop) -> str:
    """The prefix of a Welford loop's lane counters (its first ``welford`` Reduce's name)."""
    return next(f"{s.name}_n" for s in loop.body if isinstance(s, Reduce) and s.reduction_type == "welford")


_LANES_DEFINE = f"""#ifndef {CppKernel.LANES}
#ifdef __AVX512F__
#define {CppKernel.LANES} 64
#else
#define {CppKernel.LANES} 32
#endif
#endif
"""


def render_kernel(kernel: FusedKernel, sites: list | None = None) -> str:
    """The kernel's C++ source.  A kernel with indirect-index checks returns ``int`` (1:
    a check failed, see ``kiln_get_index_error``); the ``(op, dim)`` of its checks, by
    site number, are appended to ``sites``."""
    k = CppKernel(reuse_across_loops(kernel))
    source = k.render()
    if k.sites:
        head = f'extern "C" void {kernel.name}('
        assert source.startswith(head) and source.endswith("\n}"), "unexpected kernel layout"
        first = source.index("{\n") + 2
        source = (f'extern "C" int {kernel.name}(' + source[len(head):first] + "  kiln_index_error kiln_err = {};\n"
                  + source[first:-1] + "  return kiln_index_report(&kiln_err);\n}")
    if sites is not None:
        sites.extend(k.sites)
    return _LANES_DEFINE + source if CppKernel.LANES in source else source
