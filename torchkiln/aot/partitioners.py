"""Partitioners: split a joint graph into a forward graph and a backward graph.

A partitioner is ``partition_fn(joint_gm, joint_inputs, *, num_fwd_outputs) ->
(fw_gm, bw_gm)``, as torch.compile's.  The joint graph's placeholders are
``primals_*`` then ``tangents_*``; its outputs are ``num_fwd_outputs`` forward
outputs, then one gradient per primal (``None`` allowed).

The forward graph returns ``(*forward outputs, *saved tensors, *saved SymInts)``; the
backward graph takes ``(*saved SymInts, *saved tensors, *tangents)`` and returns the
gradients.  Sizes the backward needs travel as SymInt outputs of the forward.

``default_partition`` saves every forward value the backward uses.
``min_cut_rematerialization_partition`` chooses the saved set by a minimum cut
(networkx max-flow) on the graph weighted by bytes: cheap pointwise/view ops may be
recomputed in the backward from a smaller saved set; matmuls, convolutions,
reductions and random ops are never recomputed.  It merges repeated computations of the
joint graph first (aot/cse.py), so that a value both passes compute (``sigmoid(x)`` of
``silu`` and of its backward) is saved or recomputed once.
"""
from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx
import sympy
import torch.utils._pytree as pytree
from torch.fx.experimental.symbolic_shapes import resolve_unbacked_bindings

from .cse import cse_graph, output_storages
from .fakes import shape_env_of
from .scatter_accumulate import rewrite_accumulate_into_addend
from .scatter_const import rewrite_scatter_of_constant
from .unfuse_addmm import unfuse_bias_addmm

aten = torch.ops.aten


def _is_primal(n: fx.Node) -> bool:
    return n.op == "placeholder" and n.name.startswith("primals")


def _is_tangent(n: fx.Node) -> bool:
    return n.op == "placeholder" and n.name.startswith("tangents")


