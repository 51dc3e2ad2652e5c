"""Split reductions: a reduction with few outputs and long rows as two reductions.

A GPU kernel runs one program per block of outputs, so a reduction of a ``[4096, 768]``
gradient over its 4096 rows (a bias gradient), or of a batch-norm input over
``N*H*W`` per channel, has a few dozen programs for 132 SMs and each loops over the
whole row.  As TorchInductor's split reductions (``Reduction.num_splits``), the row is
cut into ``S`` chunks: a first reduction writes ``[S, *out]`` partial results (``S``
times the programs, each over a chunk), a second reduces them over the leading ``S``.
Reduction types whose partial results combine with the same reduction (sum, prod, max,
min, any, all) are split so; a Welford mean and M2 (var_mean: batch-norm statistics)
split into equal chunks whose means and M2s combine as in Chan's parallel variance:
mean = mean of the chunk means, M2 = sum of (chunk M2 + chunk size * (chunk mean -
mean)^2) (TorchInductor's split welford combines partial Welford states too).
Only static sizes are split; argmax/argmin stay whole.
"""
from __future__ import annotations

import functools
import operator

from typing import Callable

import sympy

from . import ir
from .nodes import Pointwise, Reduction, TensorBox, cast

SPLITTABLE = frozenset({"sum", "prod", "max", "min", "any", "all"})
# stage-1 outputs wanted: enough programs for a GPU's SMs even at 64 outputs a program
TARGET_OUTPUTS = 16384
MIN_CHUNK = 256  # elements each stage-1 row reduces at least
MIN_RNUMEL = 4096  # shorter rows are never split...
# ... but for column sums: 32 outputs a program, so a [2048, 768] layer-norm weight or bias
# gradient was 24 programs each looping over 2048 rows (H100: 56 us for its 12.6 MB, 225 GB/s)
MIN_RNUMEL_OUTER = 1024
MAX_XNUMEL = 1024  # more outputs than this already fill the GPU
# an outer reduction (a column sum: a bias gradient) runs 32 outputs a program
# (runtime.reduction_config): 2048 columns were 64 programs looping over all rows
# (nanoGPT's MLP bias gradient, 8192 x 2048 on the H100: 77 us, the data read in ~25)
MAX_XNUMEL_OUTER = 8192
# fewer elements than this are read in a few us even unsplit: a second kernel's launch
# costs more where the step is launch-bound (resnet_cnn training on the H100: 32 more
# launches a step for 4 ms less GPU time made the step slower)
MIN_ELEMENTS = 1 << 20
MAX_SPLITS = 1024  # a full sum: 1024 partials of long rows beat 16384 short ones (12 vs ~8 us)


def num_splits(xnumel: int, rnumel: int, outer: bool = False) -> int:
    """``S`` for ``xnumel`` outputs of ``rnumel``-element rows: a power of two dividing
    ``rnumel``, at most ``TARGET_OUTPUTS / xnumel``, ``rnumel / MIN_CHUNK`` and ``MAX_SPLITS``; 1 when
    the reduction stays whole.  ``outer``: the rows are strided and the outputs contiguous
    (a column sum), split up to ``MAX_XNUMEL_OUTER`` outputs and from ``MIN_RNUMEL_OUTER`` rows."""
    if (xnumel <= 0 or xnumel > (MAX_XNUMEL_OUTER if outer else MAX_XNUMEL)
            or rnumel < (MIN_RNUMEL_OUTER if outer else MIN_RNUMEL) or xnumel * rnumel < MIN_ELEMENTS):
        return 1
    limit = min(TARGET_OUTPUTS // xnumel, rnumel // MIN_CHUNK, MAX_SPLITS)
    splits = 1
    while splits * 2 <= limit and rnumel % (splits * 2) == 0:
        splits *= 2
    return splits if splits >= 2 else 1


def enabled(device) -> bool:
    """Split on CUDA devices (``codegen.config.split_reductions``, default on)."""
    from .config import config

    return device.type == "cuda" and bool(config.split_reductions)


def _splits_for(red: Reduction) -> int:
    """``num_splits`` of a static ``red`` on a device that splits; 1 otherwise."""
    static = [sympy.sympify(s) for s in list(red.size) + list(red.reduction_ranges)]
    if not red.reduction_ranges or not enabled(red.device) or not all(s.is_Integer for s in static):
        return 1
    xnumel = functools.reduce(operator.mul, [int(s) for s in red.size], 1)
    rnumel = functools.reduce(operator.mul, [int(s) for s in red.reduction_ranges], 1)
    if rnumel >= MIN_RNUMEL and xnumel <= MAX_XNUMEL:
        return num_splits(xnumel, rnumel)
    return num_splits(xnumel, rnumel, _outer(red))


def _outer(red: Reduction) -> bool:
    """Whether some load of ``red`` is contiguous in its innermost output dim and strided
    in its innermost reduced dim (as the Triton kernel's ``outer_reduction``)."""
    xs = ir.index_vars("x", len(red.size))
    rs = ir.index_vars("r", len(red.reduction_ranges))
    kept = [v for v, n in zip(xs, red.size) if n != 1]
    reduced = [v for v, n in zip(rs, red.reduction_ranges) if n != 1]
    if not kept or not reduced:
        return False
    x_in, r_in = kept[-1], reduced[-1]
    seen, todo = set(), [red.inner_fn(list(xs), list(rs))]
    while todo:
        v = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, ir.Load):
            e = sympy.expand(v.index)
            if e.coeff(x_in) == 1 and r_in in e.free_symbols and e.coeff(r_in) != 1:
                return True
        elif isinstance(v, ir.Op):
            todo.extend(v.args)
        elif isinstance(v, ir.Masked):
            todo.extend((v.mask, v.body))
    return False


