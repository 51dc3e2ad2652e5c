"""Sympy printers: size and index expressions as C++, Python (and Triton) source.

Sizes come from the ShapeEnv, so expressions use ``torch.utils._sympy.functions``
(FloorDiv, ModularIndexing, CeilDiv, PythonMod, Min/Max, PowByNatural, ToFloat, the
``OpaqueUnaryFn_*`` math functions...).  :class:`ExprPrinter` maps each of them to a few
target hooks (``floordiv``, ``mod``, ``minimum``, ``call``...); a target subclasses it and
fills in the hooks.  The Triton printer lives in ``codegen/triton``.
"""
from __future__ import annotations

import sympy
from sympy.printing.str import StrPrinter


class ExprPrinter(StrPrinter):
    """Prints integer and float sympy expressions through target hooks.

    Hooks: ``floordiv(a, b)`` (floor division), ``truncdiv(a, b)``, ``mod(a, b)`` (result
    has the sign of ``b``, as Python's ``%``), ``minimum(args)``, ``maximum(args)``,
    ``call(fn, args)`` for math functions (``sqrt``, ``floor``, ``ceil``, ``trunc``,
    ``round``, ``exp``, ``log``, ``sin``..., ``abs``, ``pow``), ``to_float(a)``,
    ``to_int(a)``, ``where(c, a, b)``, ``literal_float(x)``.  Arguments are already-printed
    strings; results must be parenthesised as needed (hooks wrap in parentheses).
    """

    printmethod = "_kiln_print"

    def paren(self, e) -> str:
        return f"({self._print(e)})"

    # ---- hooks every target defines
    def floordiv(self, a: str, b: str) -> str:
        raise NotImplementedError

    def truncdiv(self, a: str, b: str) -> str:
        raise NotImplementedError

    def mod(self, a: str, b: str) -> str:
        raise NotImplementedError

    def minimum(self, args: list[str]) -> str:
        raise NotImplementedError

    def maximum(self, args: list[str]) -> str:
        raise NotImplementedError

    def call(self, fn: str, args: list[str]) -> str:
        raise NotImplementedError

    def to_float(self, a: str) -> str:
        raise NotImplementedError

    def to_int(self, a: str) -> str:
        raise NotImplementedError

    def where(self, c: str, a: str, b: str) -> str:
        raise NotImplementedError

    def literal_float(self, x: float) -> str:
        return repr(float(x))

    # ---- sympy node types
    def _print_FloorDiv(self, e):
        return self.floordiv(self.paren(e.args[0]), self.paren(e.args[1]))

    def _print_CleanDiv(self, e):
        return self._print_FloorDiv(e)

    def _print_CeilDiv(self, e):
        a, b = self.paren(e.args[0]), self.paren(e.args[1])
        return f"(-{self.floordiv(f'(-{a})', b)})"

    def _print_ModularIndexing(self, e):
        x, div, mod = e.args
        inner = self.paren(x) if div == 1 else self.floordiv(self.paren(x), self.paren(div))
        return self.mod(inner, self.paren(mod))

    def _print_PythonMod(self, e):
        return self.mod(self.paren(e.args[0]), self.paren(e.args[1]))

    def _print_Mod(self, e):
        return self.mod(self.paren(e.args[0]), self.paren(e.args[1]))

    def _print_Min(self, e):
        return self.minimum([self._print(a) for a in e.args])

    def _print_Max(self, e):
        return self.maximum([self._print(a) for a in e.args])

    def _print_Abs(self, e):
        return self.call("abs", [self._print(e.args[0])])

    def _print_floor(self, e):
        return self.call("floor", [self._print(e.args[0])])

    def _print_ceiling(self, e):
        return self.call("ceil", [self._print(e.args[0])])

    def _print_FloorToInt(self, e):
        return self.to_int(self.call("floor", [self._print(e.args[0])]))

    def _print_CeilToInt(self, e):
        return self.to_int(self.call("ceil", [self._print(e.args[0])]))

    def _print_TruncToInt(self, e):
        return self.to_int(self.call("trunc", [self._print(e.args[0])]))

    def _print_TruncToFloat(self, e):
        return self.call("trunc", [self._print(e.args[0])])

    def _print_RoundToInt(self, e):
        return self.to_int(self.call("round", [self._print(e.args[0])]))

    def _print_ToFloat(self, e):
        return self.to_float(self._print(e.args[0]))

    def _print_IntTrueDiv(self, e):
        return f"({self.to_float(self.paren(e.args[0]))} / {self.to_float(self.paren(e.args[1]))})"

    def _print_FloatTrueDiv(self, e):
        return f"({self.paren(e.args[0])} / {self.paren(e.args[1])})"

    def _print_Identity(self, e):
        return self._print(e.args[0])

    def _print_Where(self, e):
        return self.where(*[self.paren(a) for a in e.args])

    def _print_PowByNatural(self, e):
        base, exp = e.args
        if isinstance(exp, sympy.Integer) and 0 <= int(exp) <= 8:
            return "(" + "*".join([self.paren(base)] * int(exp)) + ")" if int(exp) else "1"
        return self.to_int(self.call("pow", [self.to_float(self.paren(base)), self.to_float(self.paren(exp))]))

    def _print_FloatPow(self, e):
        return self.call("pow", [self._print(e.args[0]), self._print(e.args[1])])

    def _print_Pow(self, e):
        base, exp = e.args
        if exp == sympy.Rational(1, 2):
            return self.call("sqrt", [self._print(base)])
        if isinstance(exp, sympy.Integer):
            n = int(exp)
            if 0 < n <= 8:
                return "(" + "*".join([self.paren(base)] * n) + ")"
            if -8 <= n < 0:
                return f"({self.literal_float(1.0)} / (" + "*".join([self.to_float(self.paren(base))] * -n) + "))"
        return self.call("pow", [self.to_float(self._print(base)), self.to_float(self._print(exp))])

    def _print_Rational(self, e):
        return f"({self.literal_float(e.p)} / {self.literal_float(e.q)})"

    def _print_Half(self, e):
        return self._print_Rational(e)

    def _print_Float(self, e):
        return self.literal_float(float(e))

    def _print_Infinity(self, e):
        return self.literal_float(float("inf"))

    def _print_NegativeInfinity(self, e):
        return self.literal_float(float("-inf"))

    def _print_Relational(self, e):
        """``(a == b)``, ``(a <= b)``...: the same in Python, C++ and Triton."""
        return f"({self._print(e.lhs)} {e.rel_op} {self._print(e.rhs)})"

    def _print_Function(self, e):
        name = type(e).__name__
        if name.startswith("OpaqueUnaryFn_"):
            return self.call(name[len("OpaqueUnaryFn_"):], [self._print(e.args[0])])
        raise NotImplementedError(f"cannot print sympy function {name}")

    def _print_BooleanTrue(self, e):
        return "1"

    def _print_BooleanFalse(self, e):
        return "0"


