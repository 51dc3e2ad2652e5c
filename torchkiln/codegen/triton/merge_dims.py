"""Merge adjacent iteration dimensions that every index expression walks contiguously.

A Triton kernel iterates a flat ``xindex`` and recovers ``x0, x1...`` with ``//`` and
``%``.  When every index expression of a kernel uses dims ``k`` and ``k+1`` only as
``c*range[k+1]*x_k + c*x_{k+1}`` (row-major contiguous, e.g. ``768*x0 + x1``), the two
dims are one dim of size ``range[k]*range[k+1]``: the kernel computes ``x_merged``
directly and drops a division and a modulo per access.  The flat order of the points is
unchanged, so launch grids and masks stay the same.  (TorchInductor simplifies loops the
same way.)
"""
from __future__ import annotations

import sympy

from .. import ir


def index_expressions(loops: list) -> list:
    """Every sympy expression in ``loops`` (of a fused kernel) that may mention index variables."""
    out: list = []
    seen: set = set()

    def value(v):
        if id(v) in seen:
            return
        seen.add(id(v))
        if isinstance(v, ir.Load):
            out.append(v.index)
            for ind in v.indirect:
                value(ind.value)
        elif isinstance(v, ir.IndexValue):
            out.append(v.expr)
        elif isinstance(v, ir.Op):
            for a in v.args:
                value(a)
        elif isinstance(v, ir.Masked):
            value(v.mask)
            value(v.body)

    for loop in loops:
        for s in loop.body:
            if isinstance(s, ir.Store):
                out.append(s.index)
                value(s.value)
                for ind in s.indirect:
                    value(ind.value)
            else:
                value(s.value)
                if s.index is not None:
                    out.append(s.index)
    return [sympy.sympify(e) for e in out]


def _mergeable(e, outer, inner, inner_range) -> bool:
    """``e`` is ``c*inner_range*outer + c*inner + rest`` with ``rest`` free of both."""
    if not ({outer, inner} & e.free_symbols):
        return True
    e = sympy.expand(e)
    c_out, c_in = e.coeff(outer), e.coeff(inner)
    rest = e - c_out * outer - c_in * inner
    if {outer, inner} & (rest.free_symbols | c_out.free_symbols | c_in.free_symbols):
        return False
    return sympy.expand(c_out - c_in * inner_range) == 0


def merge(variables: list, ranges: list, exprs: list, prefix: str):
    """Greedy merge from the innermost dim outwards.

    Returns ``(new_vars, new_ranges, subs)``: ``subs`` maps each original variable to
    its expression in the new ones (apply it to every index expression).
    """
    vars_, ranges_ = list(variables), list(ranges)
    subs = {v: v for v in variables}
    k = len(vars_) - 2
    while k >= 0:
        outer, inner, r_in = vars_[k], vars_[k + 1], ranges_[k + 1]
        if all(_mergeable(e, outer, inner, r_in) for e in exprs):
            new = sympy.Symbol(f"{prefix}m{k}", integer=True, nonnegative=True)
            step = {outer: sympy.Integer(0), inner: new}
            exprs = [e.xreplace(step) for e in exprs]
            # original vars in terms of the merged one (for expressions not yet rewritten)
            for v, e in subs.items():
                subs[v] = e.xreplace({outer: sympy.Integer(0), inner: new})
            vars_[k:k + 2] = [new]
            ranges_[k:k + 2] = [ranges_[k] * r_in]
        k -= 1
    return vars_, ranges_, subs
