"""Cascade summation for the C++ kernels' float reductions (docs/codegen.md).

A float32 accumulator that takes n points one after another (one per vector lane, or one
per column of a tiled column reduction) has an error growing with n, and stalls once the
sum is 2**24 times the values (2**32 ones summed to 2**28; ``(3, 2**24, 2).sum((0, 1))``
was off by 8.4e6).  Here the reduction nest runs in blocks of at most :data:`CASCADE`
points: each block is summed in float (vectorized, as before) from zero and added into a
double.  The block boundary is placed on one reduction dim (:func:`cascade_split`): the
dims inside it run whole, that dim in chunks, the dims outside it plainly, so a block is
a rectangular piece of the nest and its loops keep their ``omp simd`` form.  Welford
states (mean, M2) merge into double states per block with Chan et al.'s formula.
"""
from __future__ import annotations

import sympy

from ..printers import cexpr

#: points summed in float before the partial sum goes into a double: a 4096-point block
#: summed 16 lanes wide is 256 points per lane
CASCADE = 4096
#: rows of a tiled column reduction per block: there every column's float accumulator
#: takes one point per row, so a block of CASCADE rows was 4096 points in one float
#: (``(4096, 4096).sum(0)``: 13x eager's error, ``var(0)`` 820x)
COLUMN_CASCADE = 256
#: points a group of Welford lanes takes in float before merging into double states
#: (256 per lane at 64 lanes: the merge, a few double operations per lane, stays ~1% of the
#: updates)
WELFORD_BLOCK = 16384


def cascade_split(ranges, limit: int = CASCADE) -> tuple[int, int] | None:
    """``(j, chunk)``: the reduction nest over ``ranges`` in blocks of at most
    ``limit`` points, dim ``j`` in chunks of ``chunk`` indices, the dims inside
    it whole (all static: walking out from the innermost dim stops at the first symbolic
    one, which is then ``j`` with ``limit // inner`` per chunk); None where the whole
    nest is statically at most ``limit`` points (no blocks)."""
    inner = 1
    for j in range(len(ranges) - 1, -1, -1):
        r = sympy.sympify(ranges[j])
        if not r.is_Integer or int(r) * inner > limit:
            return j, max(1, limit // inner)
        inner *= int(r)
    return None


def blocked_nest(vars_, ranges, split):
    """``(outer, block)``: loop heads ``(var, start, end, step)`` of the loops around the
    blocks and of one block (see :func:`cascade_split`; ``split`` None: one block, the
    whole nest).  A chunked dim ``r`` has the outer head ``r_c`` and the block head
    ``r`` from ``r_c`` to ``r_e`` (``r_e`` set by :func:`open_loops`)."""
    heads = [(v, "0", cexpr(r), 1) for v, r in zip(vars_, ranges)]
    if split is None:
        return [], heads
    j, chunk = split
    if chunk == 1:
        return heads[:j + 1], heads[j + 1:]
    v, n = vars_[j], cexpr(ranges[j])
    return heads[:j] + [(f"{v}_c", "0", n, chunk)], [(v, f"{v}_c", f"{v}_e", 1)] + heads[j + 1:]


def open_loops(heads, indent: str, pragma: str | None = None) -> tuple[list[str], str]:
    """The opening lines of ``heads``' loops (``pragma`` before the first), and the
    indent inside them; a chunk loop's head is followed by its end ``r_e``."""
    lines = [f"{indent}{pragma}"] if pragma else []
    for v, start, end, step in heads:
        lines.append(f"{indent}for (int64_t {v} = {start}; {v} < {end}; {v} += {step}) {{" if step != 1 else
                     f"{indent}for (int64_t {v} = {start}; {v} < {end}; {v}++) {{")
        indent += "  "
        if step != 1:
            lines.append(f"{indent}const int64_t {v[:-2]}_e = ({end}) - {v} < {step} ? ({end}) : {v} + {step};")
    return lines, indent


def close_loops(n: int, indent: str) -> list[str]:
    """Closing braces of ``n`` loops opened at ``indent``."""
    return [indent + "  " * (d - 1) + "}" for d in range(n, 0, -1)]


def welford_merge(pairs, count: str, total: str, size: str, indent: str) -> list[str]:
    """Lines merging float Welford states (arrays of ``size`` entries, each having seen
    ``count`` points) into double states (``total`` points each) and zeroing them:
    ``pairs`` = [(mean, m2, double mean, double m2)].  Chan et al.'s pairwise formula:
    with ``f = count / (total + count)``, ``mean += d * f`` and
    ``m2 += m2' + d**2 * total * f`` for ``d = mean' - mean``."""
    lines = [f"{indent}{{",
             f"{indent}  const double kb = static_cast<double>({count}), kw = {total} + kb, kf = kb / kw, kg = {total} * kf;"]
    for mean, m2, dmean, dm2 in pairs:
        lines += [f"{indent}  #pragma omp simd",
                  f"{indent}  for (int64_t l = 0; l < {size}; l++) {{",
                  f"{indent}    const double d = static_cast<double>({mean}[l]) - {dmean}[l];",
                  f"{indent}    {dmean}[l] += d * kf; {dm2}[l] += static_cast<double>({m2}[l]) + d * d * kg;",
                  f"{indent}    {mean}[l] = 0; {m2}[l] = 0;",
                  f"{indent}  }}"]
    lines += [f"{indent}  {total} = kw; {count} = 0;", f"{indent}}}"]
    return lines
