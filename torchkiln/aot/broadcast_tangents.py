"""Tangents that arrive as an expanded scalar.

``out.sum().backward()`` hands the backward ``ones.expand(out.shape)``: one value, every
stride 0.  The backward graph was traced with contiguous tangents; making such a tangent
contiguous costs a full-size allocation and fill per backward that eager never pays
(its kernels read the expanded tensor).  Where only pointwise ops and reductions read a
tangent, the backward is compiled once more with that tangent's stride-0 layout
(:func:`with_broadcast_tangents`) and gets the expanded tensor itself.
"""
from __future__ import annotations

import torch

BROADCAST_TANGENT_MIN_NUMEL = 4096


def is_broadcast_scalar(g: torch.Tensor) -> bool:
    """``ones.expand(shape)`` and the like: one value seen through stride-0 dims only, with
    at least ``BROADCAST_TANGENT_MIN_NUMEL`` elements.  Eager's kernels read such a tangent
    in place; materializing it contiguously costs a full-size allocation and fill per
    backward (below the threshold, less than compiling a second backward)."""
    return (g.numel() >= BROADCAST_TANGENT_MIN_NUMEL
            and all(s == 0 or n == 1 for n, s in zip(g.shape, g.stride())))


_VIEWS = frozenset("view _unsafe_view reshape permute t transpose expand unsqueeze squeeze slice select alias "
                   "as_strided".split())
_REDUCTIONS = frozenset("sum mean amax amin prod var var_mean".split())


def broadcast_positions(bw_gm: torch.fx.GraphModule) -> frozenset:
    """Tangents that may reach the backward as an expanded scalar: those read only by
    pointwise ops and reductions (through views), which a code generator can read at
    stride 0.  A tangent that reaches a matmul or any other ATen kernel is made
    contiguous first: such a kernel would copy a stride-0 operand itself, on every call."""
    ok = set()
    tangents = [n for n in bw_gm.graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")]
    for i, t in enumerate(tangents):
        stack, fine = list(t.users), True
        while stack and fine:
            n = stack.pop()
            target = getattr(n.target, "overloadpacket", None)
            name = target.__name__ if target is not None else ""
            if n.op == "output":
                fine = False  # a gradient that is the tangent itself: give autograd a real tensor
            elif name in _VIEWS:
                stack.extend(n.users)
            elif not (name in _REDUCTIONS or (isinstance(n.target, torch._ops.OpOverload)
                                              and torch.Tag.pointwise in n.target.tags)):
                fine = False
        if fine:
            ok.add(i)
    return frozenset(ok)


def with_broadcast_tangents(bw_gm: torch.fx.GraphModule, positions: tuple) -> torch.fx.GraphModule:
    """A copy of ``bw_gm`` whose tangents at ``positions`` are expanded scalars (stride 0)."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(bw_gm.graph, {})
    graph.output(out)
    tangents = [n for n in graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")]
    for i in positions:
        val = tangents[i].meta["val"]
        tangents[i].meta = {**tangents[i].meta, "val": val.as_strided(val.shape, [0] * val.dim())}
    return torch.fx.GraphModule(bw_gm, graph)
