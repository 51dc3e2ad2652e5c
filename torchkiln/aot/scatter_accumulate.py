"""``a + index_put(zeros, indices, values, accumulate=True)`` written as ``index_put(a, indices, values, True)``.

A tied word embedding (BERT's, GPT-2's and T5's input embedding is the LM head's weight)
gets two gradients that autograd adds: the head's matmul ``a`` and the embedding's
backward, which decomposes to an accumulating ``index_put`` into a zero-filled tensor the
size of the whole vocabulary.  As written, a step fills the zeros (2048 x 128 fp32 on the
suite's hf_bert: 44 us), scatters into them, and adds the two (107 us).  Scattering the
embedding rows straight into ``a`` is one pass over the looked-up rows only; codegen then
scatters into the matmul's own output, which nothing else reads
(:func:`torchkiln.codegen.lowering._fresh_copy`).

Only where it means the same thing: ``add.Tensor`` without ``alpha`` of the two, no
broadcasting and no type promotion (``a``, the scatter and the sum have one shape and
dtype), the zeros read by the scatter only and the scatter by the add only, and the
result's strides those of the add's.  The sums differ only in their order (``a`` plus
each row in turn rather than ``a`` plus the rows' total), as any reassociation does; a
``-0.0`` of ``a`` no row hits stays ``-0.0`` where ``-0.0 + 0.0`` gives ``+0.0``.

``a`` is often a permute of a permute (the head's weight gradient transposed twice, back
to the matmul's layout): such a chain that composes to the identity is read through, so
codegen sees the matmul itself.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from .scatter_const import _fill_value

aten = torch.ops.aten

_INDEX_PUT = (aten.index_put.default, aten._unsafe_index_put.default)


def _accumulating_scatter_into_zeros(n) -> bool:
    if not isinstance(n, fx.Node) or n.op != "call_function" or n.target not in _INDEX_PUT or n.kwargs:
        return False
    if len(n.args) != 4 or n.args[3] is not True or len(n.users) != 1:
        return False
    base = n.args[0]
    return _fill_value(base) == 0 and len(base.users) == 1


def _through_identity_permutes(a: fx.Node) -> fx.Node:
    """``a`` itself, or the tensor a chain of permutes ending in ``a`` leaves in place."""
    perm, node = None, a
    while node.op == "call_function" and node.target is aten.permute.default:
        dims = list(node.args[1])
        perm = dims if perm is None else [dims[p] for p in perm]
        node = node.args[0]
        if perm == list(range(len(perm))):
            return node
    return a


def rewrite_accumulate_into_addend(gm: fx.GraphModule) -> int:
    """Rewrite every matching ``add`` of ``gm`` in place; returns how many."""
    count = 0
    g = gm.graph
    for n in list(g.nodes):
        if n.op != "call_function" or n.target is not aten.add.Tensor or n.kwargs or len(n.args) != 2:
            continue
        x, y = n.args
        put, a = (y, x) if _accumulating_scatter_into_zeros(y) else (x, y)
        if not _accumulating_scatter_into_zeros(put) or not isinstance(a, fx.Node) or a is put:
            continue
        out, pval, aval = n.meta.get("val"), put.meta.get("val"), a.meta.get("val")
        if not all(isinstance(v, torch.Tensor) for v in (out, pval, aval)):
            continue
        if not (aval.shape == pval.shape == out.shape and aval.dtype == pval.dtype == out.dtype):
            continue
        zeros, indices, values, _ = put.args
        base = _through_identity_permutes(a)
        fake_mode = out.fake_mode if hasattr(out, "fake_mode") else pval.fake_mode
        args = (base, indices, values, True)
        with fake_mode:
            val = put.target(*fx.node.map_arg(args, lambda m: m.meta["val"]))
        if val.stride() != out.stride():
            continue
        with g.inserting_before(n):
            new = g.call_function(put.target, args)
        new.meta = {**n.meta, "val": val}
        n.replace_all_uses_with(new)
        for dead in (n, put, zeros):
            g.erase_node(dead)
        while a is not base and not a.users:
            nxt = a.args[0]
            g.erase_node(a)
            a = nxt
        count += 1
    if count:
        gm.recompile()
    return count
