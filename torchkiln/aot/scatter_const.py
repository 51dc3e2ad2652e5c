"""Scatter of one value into a constant-filled tensor, written as a pointwise ``where``.

``nll_loss``'s backward (and so ``cross_entropy``'s) decomposes to
``scatter(full_like(logp, 0), 1, target[:, None], -1.0)``: a one-hot matrix the size of
the logits (4096 x 50257 fp32 for GPT-2: 0.8 GB) that is filled, scattered into, and
then read by a pointwise multiply.  A scatter is neither pointwise nor recomputable, so
the partitioner had to compute it in the forward and save it for the backward.

Rewritten as ``where(iota(size[dim]) == index, value, fill)`` (the iota shaped to
broadcast along ``dim``) it is a pointwise function of the small index: the
partitioner recomputes it in the backward and codegen fuses it into the kernel that
reads it, so no full-size tensor is written for it at all.  torch.compile does the same
in its post-grad ``scatter_upon_const_tensor`` pattern.

Only rewritten when it means the same thing: the index has extent 1 along ``dim`` and
the output's extent along every other dim (each row gets exactly one value), sizes are
static, the output contiguous, the fill is ``full``/``full_like``/``zeros_like`` of a Python number.  As in
torch.compile's pattern, an out-of-range index is not reported (eager's scatter raises):
the row then gets no value.
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten, prims = torch.ops.aten, torch.ops.prims

_FILLS = {aten.full_like.default: 1, aten.full.default: 1, aten.zeros_like.default: None}


def _fill_value(n) -> object:
    """The Python number ``n`` is filled with, or None if it is not a constant fill."""
    if not isinstance(n, fx.Node) or n.op != "call_function" or n.target not in _FILLS:
        return None
    pos = _FILLS[n.target]
    value = 0 if pos is None else (n.args[pos] if len(n.args) > pos else n.kwargs.get("fill_value"))
    return value if isinstance(value, (int, float, bool)) else None


def _applies(n: fx.Node):
    """(dim, fill) when ``n`` is a scatter of one value into a constant, each row once."""
    if n.op != "call_function" or n.target is not aten.scatter.value or n.kwargs:
        return None
    base, dim, index, value = n.args
    fill = _fill_value(base)
    out, idx = n.meta.get("val"), index.meta.get("val") if isinstance(index, fx.Node) else None
    if fill is None or not isinstance(value, (int, float, bool)) or out is None or idx is None:
        return None
    if not all(isinstance(s, int) for s in (*out.shape, *idx.shape)) or idx.dim() != out.dim() or out.dim() == 0:
        return None
    if not out.is_contiguous():  # where's result is contiguous: keep the graph's strides
        return None
    dim = dim % out.dim()
    if idx.shape[dim] != 1 or any(idx.shape[d] != out.shape[d] for d in range(out.dim()) if d != dim):
        return None
    return dim, fill


def _call(graph: fx.Graph, target, args, kwargs, fake_mode):
    node = graph.call_function(target, args, kwargs)
    with fake_mode:
        fargs = [a.meta["val"] if isinstance(a, fx.Node) else a for a in args]
        node.meta["val"] = target(*fargs, **kwargs)
    return node


def rewrite_scatter_of_constant(gm: fx.GraphModule) -> int:
    """Rewrite every matching ``scatter.value`` of ``gm`` in place; returns how many."""
    count = 0
    for n in list(gm.graph.nodes):
        match = _applies(n)
        if match is None:
            continue
        dim, fill = match
        _, _, index, value = n.args
        out, idx = n.meta["val"], index.meta["val"]
        fake_mode = out.fake_mode if hasattr(out, "fake_mode") else idx.fake_mode
        g = gm.graph
        with g.inserting_before(n):
            iota = _call(g, prims.iota.default, (out.shape[dim],),
                         dict(start=0, step=1, dtype=idx.dtype, device=idx.device, requires_grad=False), fake_mode)
            shape = [1] * out.dim()
            shape[dim] = out.shape[dim]
            iota = _call(g, aten.view.default, (iota, shape), {}, fake_mode)
            hit = _call(g, aten.eq.Tensor, (iota, index), {}, fake_mode)
            consts = [_call(g, aten.scalar_tensor.default, (v,), dict(dtype=out.dtype, device=out.device), fake_mode)
                      for v in (value, fill)]
            where = _call(g, aten.where.self, (hit, *consts), {}, fake_mode)
        where.meta = {**n.meta, "val": where.meta["val"]}
        base = n.args[0]
        n.replace_all_uses_with(where)
        g.erase_node(n)
        if not base.users:
            g.erase_node(base)
        count += 1
    if count:
        gm.recompile()
    return count