def maybe_split(red: Reduction) -> TensorBox:
    """``red`` boxed, as two reductions when ``num_splits`` says so (see module doc)."""
    splits = _splits_for(red) if red.reduction_type in SPLITTABLE else 1
    return TensorBox(red) if splits == 1 else split(red, splits)


def maybe_split_welford(mean: Reduction, m2: Reduction) -> tuple[TensorBox, TensorBox]:
    """The ``welford_mean`` and ``welford_m2`` Reductions of one value (lowering's
    var_mean), boxed, or in their two-stage form when ``num_splits`` says so: chunk
    means and M2s (one stage-1 kernel, the scheduler shares their Welford Reduce), then
    per output mean = sum of the chunk means / S and M2 = sum over chunks of (chunk M2 +
    chunk size * (chunk mean - mean)^2) (one stage-2 kernel)."""
    splits = _splits_for(mean)
    if splits == 1:
        return TensorBox(mean), TensorBox(m2)
    size, acc, n = list(mean.size), mean.acc_dtype, sympy.Integer(splits)
    rnumel = functools.reduce(operator.mul, [sympy.Integer(int(s)) for s in mean.reduction_ranges], sympy.Integer(1))
    means, m2s = _partials(mean, splits), _partials(m2, splits)
    total = TensorBox(Reduction(size, [n], "sum", acc, acc, mean.device,
                                lambda idx, ridx: means([ridx[0]] + list(idx))))
    mean_of = TensorBox(Pointwise(size, acc, mean.device, lambda idx, ld=total.make_loader(): ir.Op(
        "truediv", (ld(idx), ir.Constant(float(splits), acc)), acc)))
    mean_ld = mean_of.make_loader()
    chunk = ir.Constant(float(rnumel // splits), acc)

    def m2_term(idx, ridx):
        dev = ir.Op("sub", (means([ridx[0]] + list(idx)), mean_ld(idx)), acc)
        spread = ir.Op("mul", (chunk, ir.Op("mul", (dev, dev), acc)), acc)
        return ir.Op("add", (m2s([ridx[0]] + list(idx)), spread), acc)

    m2_total = TensorBox(Reduction(size, [n], "sum", acc, acc, mean.device, m2_term))
    return (TensorBox(Pointwise(size, mean.dtype, mean.device, lambda idx, ld=mean_ld: cast(ld(idx), mean.dtype))),
            TensorBox(Pointwise(size, m2.dtype, m2.device,
                                lambda idx, ld=m2_total.make_loader(): cast(ld(idx), m2.dtype))))


def _partials(red: Reduction, splits: int) -> Callable:
    """The loader of ``[splits, *size]`` partial results of ``red`` (its reduction type,
    in its accumulator dtype) over ``splits`` equal chunks of its rows; realizes them."""
    rranges = [sympy.Integer(int(s)) for s in red.reduction_ranges]
    chunk = functools.reduce(operator.mul, rranges, sympy.Integer(1)) // splits
    inner = red.inner_fn

    def partial_fn(idx, ridx):
        flat = idx[0] * chunk + ridx[0]
        return inner(list(idx[1:]), ir.split_flat_index(flat, rranges) if len(rranges) > 1 else [flat])

    return TensorBox(Reduction([sympy.Integer(splits)] + list(red.size), [chunk], red.reduction_type, red.acc_dtype,
                               red.acc_dtype, red.device, partial_fn)).make_loader()


def split(red: Reduction, splits: int) -> TensorBox:
    """The two-stage form of ``red`` with ``splits`` chunks (``splits`` divides the
    reduction's numel): ``[splits, *size]`` partials in the accumulator dtype, then the
    reduction of those over dim 0 into ``red.dtype``."""
    load = _partials(red, splits)
    return TensorBox(Reduction(list(red.size), [sympy.Integer(splits)], red.reduction_type, red.dtype, red.acc_dtype,
                               red.device, lambda idx, ridx: load([ridx[0]] + list(idx))))
