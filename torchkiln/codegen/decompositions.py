"""The decomposition table used before lowering: core ATen, plus ops whose pieces fuse
better than a library kernel (softmax, layer_norm, gelu... become reductions and
pointwise ops the scheduler fuses into one kernel)."""
from __future__ import annotations

import functools

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

aten = torch.ops.aten

EXTRA = [
    aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.gelu, aten.hardtanh, aten.elu,
    aten.leaky_relu, aten.native_dropout, aten.hardsigmoid, aten.hardswish, aten.native_group_norm,
    aten._native_batch_norm_legit_functional, aten._native_batch_norm_legit_no_training,
    aten.native_batch_norm,
]


@functools.lru_cache(None)
def _table():
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(EXTRA))
    return table


def decompositions() -> dict:
    """``{OpOverload: decomposition}`` for AOT autograd (a fresh dict each call)."""
    return dict(_table())