def _is_sym(n: fx.Node) -> bool:
    return isinstance(n.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


def _outputs(gm: fx.GraphModule):
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return list(out.args[0])


def _ancestors(nodes, stop=()) -> set:
    seen, stack = set(), [n for n in nodes if isinstance(n, fx.Node)]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n not in stop:
            stack.extend(n.all_input_nodes)
    return seen


def _tangent_dependent(gm: fx.GraphModule) -> set:
    dep = set()
    for n in gm.graph.nodes:
        if _is_tangent(n) or any(a in dep for a in n.all_input_nodes):
            dep.add(n)
    return dep


def extract_graph(joint: fx.Graph, inputs: list, outputs: list) -> fx.GraphModule:
    """A new graph computing ``outputs`` from ``inputs`` (nodes of ``joint``); every other
    node it needs is copied.  Raises ``RuntimeError`` if a needed placeholder is not an input."""
    g = fx.Graph()
    env = {}
    for n in inputs:
        env[n] = g.placeholder(n.name)
        env[n].meta = dict(n.meta)
    needed = _ancestors(outputs, stop=set(inputs))
    for n in joint.nodes:
        if n in env or n not in needed or n.op == "output":
            continue
        if n.op == "placeholder":
            raise RuntimeError(f"partition error: {n.name} is needed but not an input of the extracted graph")
        env[n] = g.node_copy(n, lambda a: env[a])
    g.output(tuple(env[o] if isinstance(o, fx.Node) else o for o in outputs))
    return g


def _module(owner: fx.GraphModule, g: fx.Graph) -> fx.GraphModule:
    gm = fx.GraphModule(owner, g)
    gm.graph.lint()
    return gm


def _split(joint_gm: fx.GraphModule, num_fwd_outputs: int, saved: list):
    outs = _outputs(joint_gm)
    fwd_outs, grads = outs[:num_fwd_outputs], outs[num_fwd_outputs:]
    primals = [n for n in joint_gm.graph.nodes if _is_primal(n)]
    tangents = [n for n in joint_gm.graph.nodes if _is_tangent(n)]
    saved_syms = [n for n in saved if _is_sym(n)]
    saved_tensors = [n for n in saved if not _is_sym(n)]
    bw = extract_graph(joint_gm.graph, saved_syms + saved_tensors + tangents, grads)
    extra = _unbacked_symbols_to_save(joint_gm, bw)
    if extra:
        saved_syms = saved_syms + [n for n in extra if n not in saved_syms]
        bw = extract_graph(joint_gm.graph, saved_syms + saved_tensors + tangents, grads)
    fw = extract_graph(joint_gm.graph, primals, fwd_outs + saved_tensors + saved_syms)
    return _module(joint_gm, fw), _module(joint_gm, bw)


def _unbacked_symbols_to_save(joint_gm: fx.GraphModule, bw: fx.Graph) -> list:
    """Joint-graph nodes holding the data-dependent sizes (u0 = x.item(), a nonzero's
    row count...) that the backward's tensors are sized by but cannot read off one of
    its inputs (``f32[u0 + u1]``): the forward returns them as SymInts.  A size read
    from a tensor op's result gets a ``sym_size`` node in the joint graph."""
    bound, needed = set(), set()
    for n in bw.nodes:
        val = n.meta.get("val")
        exprs = []
        for leaf in pytree.tree_leaves(val):
            if isinstance(leaf, torch.Tensor):
                exprs += [s.node.expr if isinstance(s, torch.SymInt) else s for s in (*leaf.shape, *leaf.stride())]
            elif isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                exprs.append(leaf.node.expr)
        if n.op == "placeholder":
            bound.update(e for e in exprs if isinstance(e, sympy.Symbol))
        for e in exprs:
            if isinstance(e, sympy.Basic):
                needed.update(s for s in e.free_symbols if s.name.startswith("u"))
    missing = needed - bound
    if not missing:
        return []
    out = []
    for n in list(joint_gm.graph.nodes):
        bindings = n.meta.get("unbacked_bindings")
        if not bindings:
            continue
        shape_env = shape_env_of(n.meta.get("val"))
        for sym, path in resolve_unbacked_bindings(shape_env, bindings).items():
            if sym in missing:
                out.append(_node_at(joint_gm.graph, n, path))
                missing.discard(sym)
    return out


def _node_at(graph: fx.Graph, node: fx.Node, path) -> fx.Node:
    """A node (added after ``node`` when needed) holding the value at ``path`` of its result."""
    from torch.fx.experimental.symbolic_shapes import CallMethodKey
    from torch.utils._pytree import SequenceKey

    cur, val, keys = node, node.meta.get("val"), list(path)
    while keys:
        key = keys.pop(0)
        if isinstance(key, SequenceKey) and not isinstance(val, torch.Tensor):
            target, args, val = operator.getitem, (cur, key.idx), val[key.idx]
        elif isinstance(key, CallMethodKey) and key.name in ("size", "stride") and keys and isinstance(keys[0], SequenceKey):
            dim = keys.pop(0).idx
            target = torch.ops.aten.sym_size.int if key.name == "size" else torch.ops.aten.sym_stride.int
            args, val = (cur, dim), getattr(val, key.name)(dim)
        else:
            raise RuntimeError(f"partition error: cannot save the data-dependent size at {path} of {node.name}")
        with graph.inserting_after(cur):
            cur = graph.call_function(target, args)
        cur.meta["val"] = val
    return cur


def _backward_uses(joint_gm, num_fwd_outputs):
    """(forward nodes, saved candidates): forward nodes are ancestors of the forward outputs."""
    outs = _outputs(joint_gm)
    fwd_nodes = _ancestors(outs[:num_fwd_outputs]) | {n for n in joint_gm.graph.nodes if _is_primal(n)}
    bwd_needed = _ancestors(outs[num_fwd_outputs:])
    return fwd_nodes, bwd_needed


def default_partition(joint_gm: fx.GraphModule, joint_inputs=None, *, num_fwd_outputs: int):
    """Save every forward value that a backward node uses (no recomputation).

    Backward nodes that do not depend on tangents (e.g. a weight transpose) are
    computed in the backward from saved forward values or primals; symbolic sizes the
    backward needs are computed in the forward and saved as SymInts.
    """
    fwd_nodes, bwd_needed = _backward_uses(joint_gm, num_fwd_outputs)
    tangent_dep = _tangent_dependent(joint_gm)
    fwd = fwd_nodes | {n for n in bwd_needed if _is_sym(n) and n not in tangent_dep}
    saved = [n for n in joint_gm.graph.nodes
             if n in fwd and any(u in bwd_needed and u not in fwd for u in n.users)]
    return _split(joint_gm, num_fwd_outputs, _expand_tuples(saved))


# Ops the min-cut partitioner may recompute in the backward: cheap, deterministic,
# pointwise or view-like.  Everything else (matmul, conv, reductions, random) is saved.
_RECOMPUTABLE_NAMES = {
    "add", "sub", "mul", "div", "neg", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu",
    "gelu", "silu", "rsqrt", "sqrt", "pow", "abs", "where", "clamp", "clamp_min", "clamp_max",
    "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and",
    "logical_or", "bitwise_and", "bitwise_or", "reciprocal", "erf", "expm1", "log1p", "sign",
    "le", "threshold_backward", "fill", "scalar_tensor", "full", "zeros_like", "ones_like",
    "full_like", "empty_like", "_to_copy", "clone", "convert_element_type",
    "view", "reshape", "_unsafe_view", "t", "transpose", "permute", "expand", "squeeze",
    "unsqueeze", "slice", "select", "alias", "as_strided", "split", "split_with_sizes",
    "detach", "lift_fresh_copy", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "iota", "arange",
}
_VIEW_NAMES = {"view", "reshape", "_unsafe_view", "t", "transpose", "permute", "expand", "squeeze",
               "unsqueeze", "slice", "select", "alias", "as_strided", "detach"}
# Ops whose inputs codegen materializes in memory (extern kernels): a pointwise value they
# read is written by the forward anyway, so saving it costs no extra write.
_EXTERN_NAMES = {"mm", "bmm", "addmm", "baddbmm", "convolution", "convolution_backward",
                 "mkldnn_rnn_layer", "mkldnn_rnn_layer_backward",
                 "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
                 "_scaled_dot_product_flash_attention_backward",
                 "_scaled_dot_product_efficient_attention_backward",
                 "_scaled_dot_product_cudnn_attention_backward",
                 "_scaled_dot_product_flash_attention_for_cpu_backward"}


def _op_name(n: fx.Node):
    return n.target.overloadpacket.__name__ if isinstance(n.target, torch._ops.OpOverload) else None


def _materialized(n: fx.Node, memo: dict) -> bool:
    """Whether the forward writes ``n`` to memory whether or not it is saved: an input,
    the result of an op that is not fused (matmul, reduction, scatter...), a pointwise
    value an extern kernel reads, or a view of one of these.  Saving any other value
    (a pointwise intermediate that codegen fuses into its readers) costs a write in the
    forward and a read in the backward on top of keeping it alive."""
    if n in memo:
        return memo[n]
    if n.op != "call_function" or not _recomputable(n):
        out = True
    elif _op_name(n) in _VIEW_NAMES:
        base = n.args[0] if n.args and isinstance(n.args[0], fx.Node) else None
        out = base is not None and _materialized(base, memo)
    else:
        out = _read_by_extern(n, lambda u: True)
    memo[n] = out
    return out


def _read_by_extern(n: fx.Node, which) -> bool:
    """Whether an extern kernel ``u`` with ``which(u)`` reads ``n``, directly or through views."""
    stack, seen = [n], set()
    while stack:
        for u in stack.pop().users:
            if u in seen:
                continue
            seen.add(u)
            name = _op_name(u)
            if name in _EXTERN_NAMES and which(u):
                return True
            if name in _VIEW_NAMES:
                stack.append(u)
    return False


def _materialized_in_backward(n: fx.Node, tangent_dep: set) -> bool:
    """Whether a backward extern kernel (a weight gradient's ``mm``, ``convolution_backward``)
    reads ``n``, directly or through views: recomputing ``n`` would then cost the backward a
    kernel that writes it, while the forward writes it anyway when a forward extern kernel
    reads it too (torch.compile's partitioner bans recomputing such a node,
    ``is_materialized_backwards``)."""
    return _read_by_extern(n, tangent_dep.__contains__)


def _recomputable(n: fx.Node) -> bool:
    if n.op == "get_attr":  # a graph constant: free to read again in the backward
        return True
    if n.op != "call_function":
        return False
    if n.target is operator.getitem:
        return _recomputable(n.args[0])
    if isinstance(n.target, torch._ops.OpOverload):
        if torch.Tag.nondeterministic_seeded in n.target.tags:
            return False
        return n.target.overloadpacket.__name__ in _RECOMPUTABLE_NAMES
    return _is_sym(n)  # sym arithmetic (operator.mul on SymInts ...)


def _nbytes(n: fx.Node) -> float:
    val = n.meta.get("val")
    if isinstance(val, torch.Tensor):
        numel = val.numel()
        hint = numel.node.hint if isinstance(numel, torch.SymInt) else numel
        return float(max(int(hint if hint is not None else 4096), 1) * val.element_size())
    if isinstance(val, (list, tuple)):
        return float(sum(t.numel() * t.element_size() for t in val if isinstance(t, torch.Tensor) and isinstance(t.numel(), int)) or 1)
    return 1.0


def min_cut_rematerialization_partition(joint_gm: fx.GraphModule, joint_inputs=None, *, num_fwd_outputs: int):
    """Choose the saved set by a minimum s-t cut weighted by bytes (mirrors torch.compile's
    ``min_cut_rematerialization_partition``).  Falls back to :func:`default_partition`
    if networkx is missing or the cut fails.
    """
    try:
        import networkx as nx
    except ImportError:  # pragma: no cover - networkx is a dependency
        return default_partition(joint_gm, joint_inputs, num_fwd_outputs=num_fwd_outputs)
    rewrite_scatter_of_constant(joint_gm)
    rewrite_accumulate_into_addend(joint_gm)
    _drop_internal_clones(joint_gm)
    unfuse_bias_addmm(joint_gm)
    cse, merged = cse_graph(joint_gm.graph, output_storages(_outputs(joint_gm)[:num_fwd_outputs]))
    if merged:
        joint_gm = fx.GraphModule(joint_gm, cse)
    fwd_nodes, bwd_needed = _backward_uses(joint_gm, num_fwd_outputs)
    tangent_dep = _tangent_dependent(joint_gm)
    fw_outputs = {o for o in _outputs(joint_gm)[:num_fwd_outputs] if isinstance(o, fx.Node)}
    g = nx.DiGraph()
    memo = {}
    for n in joint_gm.graph.nodes:
        if n.op == "output" or n not in (fwd_nodes | bwd_needed):
            continue
        if n in tangent_dep:
            if n in bwd_needed:
                g.add_edge(n.name + "_in", "sink", capacity=math.inf)
            continue
        both = (n in fwd_nodes and _op_name(n) not in _VIEW_NAMES and _materialized(n, memo)
                and _materialized_in_backward(n, tangent_dep))
        if not _recomputable(n) or both:
            # Must be computed in the forward: it is available to save, never recomputed.
            # A value both passes' extern kernels read (gelu's output: the forward's and
            # the weight gradient's mm) is saved: the forward writes it anyway.
            g.add_edge("source", n.name + "_in", capacity=math.inf)
        # A primal is alive anyway: saving it is slightly cheaper than an equal-sized
        # intermediate.  A forward output is materialized and handed to the caller anyway:
        # saving it costs least (softmax's backward then reads its output, as eager's
        # does, instead of recomputing exp from the input).
        # A fused pointwise value would be written only to be saved: twice the cost of
        # saving one the forward writes anyway (cross-entropy saves the logits, the max and
        # the log-sum-exp, not log_softmax or its exp).
        # Of equal sizes, a value both passes' extern kernels read costs less to save than a
        # view it was computed from: saving the view, the backward would recompute the value
        # in a kernel of its own (the LSTM's time-major copy of a batch-first embedding, which
        # the backward's oneDNN layer reads, against the embedding itself: two layouts).
        scale = (0.8 if n in fw_outputs else 0.9 if _is_primal(n) else 0.95 if both
                 else 1.0 if _materialized(n, memo) else 2.0)
        g.add_edge(n.name + "_in", n.name + "_out", capacity=_nbytes(n) * scale)
        for u in n.users:
            if u.op != "output":
                g.add_edge(n.name + "_out", u.name + "_in", capacity=math.inf)
    try:
        _, (reachable, _) = nx.minimum_cut(g, "source", "sink")
    except Exception:
        return default_partition(joint_gm, joint_inputs, num_fwd_outputs=num_fwd_outputs)
    by_name = {n.name: n for n in joint_gm.graph.nodes}
    saved = []
    for name in reachable:
        if name.endswith("_in") and name[:-3] + "_out" not in reachable and name != "source":
            saved.append(by_name[name[:-3]])
    order = {n: i for i, n in enumerate(joint_gm.graph.nodes)}
    saved.sort(key=order.__getitem__)
    # Multi-output nodes are saved through their getitem users, never as tuples.
    saved = _expand_tuples(saved)
    try:
        return _split(joint_gm, num_fwd_outputs, saved)
    except RuntimeError:
        return default_partition(joint_gm, joint_inputs, num_fwd_outputs=num_fwd_outputs)


def _dense(t: torch.Tensor) -> bool:
    import torch._prims_common as pc  # the name changed across torch versions
    check = getattr(pc, "is_non_overlapping_and_dense_or_false", None) or pc.is_non_overlapping_and_dense
    return bool(check(t))


def _drop_internal_clones(joint_gm: fx.GraphModule) -> int:
    """Replace ``clone(x)`` by ``x`` where nothing can tell them apart: the clone keeps
    ``x``'s strides (no memory format, ``x`` dense), ``x`` is not (a view of) a graph input
    (whose storage an input mutation may write), and nothing that reads the clone, directly
    or through views, is a graph output or writes to its argument.  A dropout with ``p=0``
    in training mode is such a clone: left in, the min cut saves the clone for the
    backward's matmul and recomputes its source for the softmax backward (exp of the
    attention scores once more), as two values where there is one.  Returns the count."""
    dropped = 0
    for n in list(joint_gm.graph.nodes):
        if n.target is not aten.clone.default or n.kwargs.get("memory_format", torch.preserve_format) is not torch.preserve_format:
            continue
        x = n.args[0]
        val = x.meta.get("val") if isinstance(x, fx.Node) else None
        if not isinstance(val, torch.Tensor) or not _dense(val):
            continue
        root = x
        while root.op == "call_function" and _op_name(root) in _VIEW_NAMES and isinstance(root.args[0], fx.Node):
            root = root.args[0]
        if root.op != "call_function":
            continue
        stack, safe, seen = [n], True, set()
        while stack and safe:
            for u in stack.pop().users:
                if u in seen:
                    continue
                seen.add(u)
                if u.op == "output" or (isinstance(u.target, torch._ops.OpOverload) and u.target._schema.is_mutable):
                    safe = False
                elif _op_name(u) in _VIEW_NAMES:
                    stack.append(u)
        if safe:
            n.replace_all_uses_with(x)
            joint_gm.graph.erase_node(n)
            dropped += 1
    if dropped:
        joint_gm.recompile()
    return dropped


def _expand_tuples(saved):
    out = []
    for n in saved:
        if isinstance(n.meta.get("val"), (list, tuple)):
            out.extend(u for u in n.users if u.target is operator.getitem and u not in out)
        elif n not in out:
            out.append(n)
    return out
