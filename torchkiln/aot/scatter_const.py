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
static, the output contiguous, the fill is ``full``/``full_like``/``zeros_like`` of a Python number.
``where`` alone cannot report an out-of-range index, which eager's scatter raises
(torch.compile's ``scatter_upon_const_tensor`` pattern reports nothing: a bad index gives
a row with no value there).  So the index is first read back through
``gather(iota, dim, index)``: the same values, and an indirect load, whose bounds check
raises as eager does; it reads only the small index and fuses into the ``where``.
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


def _fold_row_sums(g: fx.Graph, onehot: fx.Node, index: fx.Node, value, dim: int, size: int, fake_mode) -> None:
    """``sum(onehot * s, [dim], keepdim=True)`` with ``s`` of extent 1 along ``dim`` (nll_loss's
    backward: the one-hot times the scaled output gradient, summed over the classes) has
    one non-zero term per row: it becomes ``where(0 <= index < size, value, 0) * s``, a
    pointwise value of the row's index, and the backward needs no reduction over the
    classes."""
    for mul in list(onehot.users):
        if mul.target is not aten.mul.Tensor or mul.kwargs or len(mul.args) != 2:
            continue
        s = mul.args[1] if mul.args[0] is onehot else mul.args[0]
        sval = s.meta.get("val") if isinstance(s, fx.Node) else None
        if s is onehot or not isinstance(sval, torch.Tensor) or sval.dtype != mul.meta["val"].dtype:
            continue
        nd = mul.meta["val"].dim()
        if sval.dim() == nd and sval.shape[dim] != 1:
            continue
        if sval.dim() > nd - dim - 1 and sval.dim() != nd:  # broadcast onto the reduced dim
            continue
        for red in list(mul.users):
            if red.target is not aten.sum.dim_IntList or red.kwargs or len(red.args) != 3 or red.args[2] is not True:
                continue
            dims = red.args[1]
            if not isinstance(dims, (list, tuple)) or [d % nd for d in dims] != [dim]:
                continue
            rval = red.meta["val"]
            if tuple(torch.broadcast_shapes(index.meta["val"].shape, sval.shape)) != tuple(rval.shape):
                continue
            with g.inserting_before(red):
                ok = _call(g, aten.bitwise_and.Tensor, (_call(g, aten.ge.Scalar, (index, 0), {}, fake_mode),
                                                        _call(g, aten.lt.Scalar, (index, size), {}, fake_mode)),
                           {}, fake_mode)
                consts = [_call(g, aten.scalar_tensor.default, (v,), dict(dtype=rval.dtype, device=rval.device),
                                fake_mode) for v in (value, 0)]
                row = _call(g, aten.mul.Tensor, (_call(g, aten.where.self, (ok, *consts), {}, fake_mode), s), {},
                            fake_mode)
            row.meta = {**red.meta, "val": row.meta["val"]}
            red.replace_all_uses_with(row)
            g.erase_node(red)


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
            rows = _call(g, aten.expand.default, (iota, list(out.shape)), {}, fake_mode)
            index = _call(g, aten.gather.default, (rows, dim, index), {}, fake_mode)  # bounds-checked
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
        if fill == 0:
            _fold_row_sums(g, where, index, value, dim, out.shape[dim], fake_mode)
        count += 1
    if count:
        gm.recompile()
    return count
