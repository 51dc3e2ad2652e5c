"""Split reductions: a reduction with few outputs and long rows as two reductions.

A GPU kernel runs one program per block of outputs, so a reduction of a ``[4096, 768]``
gradient over its 4096 rows (a bias gradient), or of a batch-norm input over
``N*H*W`` per channel, has a few dozen programs for 132 SMs and each loops over the
whole row.  As TorchInductor's split reductions (``Reduction.num_splits``), the row is
cut into ``S`` chunks: a first reduction writes ``[S, *out]`` partial results (``S``
times the programs, each over a chunk), a second reduces them over the leading ``S``.
Only reduction types whose partial results combine with the same reduction (sum, prod,
max, min, any, all) and static sizes are split; argmax/argmin and welford stay whole.
"""
from __future__ import annotations

import functools
import operator

import sympy

from . import ir
from .nodes import Reduction, TensorBox

SPLITTABLE = frozenset({"sum", "prod", "max", "min", "any", "all"})
# stage-1 outputs wanted: enough programs for a GPU's SMs even at 64 outputs a program
TARGET_OUTPUTS = 16384
MIN_CHUNK = 256  # elements each stage-1 row reduces at least
MIN_RNUMEL = 4096  # shorter rows are never split
MAX_XNUMEL = 1024  # more outputs than this already fill the GPU
# fewer elements than this are read in a few us even unsplit: a second kernel's launch
# costs more where the step is launch-bound (resnet_cnn training on the H100: 32 more
# launches a step for 4 ms less GPU time made the step slower)
MIN_ELEMENTS = 1 << 20
MAX_SPLITS = 1024  # a full sum: 1024 partials of long rows beat 16384 short ones (12 vs ~8 us)


def num_splits(xnumel: int, rnumel: int) -> int:
    """``S`` for ``xnumel`` outputs of ``rnumel``-element rows: a power of two dividing
    ``rnumel``, at most ``TARGET_OUTPUTS / xnumel``, ``rnumel / MIN_CHUNK`` and ``MAX_SPLITS``; 1 when
    the reduction stays whole."""
    if xnumel <= 0 or xnumel > MAX_XNUMEL or rnumel < MIN_RNUMEL or xnumel * rnumel < MIN_ELEMENTS:
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


def maybe_split(red: Reduction) -> TensorBox:
    """``red`` boxed, as two reductions when ``num_splits`` says so (see module doc)."""
    static = [sympy.sympify(s) for s in list(red.size) + list(red.reduction_ranges)]
    if (red.reduction_type not in SPLITTABLE or not red.reduction_ranges or not enabled(red.device)
            or not all(s.is_Integer for s in static)):
        return TensorBox(red)
    xnumel = functools.reduce(operator.mul, [int(s) for s in red.size], 1)
    rranges = [int(s) for s in red.reduction_ranges]
    rnumel = functools.reduce(operator.mul, rranges, 1)
    splits = num_splits(xnumel, rnumel)
    if splits == 1:
        return TensorBox(red)
    return split(red, splits)


def split(red: Reduction, splits: int) -> TensorBox:
    """The two-stage form of ``red`` with ``splits`` chunks (``splits`` divides the
    reduction's numel): ``[splits, *size]`` partials in the accumulator dtype, then the
    reduction of those over dim 0 into ``red.dtype``."""
    rranges = [sympy.Integer(int(s)) for s in red.reduction_ranges]
    rnumel = functools.reduce(operator.mul, rranges, sympy.Integer(1))
    chunk = rnumel // splits
    inner = red.inner_fn

    def partial_fn(idx, ridx):
        flat = idx[0] * chunk + ridx[0]
        return inner(list(idx[1:]), ir.split_flat_index(flat, rranges) if len(rranges) > 1 else [flat])

    size = list(red.size)
    partial = TensorBox(Reduction([sympy.Integer(splits)] + size, [chunk], red.reduction_type, red.acc_dtype,
                                  red.acc_dtype, red.device, partial_fn))
    load = partial.make_loader()  # realizes the partials
    return TensorBox(Reduction(size, [sympy.Integer(splits)], red.reduction_type, red.dtype, red.acc_dtype,
                               red.device, lambda idx, ridx: load([ridx[0]] + list(idx))))
