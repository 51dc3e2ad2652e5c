"""Common-subexpression elimination of a joint graph (before it is partitioned).

The backward formulas of decomposed ops recompute forward values: ``silu``'s forward is
``x * sigmoid(x)`` and its backward ``g * sigmoid(x) * (1 + x * (1 - sigmoid(x)))``, so the
joint graph holds ``sigmoid(x)`` twice.  Partitioned as is, the backward computes it once
for its own formula and once more to rematerialize the forward's product; merged first,
the partitioner sees one value it can save or recompute once (eager computes sigmoid
once per pass).  Mirrors torch.compile's ``fx_graph_cse`` run before
``min_cut_rematerialization_partition``.

Two ``call_function`` nodes are merged when they call the same target on the same
(already merged) arguments.  Never merged: random ops (``nondeterministic_seeded``),
ops that mutate or alias-write an argument, ops that define data-dependent sizes
(``unbacked_bindings``: each ``.item()`` is a symbol of its own), ops outside the ``aten``
and ``prims`` namespaces (collectives: each call is a message to the other ranks; custom
ops may have undeclared effects), and nodes whose arguments cannot be hashed.
"""
from __future__ import annotations

import torch
import torch.fx as fx

_OP_NAMESPACES = {"aten", "prims"}


def _mergeable(n: fx.Node) -> bool:
    if n.op != "call_function" or n.meta.get("unbacked_bindings") or n.is_impure():
        return False
    target = n.target
    if isinstance(target, torch._ops.OpOverload):
        # ATen and prims only: a custom op may have effects its schema does not declare
        if torch.Tag.nondeterministic_seeded in target.tags or target.namespace not in _OP_NAMESPACES:
            return False
        schema = target._schema
        if schema.is_mutable or any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            return False
        return True
    # getitem of a merged tuple, SymInt arithmetic (operator.mul ...): pure
    return getattr(target, "__module__", None) == "_operator"


def _key(value):
    """A hashable form of an argument (lists -> tuples, slices and dtypes kept);
    raises TypeError when there is none."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_key(v) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted((k, _key(v)) for k, v in value.items()))
    if isinstance(value, slice):
        return ("slice", _key(value.start), _key(value.stop), _key(value.step))
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise TypeError("symbolic constant")
    if isinstance(value, float):
        return ("float", repr(value))  # 0.0 == -0.0, but x * -0.0 is not x * 0.0
    hash(value)
    # 1, 1.0 and True hash alike but are different arguments
    return (type(value).__name__, value)


def output_storages(outputs) -> set:
    """The nodes whose memory the user sees: ``outputs`` and the nodes they view (through
    ops whose result aliases their first argument: ``detach``, ``view``, ``t``...)."""
    found, stack = set(), [o for o in outputs if isinstance(o, fx.Node)]
    while stack:
        n = stack.pop()
        if n in found:
            continue
        found.add(n)
        target = n.target if n.op == "call_function" else None
        if (isinstance(target, torch._ops.OpOverload) and target._schema.returns
                and target._schema.returns[0].alias_info is not None and n.args and isinstance(n.args[0], fx.Node)):
            stack.append(n.args[0])
    return found


def cse_graph(graph: fx.Graph, keep_apart=frozenset()) -> tuple[fx.Graph, int]:
    """A copy of ``graph`` with repeated pure computations merged; returns
    ``(new graph, number of nodes merged away)``.  Placeholders keep their names.
    Two nodes of ``keep_apart`` (:func:`output_storages` of the forward outputs) are
    never merged: eager returns ``x * 2, x * 2`` (or ``y, (x * 2).detach()``) as tensors
    of their own, and merged, writing one output in place changed the other."""
    new = fx.Graph()
    env: dict = {}
    seen: dict = {}
    origin: dict = {}  # key -> the original node that made seen[key]
    merged = 0
    for n in graph.nodes:
        if _mergeable(n):
            args = fx.node.map_arg(n.args, lambda a: env[a])
            kwargs = fx.node.map_arg(n.kwargs, lambda a: env[a])
            try:
                key = (n.target, _key(args), _key(kwargs))
            except TypeError:
                key = None
            if key is not None and key in seen and not (n in keep_apart and origin[key] in keep_apart):
                env[n] = seen[key]
                merged += 1
                continue
            env[n] = new.node_copy(n, lambda a: env[a])
            if key is not None and key not in seen:
                seen[key], origin[key] = env[n], n
            continue
        env[n] = new.node_copy(n, lambda a: env[a])
    return new, merged
