"""The decomposition table used before lowering: core ATen, plus ops whose pieces fuse
better than a library kernel (softmax, layer_norm, gelu... become reductions and
pointwise ops the scheduler fuses into one kernel)."""
from __future__ import annotations

import collections.abc
import functools

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

from .eager_refusals import REFUSALS, eager_refuses

aten = torch.ops.aten

EXTRA = [
    aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.gelu, aten.hardtanh, aten.elu,
    aten.leaky_relu, aten.native_dropout, aten.hardsigmoid, aten.hardswish, aten.native_group_norm,
    aten._native_batch_norm_legit_functional, aten._native_batch_norm_legit_no_training,
    aten.native_batch_norm,
]


# Core-ATen decompositions that must not be used.  The CPU flash-attention one returns the
# attention weights where the real op returns logsumexp; autograd saves that output for
# the op's own backward kernel, so decomposing it gives silently wrong gradients.  The op
# stays an extern kernel (its backward too), as torch's own backend does.
# index_add and index_copy decompose to index_put, which wraps negative indices where
# these ops raise (IndexError, as eager); they run as ATen kernels instead.  index_fill
# wraps negative indices but decomposes to index_copy, which raises on them: ATen too.
EXCLUDE = [aten._scaled_dot_product_flash_attention_for_cpu.default, aten.index_add.default, aten.index_copy.default,
           aten.index_fill.int_Scalar, aten.index_fill.int_Tensor]


def _batch_norm_inference_only(decomposition):
    """``_native_batch_norm_legit`` (eval-mode batch_norm in an inference graph) as
    pointwise ops that fuse with the following relu, instead of an extern kernel per
    layer; with ``training=True`` it stays the ATen op (the decomposition would write the
    running statistics in place)."""
    def decompose(input, weight, bias, running_mean, running_var, training, momentum, eps):
        if training:
            return NotImplemented
        return decomposition(input, weight, bias, running_mean, running_var, training, momentum, eps)
    return decompose


def _unless_eager_refuses(op, decomposition):
    """``op``'s decomposition, except for calls eager refuses: those stay ``op`` (its
    ATen kernel raises when the graph runs; the decomposition computed a value)."""
    def decompose(*args, **kwargs):
        if eager_refuses(op, args, kwargs):
            return NotImplemented
        return decomposition(*args, **kwargs)
    return decompose


def _bool_pow_bool(x, exponent):
    """``b ** True`` is ``b`` and ``b ** False`` all True, bool as eager's; the meta kernel
    takes the bool exponent for an int and says int64 (the graph returned int64)."""
    if x.dtype == torch.bool and isinstance(exponent, bool):
        return x.clone() if exponent else torch.ones_like(x)
    return NotImplemented


@functools.lru_cache(None)
def _table():
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(EXTRA))
    bn = aten._native_batch_norm_legit.default
    table[bn] = _batch_norm_inference_only(get_decompositions([bn])[bn])
    table[aten.pow.Tensor_Scalar] = _bool_pow_bool
    for op in EXCLUDE:
        table.pop(op, None)
    for op, decomposition in table.items():
        if op in REFUSALS or getattr(op, "overloadpacket", None) in REFUSALS:
            table[op] = _unless_eager_refuses(op, decomposition)
    return table


class DecompositionTable(collections.abc.Mapping):
    """``{OpOverload: decomposition}``, built on first lookup: building it walks torch's
    whole op registry (~0.2 s), which a compile served from the AOT autograd cache never
    needs.  ``cache_digest`` names the table for cache keys without building it: its
    contents follow from torch's version and torchkiln's source, which every key holds
    (:func:`torchkiln.cache.keys.versions`)."""

    cache_digest = "torchkiln.codegen.decompositions"

    def __getitem__(self, op):
        return _table()[op]

    def __iter__(self):
        return iter(_table())

    def __len__(self) -> int:
        return len(_table())

    def __bool__(self) -> bool:  # ``table or {}`` must not build it
        return True


def decompositions() -> DecompositionTable:
    """The table for AOT autograd (read-only; ``dict(...)`` it to change it)."""
    return DecompositionTable()
