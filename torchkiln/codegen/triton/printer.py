"""Sympy expressions (indices, sizes) as Triton source, inside a ``@triton.jit`` kernel.

Integer ``//`` and ``%`` in Triton truncate toward zero (C semantics), while the
ShapeEnv's ``FloorDiv`` floors and ``Mod``/``PythonMod``/``ModularIndexing`` take the
divisor's sign.  Where sympy proves both operands non-negative (index variables and
sizes are declared so) the printer uses the plain operators; otherwise it calls the
``kiln_floordiv`` / ``kiln_mod`` helpers of the kernel prelude.  Math functions of
SymInts (sqrt, sin, floor...) go through ``libdevice`` (a numpy stand-in under the
interpreter).
"""
from __future__ import annotations

import sympy

from ..printers import ExprPrinter


def _nonneg(e) -> bool:
    return bool(sympy.sympify(e).is_nonnegative)


class TritonPrinter(ExprPrinter):
    """Prints integer/float sympy expressions as Triton expressions."""

    def floordiv(self, a, b):
        return f"kiln_floordiv({a}, {b})"

    def truncdiv(self, a, b):
        return f"kiln_truncdiv({a}, {b})"

    def mod(self, a, b):
        return f"kiln_mod({a}, {b})"

    def minimum(self, args):
        out = args[0]
        for a in args[1:]:
            out = f"tl.minimum({out}, {a})"
        return out

    def maximum(self, args):
        out = args[0]
        for a in args[1:]:
            out = f"tl.maximum({out}, {a})"
        return out

    def call(self, fn, args):
        if fn == "abs":
            return f"tl.abs({args[0]})"
        if fn == "round":
            fn = "nearbyint"
        # libdevice has float32 and float64 overloads and no mixed or integer ones: a
        # Python-float literal is float32 in Triton and a SymInt is int64, so every
        # argument is made float64 (Python's float), e.g. ``libdevice.pow(s0, 0.5)``.
        return f"libdevice.{fn}({', '.join(self.to_float(a) for a in args)})"

    def to_float(self, a):
        return f"(tl.full([1], 0.0, tl.float64) + {a})"

    def to_int(self, a):
        return f"({a}).to(tl.int64)"

    def where(self, c, a, b):
        return f"tl.where({c}, {a}, {b})"

    def literal_float(self, x):
        x = float(x)
        if x != x:
            return 'float("nan")'
        if x in (float("inf"), float("-inf")):
            return f'float("{x}")'
        return repr(x)

    # Non-negative operands: plain operators (the common case for indices).
    def _print_FloorDiv(self, e):
        a, b = e.args
        if _nonneg(a) and _nonneg(b):
            return f"({self.paren(a)} // {self.paren(b)})"
        return super()._print_FloorDiv(e)

    def _print_ModularIndexing(self, e):
        x, div, mod = e.args
        if _nonneg(x) and _nonneg(div) and _nonneg(mod):
            inner = self.paren(x) if div == 1 else f"({self.paren(x)} // {self.paren(div)})"
            return f"({inner} % {self.paren(mod)})"
        return super()._print_ModularIndexing(e)

    def _print_PythonMod(self, e):
        a, b = e.args
        if _nonneg(a) and _nonneg(b):
            return f"({self.paren(a)} % {self.paren(b)})"
        return super()._print_PythonMod(e)

    _print_Mod = _print_PythonMod

    def _print_Relational(self, e):
        ops = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
        return f"({self.paren(e.lhs)} {ops[e.rel_op]} {self.paren(e.rhs)})"

    def _print_And(self, e):
        return "(" + " & ".join(self.paren(a) for a in e.args) + ")"

    def _print_Or(self, e):
        return "(" + " | ".join(self.paren(a) for a in e.args) + ")"

    def _print_Not(self, e):
        return f"(~{self.paren(e.args[0])})"


_printer = TritonPrinter()


def texpr(e) -> str:
    """Triton source of a sympy expression (or int)."""
    return _printer.doprint(sympy.sympify(e))
