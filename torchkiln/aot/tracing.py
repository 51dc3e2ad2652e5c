"""Trace the functionalized forward, or the joint forward+backward, into an ATen graph.

Both traces run ``make_fx`` over fake tensors (their ShapeEnv carries symbolic sizes
when inputs are dynamic) with a ``FunctionalTensorMode`` inside, so the graphs hold
only out-of-place ATen ops: mutations become fresh values returned by the graph (the
runtime wrapper writes them back), views are replayed from their bases.  The
decomposition table is the backend's (core ATen for the code generator, none for
"aot_eager").

Forward-graph outputs, in order: new values of mutated inputs, the user outputs, the
bases of outputs that view intermediates.  The joint graph takes ``(primals,
tangents)`` (placeholders ``primals_<i>``, ``tangents_<i>``) and returns those forward
outputs followed by one gradient per primal (``None`` where no gradient exists).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from .analysis import ViewAndMutationMeta, collect_intermediate_bases
from .fakes import tracing_context
from .functional import from_fun, functional_mode, is_checked_op, to_fun


def _functional_forward(fn: Callable, meta: ViewAndMutationMeta, f_args: list, clone_mutated: bool) -> list:
    """Run ``fn`` on functional tensors; return the forward-graph outputs (still functional)."""
    call_args = list(f_args)
    if clone_mutated:
        # A mutated input that autograd must see is cloned first, so that the in-place op
        # lands on a non-leaf and its gradient reaches the original value.
        for i, info in enumerate(meta.inputs):
            if info.mutates_data and info.requires_grad:
                call_args[i] = call_args[i].clone()
    outs = list(fn(*call_args))
    bases = collect_intermediate_bases(outs, call_args) if meta.num_intermediate_bases else []
    return [call_args[i] for i in meta.mutated_inputs] + outs + bases


def trace_forward(fn: Callable, meta: ViewAndMutationMeta, fake_args: list, fake_mode,
                  decompositions: Optional[dict] = None, keep_input_mutations: bool = False) -> torch.fx.GraphModule:
    """The inference graph: primals -> forward outputs (no autograd).

    ``keep_input_mutations``: data-only input mutations stay in the graph as a final
    ``aten.copy_`` into the input (for backends that want to do the write themselves)
    and the new value is not returned.
    """
    kept = [i for i in meta.mutated_inputs
            if keep_input_mutations and not (meta.inputs[i].mutates_metadata or meta.inputs[i].mutates_storage)]

    def inference(primals):
        with functional_mode():
            f_args = [to_fun(a) for a in primals]
            fw_outs = _functional_forward(fn, meta, f_args, clone_mutated=False)
        result = [from_fun(o) for o in fw_outs]
        for k, i in enumerate(meta.mutated_inputs):
            if i in kept:
                primals[i].copy_(result[k])
        drop = {meta.mutated_inputs.index(i) for i in kept}
        return [r for k, r in enumerate(result) if k not in drop]

    _drop_stale_unbacked_symbols(fake_mode)
    with torch.no_grad(), tracing_context(fake_mode):
        gm = make_fx(inference, decomposition_table=decompositions or {})(list(fake_args))
    return _cleanup(gm)


def trace_joint(fn: Callable, meta: ViewAndMutationMeta, fake_args: list, fake_mode,
                decompositions: Optional[dict] = None) -> torch.fx.GraphModule:
    """The joint graph: ``(primals, tangents) -> (*forward outputs, *grads)``.

    One tangent per differentiable forward output (contiguous, like the fakes in
    ``meta.fw_differentiable_fakes``).  Custom ``autograd.Function``s are traced
    through: their backward runs on fake tensors here.
    """
    diff_mask = meta.fw_output_differentiable()
    with fake_mode:
        tangents = [torch.empty(f.shape, dtype=f.dtype, device=f.device) for f in meta.fw_differentiable_fakes]

    def joint(primals, tangents):
        with functional_mode():
            f_args = [to_fun(a) for a in primals]
            f_tangents = [to_fun(t) for t in tangents]
            fw_outs = _functional_forward(fn, meta, f_args, clone_mutated=True)
            wrt = [a for a in f_args if isinstance(a, torch.Tensor) and a.requires_grad]
            diff_outs = [o for o, d in zip(fw_outs, diff_mask) if d]
            grads = []
            if wrt and diff_outs:
                grads = list(torch.autograd.grad(diff_outs, wrt, f_tangents, allow_unused=True))
            per_primal, it = [], iter(grads or [None] * len(wrt))
            for a in f_args:
                per_primal.append(next(it) if isinstance(a, torch.Tensor) and a.requires_grad else None)
        return [from_fun(o) for o in fw_outs] + [from_fun(g) for g in per_primal]

    _drop_stale_unbacked_symbols(fake_mode)
    with torch.enable_grad(), tracing_context(fake_mode, joint=True):
        gm = make_fx(joint, decomposition_table=decompositions or {})(list(fake_args), tangents)
    return _cleanup(gm)


def _drop_stale_unbacked_symbols(fake_mode) -> None:
    """Forget data-dependent sizes (``nonzero``, ``masked_select``, ``item``) made by
    capture's or the analysis' fake runs: make_fx binds the ones its own trace makes and
    raises on any other still pending.  A new epoch of the fake mode makes fake inputs
    forget the ``.item()``/``nonzero`` results they memoised, so this trace makes (and
    records where to bind) its own symbols."""
    shape_env = getattr(fake_mode, "shape_env", None)
    if shape_env is not None:
        shape_env.pending_fresh_unbacked_symbols.clear()
    if hasattr(fake_mode, "epoch"):
        fake_mode.epoch += 1


def _cleanup(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Flat calling convention; drop ``aten.detach``/``aten.alias`` (no-ops in a functional
    graph) and dead nodes."""
    gm.graph._codegen = torch.fx.graph.CodeGen()
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in (torch.ops.aten.detach.default, torch.ops.aten.alias.default):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    gm.graph.eliminate_dead_code(is_impure_node=lambda n: n.is_impure() or is_checked_op(n))
    gm.recompile()
    return gm
