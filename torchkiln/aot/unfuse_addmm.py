"""A linear layer's ``addmm`` written as ``mm`` plus a bias ``add`` in the joint graph (CUDA).

cuBLAS's ``addmm`` (a bias epilogue) picks smaller tiles than its plain ``mm`` for the
same product (H100, BERT's fp32 linears: 64x64 vs 128x128).  For a forward-only graph the
lowering unfuses an ``addmm`` whose every use is pointwise (``codegen.lowering.
_prefer_unfused_addmm``): the bias add joins its readers' kernel.  In training the
``addmm`` result is usually also saved for the backward (a layer norm's or GELU's
backward reads it), so the lowering kept the ``addmm``: the saved value had to be written
whole.  Written as ``add(mm(a, b), bias)`` before the cut, the partitioner sees a matmul
(never recomputed, materialized anyway) and a cheap pointwise add: it saves the ``mm``
output and recomputes the add inside the backward's kernel that reads it, so neither pass
writes more than before and both forward GEMMs run as ``mm``.

Only where nothing but fused pointwise ops read the result (through views): an extern
reader (attention's q/k/v, a matmul) or a forward output needs the biased value in
memory, which ``addmm`` writes in one kernel.
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten

_DEVICES = {"cuda"}
_THROUGH = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
# Ops codegen computes inside a fused kernel (a reader of their input loads it there).
_FUSED = {"add", "sub", "mul", "div", "neg", "gelu", "gelu_backward", "relu", "threshold_backward", "silu",
          "silu_backward", "sigmoid", "sigmoid_backward", "tanh", "tanh_backward", "erf", "exp", "pow", "where",
          "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"}


def _fused_reads_only(n: fx.Node, depth: int = 0) -> bool:
    for u in n.users:
        if u.op == "call_function" and u.target in _THROUGH and depth < 2:
            if not _fused_reads_only(u, depth + 1):
                return False
        elif not (u.op == "call_function" and isinstance(u.target, torch._ops.OpOverload)
                  and u.target.overloadpacket.__name__ in _FUSED):
            return False
    return bool(n.users)


def _applies(n: fx.Node) -> bool:
    if n.op != "call_function" or n.target is not aten.addmm.default or n.kwargs or len(n.args) != 3:
        return False
    bias, val = n.args[0], n.meta.get("val")
    bval = bias.meta.get("val") if isinstance(bias, fx.Node) else None
    return (isinstance(val, torch.Tensor) and val.device.type in _DEVICES and isinstance(bval, torch.Tensor)
            and bval.dim() == 1 and bval.dtype == val.dtype and _fused_reads_only(n))


def unfuse_bias_addmm(joint_gm: fx.GraphModule) -> int:
    """Rewrite each ``addmm(bias, a, b)`` that :func:`_applies` to ``add(mm(a, b), bias)``;
    returns the count."""
    count = 0
    for n in list(joint_gm.graph.nodes):
        if not _applies(n):
            continue
        bias, a, b = n.args
        val = n.meta["val"]
        with joint_gm.graph.inserting_before(n):
            prod = joint_gm.graph.call_function(aten.mm.default, (a, b))
            prod.meta = {**n.meta, "val": val.new_empty(val.shape)}
            add = joint_gm.graph.call_function(aten.add.Tensor, (prod, bias))
            add.meta = dict(n.meta)
        n.replace_all_uses_with(add)
        joint_gm.graph.erase_node(n)
        count += 1
    if count:
        joint_gm.recompile()
    return count