class PythonPrinter(ExprPrinter):
    """Python source for the wrapper (``import math`` is in scope there)."""

    def floordiv(self, a, b):
        return f"({a} // {b})"

    def truncdiv(self, a, b):
        return f"int({a} / {b})"

    def mod(self, a, b):
        return f"({a} % {b})"

    def minimum(self, args):
        return f"min({', '.join(args)})"

    def maximum(self, args):
        return f"max({', '.join(args)})"

    def call(self, fn, args):
        if fn == "abs":
            return f"abs({args[0]})"
        if fn == "round":
            return f"round({args[0]})"
        return f"math.{fn}({', '.join(args)})"

    def to_float(self, a):
        return f"float({a})"

    def to_int(self, a):
        return f"int({a})"

    def where(self, c, a, b):
        return f"({a} if {c} else {b})"

    def literal_float(self, x):
        x = float(x)
        if x != x or x in (float("inf"), float("-inf")):
            return f"float('{x}')"
        return repr(x)

    # conditions (runtime asserts, SymBool outputs such as ``t.item() == 3``) as Python bools
    def _print_And(self, e):
        return "(" + " and ".join(self._print(a) for a in e.args) + ")"

    def _print_Or(self, e):
        return "(" + " or ".join(self._print(a) for a in e.args) + ")"

    def _print_Not(self, e):
        return f"(not {self._print(e.args[0])})"

    def _print_BooleanTrue(self, e):
        return "True"

    def _print_BooleanFalse(self, e):
        return "False"


class CppPrinter(ExprPrinter):
    """C++ for the CPU kernels: int64 index arithmetic, helpers from the kernel prelude."""

    def _print_Integer(self, e):
        v = int(e)
        return f"{v}LL" if abs(v) >= 2**31 else str(v)

    def floordiv(self, a, b):
        return f"kiln_floordiv({a}, {b})"

    def truncdiv(self, a, b):
        return f"({a} / {b})"

    def mod(self, a, b):
        return f"kiln_mod({a}, {b})"

    def minimum(self, args):
        out = args[0]
        for a in args[1:]:
            out = f"kiln::min<int64_t>({out}, {a})"
        return out

    def maximum(self, args):
        out = args[0]
        for a in args[1:]:
            out = f"kiln::max<int64_t>({out}, {a})"
        return out

    def call(self, fn, args):
        if fn == "abs":
            return f"kiln_abs({args[0]})"
        if fn == "round":
            return f"kiln::nearbyint({args[0]})"
        return f"kiln::{fn}({', '.join(args)})"

    def to_float(self, a):
        return f"static_cast<double>({a})"

    def to_int(self, a):
        return f"static_cast<int64_t>({a})"

    def where(self, c, a, b):
        return f"({c} ? {a} : {b})"

    def literal_float(self, x):
        x = float(x)
        if x != x:
            return "kiln::limits<double>::quiet_NaN()"
        if x in (float("inf"), float("-inf")):
            return ("-" if x < 0 else "") + "kiln::limits<double>::infinity()"
        return repr(x)


_python = PythonPrinter()
_cpp = CppPrinter()


def pexpr(e) -> str:
    """Python source of a sympy expression (or int)."""
    return _python.doprint(sympy.sympify(e))


def cexpr(e) -> str:
    """C++ source of a sympy expression (or int)."""
    return _cpp.doprint(sympy.sympify(e))
