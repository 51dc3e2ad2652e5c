"""The scheduler: computed buffers → fused kernels, in an order that respects dependencies.

Fusion rules (TorchInductor's, in a simpler form):

* a kernel has a group ``(ranges, reduction_ranges)``, size-1 dimensions dropped;
* a pointwise node joins a kernel over the same ``ranges`` (an outer loop: sibling
  fusion, or a reduction's epilogue such as ``mean = sum / n``) or over
  ``ranges + reduction_ranges`` (a loop over the reduction ranges: softmax's final
  division); a reduction joins a kernel with the same group, or a pointwise kernel
  whose ranges are its ``ranges + reduction_ranges``;
* inside a kernel, a load of a buffer the kernel itself stores is replaced by the
  stored value (store→load forwarding) when it is visible: the same index in the same
  loop, or an earlier outer loop; otherwise the node cannot join;
* a node joins the latest kernel that shares data with it and comes after all of its
  dependencies; otherwise it starts a new kernel.

Pointwise producers were already inlined by lowering; what reaches the scheduler is
what must (or was chosen to) exist in memory.  Stores of buffers nobody reads any
more after forwarding are dropped, and those buffers are never allocated.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import sympy
import torch

from . import ir
from .ir import BufferArg, Load, Loop, Masked, Op, Reduce, ReductionValue, Store
from . import layout as layout_opt
from .config import triton_kernels
from .nodes import (Buffer, ComputedBuffer, ExternKernel, InputBuffer, IRNode, MultiOutput, MutationBuffer, Pointwise,
                    Reduction, ReinterpretView, Scatter, cast)


class NotFusable(Exception):
    pass


class SchedulerNode:
    """One computed buffer with its iteration ranges (size-1 dims dropped)."""

    def __init__(self, buf: ComputedBuffer) -> None:
        self.buf = buf
        self.name = buf.name
        self.is_mutation = isinstance(buf, MutationBuffer)
        self.store_name = buf.target.name if self.is_mutation else buf.name
        data = buf.data
        size = list(data.get_size())
        self.size = size
        self.keep = [i for i, s in enumerate(size) if s != 1]
        self.is_reduction = isinstance(data, Reduction)
        if isinstance(data, Pointwise) and (buf.layout.device.type == "cpu" or layout_opt.channels_last_cuda()):
            # (on CUDA with channels-last convolutions: a kernel between them then walks
            # NHWC memory in order, its loads and stores coalesced)
            self.keep = loop_order(self.keep, buf.layout.stride)
        self.ranges = [size[i] for i in self.keep]
        if self.is_reduction:
            rsize = list(data.reduction_ranges)
            self.rsize = rsize
            self.rkeep = [i for i, s in enumerate(rsize) if s != 1]
            # reduced dims all of size 1 (amin over a keepdim-1 dim): one reduction point,
            # kept as a range of 1 so the kernel still has its reduction loop
            self.rranges = [rsize[i] for i in self.rkeep] or [sympy.Integer(1)]
        else:
            self.rranges = []
        xs = ir.index_vars("x", len(self.ranges))
        rs = ir.index_vars("r", len(self.rranges))
        self.reads = set(_loaded_buffers(self.value(xs, rs)))

    def _full(self, vars_, size, keep):
        idx = [sympy.Integer(0)] * len(size)
        for i, v in zip(keep, vars_):
            idx[i] = v
        return idx

    def out_index(self, xs) -> sympy.Expr:
        return self.buf.layout.index(self._full(xs, self.size, self.keep))

    def value(self, xs, rs=()):
        data = self.buf.data
        idx = self._full(xs, self.size, self.keep)
        if self.is_reduction:
            return data.inner_fn(idx, self._full(rs, self.rsize, self.rkeep))
        return data.inner_fn(idx)


def loop_order(keep: list, strides: list) -> list:
    """The dims ``keep`` of a pointwise store in loop order, outermost first: by
    decreasing stride of the stored layout, so that the innermost (vectorized) loop
    writes consecutive elements.  A channels-last [N, C, H, W] result loops N, H, W, C
    (as TorchInductor's stride-ordered iteration); the given order when a stride is
    symbolic or the strides already decrease."""
    picked = [strides[i] for i in keep]
    if not all(sympy.sympify(st).is_Integer for st in picked):
        return keep
    order = sorted(range(len(keep)), key=lambda j: -int(picked[j]))  # stable: ties keep their order
    return [keep[j] for j in order]


def _loaded_buffers(value, seen=None):
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, Load):
        yield value.buffer
        for i in value.indirect:
            yield from _loaded_buffers(i.value, seen)
    elif isinstance(value, Op):
        for a in value.args:
            yield from _loaded_buffers(a, seen)
    elif isinstance(value, Masked):
        yield from _loaded_buffers(value.mask, seen)
        yield from _loaded_buffers(value.body, seen)


@dataclasses.dataclass
class KernelPlan:
    """A kernel being built: its group and member nodes (re-built on every join)."""

    ranges: list
    rranges: list
    nodes: list
    loops: list

    def writes(self) -> set:
        return {n.name for n in self.nodes}

    def reads(self) -> set:
        return set().union(*[n.reads for n in self.nodes])


def build_loops(ranges, rranges, nodes) -> list:
    """The loops of a kernel over ``(ranges, rranges)`` holding ``nodes``; raises NotFusable."""
    xs = ir.index_vars("x", len(ranges))
    rs = ir.index_vars("r", len(rranges))
    loops: list[Loop] = []
    stored: dict[str, tuple[int, Store]] = {}

    def forward(value, pos, cache):
        key = id(value)
        if key in cache:
            return cache[key]
        out = value
        if isinstance(value, Load):
            ind = tuple(dataclasses.replace(i, value=forward(i.value, pos, cache)) for i in value.indirect)
            if value.buffer in stored:
                lpos, st = stored[value.buffer]
                # a value stored in an earlier reduction loop is visible to a later one
                # (its expression: registers in a persistent kernel, recomputed in a looped one)
                visible = lpos == pos or (lpos < pos and (not loops[lpos].reduction or (across and placing[0])))
                if not visible or ind or st.indirect or st.mode or sympy.expand(st.index - value.index) != 0:
                    raise NotFusable(value.buffer)
                out = cast(st.value, value.dtype)
            elif ind != value.indirect:
                out = Load(value.buffer, value.index, value.dtype, ind)
        elif isinstance(value, Op):
            args = tuple(forward(a, pos, cache) for a in value.args)
            if args != value.args:
                out = Op(value.name, args, value.dtype)
        elif isinstance(value, Masked):
            out = Masked(forward(value.mask, pos, cache), forward(value.body, pos, cache), value.other, value.dtype)
        cache[key] = out
        return out

    # whether the statements being made go into a reduction loop; only Triton kernels
    # forward a value across reduction loops (the C++ generator keeps its kernels as before)
    placing = [False]
    across = bool(nodes) and triton_kernels(nodes[0].buf.layout.device)

    def place(reduction: bool, make_stmts) -> int:
        candidates = [i for i in reversed(range(len(loops))) if loops[i].reduction == reduction]
        placing[0] = reduction
        for pos in candidates + [len(loops)]:
            try:
                stmts = make_stmts(pos)
            except NotFusable:
                continue
            if pos == len(loops):
                loops.append(Loop(reduction, []))
            loops[pos].body.extend(stmts)
            return pos
        raise NotFusable("no loop")

    for node in nodes:
        if node.is_reduction:
            if node.ranges != ranges or node.rranges != rranges:
                raise NotFusable("group")
            data = node.buf.data
            acc = f"acc_{node.name}"
            flat = sympy.Integer(0)
            for r, n in zip(rs, rranges):
                flat = flat * n + r
            raw = node.value(xs, rs)
            if data.reduction_type in ("welford_mean", "welford_m2"):
                pos, result = _place_welford(place, loops, acc, forward, raw, data)
            else:
                pos = place(True, lambda p: [Reduce(acc, data.reduction_type, forward(raw, p, {}), data.acc_dtype,
                                                    flat if data.reduction_type in ("argmax", "argmin") else None)])
                result = acc
            store = Store(node.name, node.out_index(xs), cast(ReductionValue(result, data.acc_dtype), data.dtype))
            if pos + 1 < len(loops) and not loops[pos + 1].reduction:
                loops[pos + 1].body.append(store)
            else:
                loops.insert(pos + 1, Loop(False, [store]))
                for name, (lp, st) in list(stored.items()):
                    if lp > pos:
                        stored[name] = (lp + 1, st)
            stored[node.name] = (pos + 1, store)
            continue
        if node.ranges == ranges:
            inner, vars_ = False, xs
        elif rranges and node.ranges == list(ranges) + list(rranges):
            inner, vars_ = True, xs + rs
        else:
            raise NotFusable("group")
        raw = node.value(vars_)
        full = node._full(vars_, node.size, node.keep)
        data = node.buf.data
        if isinstance(data, Scatter):
            index, indirect = data.store_index(full)
            mode = data.mode
        else:
            index, indirect, mode = node.buf.layout.index(full), (), None
        holder = {}

        def make(p, raw=raw, index=index, node=node, holder=holder, indirect=indirect, mode=mode):
            ind = tuple(dataclasses.replace(i, value=forward(i.value, p, {})) for i in indirect)
            holder["store"] = Store(node.store_name, index, cast(forward(raw, p, {}), node.buf.dtype), mode, ind)
            return [holder["store"]]

        pos = place(inner, make)
        stored[node.store_name] = (pos, holder["store"])
    return loops


def _place_welford(place, loops, acc, forward, raw, data) -> tuple[int, str]:
    """A ``welford_mean``/``welford_m2`` node (lowering's var_mean): both share one
    ``welford`` Reduce of the same value, added by whichever comes first; returns the
    loop position and the name of the ReductionValue the node stores."""
    found = {}

    def make(p):
        value = forward(raw, p, {})
        for st in loops[p].body if p < len(loops) else ():
            if isinstance(st, Reduce) and st.reduction_type == "welford" and st.value == value:
                found["name"] = st.name
                return []
        found["name"] = acc
        return [Reduce(acc, "welford", value, data.acc_dtype)]

    pos = place(True, make)
    part = ir.welford_mean if data.reduction_type == "welford_mean" else ir.welford_m2
    return pos, part(found["name"])


def _group_of(node: SchedulerNode):
    return node.ranges, node.rranges


def try_join(plan: KernelPlan, node: SchedulerNode) -> Optional[KernelPlan]:
    """``plan`` with ``node`` added, or None when the group or dependencies forbid it."""
    candidates = []
    if node.is_reduction:
        if plan.rranges:
            candidates.append((plan.ranges, plan.rranges))
        elif plan.ranges == node.ranges + node.rranges:
            candidates.append((node.ranges, node.rranges))
        elif not plan.ranges and not node.ranges:
            pass
    else:
        candidates.append((plan.ranges, plan.rranges))
    for ranges, rranges in candidates:
        try:
            loops = build_loops(ranges, rranges, plan.nodes + [node])
        except NotFusable:
            continue
        if _mixes_column_reduction(loops, ranges, rranges):
            continue
        return KernelPlan(ranges, rranges, plan.nodes + [node], loops)
    return None


def _mixes_column_reduction(loops, ranges, rranges) -> bool:
    """A reduction over outer dims (contiguous in x, strided in r) with stores inside
    the reduction loop: the C++ generator can only tile pure column reductions, so
    keep the pointwise part in a kernel of its own."""
    if not ranges or not rranges or not any(isinstance(st, Store) for lp in loops if lp.reduction for st in lp.body):
        return False
    x, r = ir.index_vars("x", len(ranges))[-1], ir.index_vars("r", len(rranges))[-1]
    for lp in loops:
        for st in lp.body:
            if isinstance(st, Reduce):
                loads = [v for v in _values(st.value) if isinstance(v, Load)]
                idx = [sympy.expand(v.index) for v in loads]
                if (any(i.coeff(x) == 1 for i in idx)
                        and not any(i.coeff(r) == 1 and i.coeff(x) != 0 for i in idx)):
                    return True
    return False


def _values(value, seen=None):
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    yield value
    children = value.args if isinstance(value, Op) else (value.mask, value.body) if isinstance(value, Masked) else ()
    for c in children:
        yield from _values(c, seen)


def _node_symbols(node: SchedulerNode) -> set:
    """Every size symbol a node's loops, layout and loads refer to."""
    exprs = list(node.size) + list(getattr(node, "rsize", ())) + list(node.buf.layout.size) + list(node.buf.layout.stride)
    xs = ir.index_vars("x", len(node.ranges))
    rs = ir.index_vars("r", len(node.rranges))
    for v in _values(node.value(xs, rs)):
        if isinstance(v, Load):
            exprs.append(v.index)
            for i in v.indirect:
                exprs.append(sympy.sympify(i.size))
                exprs += [x.index for x in _values(i.value) if isinstance(x, Load)]
        elif isinstance(v, ir.IndexValue):
            exprs.append(v.expr)
    data = node.buf.data
    if isinstance(data, Scatter):
        index, _ = data.store_index(node._full(xs, node.size, node.keep))
        exprs.append(index)
    return set().union(*[sympy.sympify(e).free_symbols for e in exprs])


def _extern_reads(buf) -> Optional[set]:
    """The buffers an extern call reads, or None when it must come after every computed
    buffer defined before it: an op that mutates, a collective (compute placed before
    it overlaps its communication), an argument of an unknown kind."""
    if isinstance(buf, MultiOutput):
        return {buf.parent.name}
    op = buf.op
    if not isinstance(op, torch._ops.OpOverload) or op._schema.is_mutable or op.namespace == "_c10d_functional":
        return None
    names = set()

    def walk(a) -> bool:
        if isinstance(a, (Buffer, ReinterpretView)):
            names.add(a.name)
        elif isinstance(a, (list, tuple)):
            return all(walk(b) for b in a)
        elif isinstance(a, IRNode):
            return False
        return True

    return names if walk(list(buf.args)) and walk(list(buf.kwargs.values())) else None


class Scheduler:
    """Orders the graph's buffers into kernels and extern calls.

    ``entries`` after :meth:`run`: a list of ``KernelPlan`` and extern buffers
    (``ExternKernel``/``MultiOutput``) in execution order.
    """

    def __init__(self, graph) -> None:
        self.graph = graph
        self.entries: list = []
        self.position: dict[str, int] = {}

    def run(self) -> "Scheduler":
        """A computed buffer that reads only graph inputs is scheduled when its first
        reader that is not such a buffer comes (or at the end), not where the graph
        defines it: a backward graph recomputes activations from saved inputs up front
        (``gelu(x)`` for a weight gradient), and there they could not share a kernel with
        the later nodes that read the same inputs (gelu's backward), as TorchInductor's
        fusion of independent nodes that share reads can."""
        buffers = list(self.graph.buffers.values())
        pending: dict[str, SchedulerNode] = {}  # deferred nodes, in graph order
        # writes into graph inputs (AOT autograd's kept mutations: copy_ nodes at the end
        # of the graph) come after every other buffer: an output realized after the
        # copy_ was lowered still reads the input's old value
        input_writes: list[SchedulerNode] = []

        def flush(names) -> None:
            for name in names:
                node = pending.pop(name, None)
                if node is not None:
                    flush(sorted(node.reads & pending.keys(), key=list(pending).index))
                    self._schedule(node)

        for buf in buffers:
            if isinstance(buf, ComputedBuffer):
                node = SchedulerNode(buf)
                if node.is_mutation and isinstance(buf.target, InputBuffer):
                    input_writes.append(node)
                elif node.is_mutation:
                    flush(list(pending))
                    self._schedule(node)
                elif all(r in pending or isinstance(self.graph.buffers.get(r), InputBuffer) for r in node.reads):
                    pending[node.name] = node
                else:
                    flush(sorted(node.reads & pending.keys(), key=list(pending).index))
                    self._schedule(node)
            elif isinstance(buf, (ExternKernel, MultiOutput)):
                reads = _extern_reads(buf)
                flush(list(pending) if reads is None else [n for n in pending if n in reads])
                self.position[buf.name] = len(self.entries)
                self.entries.append(buf)
        flush(list(pending))
        for node in input_writes:
            self._schedule(node)
        if len(self.graph.buffers) != len(buffers):
            raise RuntimeError("a lowering created buffers while being scheduled (a bug): not compiling")
        return self

    def _schedule(self, node: SchedulerNode) -> None:
        earliest = max([self.position.get(b, -1) for b in node.reads], default=-1)
        defs = self.graph.unbacked_defs
        if defs:  # after the extern calls that bind the data-dependent sizes it reads
            earliest = max([earliest] + [self.position[defs[s]] for s in _node_symbols(node) if s in defs])
        if node.is_mutation:
            # into a kernel after every entry that reads or writes the target (they want
            # its old value); later readers follow it (position of the target)
            earliest = max(earliest, self._last_use(node.store_name) + 1)
        for p in reversed(range(earliest, len(self.entries))):
            if p < 0:
                break
            entry = self.entries[p]
            if not isinstance(entry, KernelPlan):
                continue
            if p == earliest and not (node.reads & entry.writes()) and not _epilogue_group(entry, node):
                continue
            if not (node.reads & (entry.writes() | entry.reads())) and not _epilogue_group(entry, node):
                continue
            joined = try_join(entry, node)
            if joined is not None:
                self.entries[p] = joined
                self.position[node.name] = p
                if node.is_mutation:
                    self.position[node.store_name] = p
                return
        try:
            loops = build_loops(node.ranges, node.rranges, [node])
        except NotFusable as e:
            raise RuntimeError(f"cannot schedule {node.name} on its own: {e}")
        self.position[node.name] = len(self.entries)
        if node.is_mutation:
            self.position[node.store_name] = len(self.entries)
        self.entries.append(KernelPlan(node.ranges, node.rranges, [node], loops))

    def _last_use(self, name: str) -> int:
        """Position of the last entry that reads or writes buffer ``name`` (an extern
        call whose reads are unknown counts), -1 if none."""
        for p in reversed(range(len(self.entries))):
            entry = self.entries[p]
            if isinstance(entry, KernelPlan):
                if name in entry.reads() or any(n.store_name == name for n in entry.nodes):
                    return p
            else:
                reads = _extern_reads(entry)
                if reads is None or name in reads or entry.name == name:
                    return p
        return -1


def _epilogue_group(plan: KernelPlan, node: SchedulerNode) -> bool:
    """Whether ``node`` (a write into a graph input) may join ``plan`` although they share
    no buffer: ``plan`` holds only such writes over the same points (the ``+= 1`` of every
    batch norm's ``num_batches_tracked`` in one kernel)."""
    return node.is_mutation and not node.rranges and not plan.rranges and plan.ranges == node.ranges \
        and all(n.is_mutation for n in plan.nodes)


def finalize(entries, needed: set, graph, device, prefix="kernel") -> list:
    """Drop stores nobody reads, name kernels, build :class:`ir.FusedKernel` s in order.

    ``needed``: buffers read outside kernels (extern args, outputs, views).  Returns
    the entries with KernelPlans replaced by FusedKernels (empty kernels removed).
    """
    needed.update(n for n, b in graph.buffers.items() if isinstance(b, InputBuffer))  # mutated inputs
    for entry in entries:
        if isinstance(entry, KernelPlan):
            for loop in entry.loops:
                for st in loop.body:
                    needed.update(_loaded_buffers(st.value))
                    for i in getattr(st, "indirect", ()):
                        needed.update(_loaded_buffers(i.value))
    out = []
    count = 0
    for entry in entries:
        if not isinstance(entry, KernelPlan):
            out.append(entry)
            continue
        loops = []
        for loop in entry.loops:
            body = [s for s in loop.body if not isinstance(s, Store) or s.buffer in needed]
            if body:
                loops.append(Loop(loop.reduction, body))
        if not any(isinstance(s, Store) for lp in loops for s in lp.body):
            continue
        out.append(make_kernel(f"{prefix}{count}", entry, loops, graph, device))
        count += 1
    return out


def make_kernel(name, plan: KernelPlan, loops, graph, device) -> ir.FusedKernel:
    size_hints = graph.size_hints()
    dtypes: dict[str, torch.dtype] = {}
    stored: set = set()
    symbols: set = set()
    seen: set = set()

    def visit(v):
        if id(v) in seen:
            return
        seen.add(id(v))
        if isinstance(v, Load):
            dtypes.setdefault(v.buffer, v.dtype)
            symbols.update(v.index.free_symbols)
            for i in v.indirect:
                visit(i.value)
                symbols.update(sympy.sympify(i.size).free_symbols)
        elif isinstance(v, Op):
            for a in v.args:
                visit(a)
        elif isinstance(v, Masked):
            visit(v.mask)
            visit(v.body)
        elif isinstance(v, ir.IndexValue):
            symbols.update(v.expr.free_symbols)

    for loop in loops:
        for st in loop.body:
            visit(st.value)
            if isinstance(st, Store):
                stored.add(st.buffer)
                symbols.update(st.index.free_symbols)
                for i in st.indirect:
                    visit(i.value)
            elif st.index is not None:
                symbols.update(st.index.free_symbols)
    for loop in loops:
        for st in loop.body:
            if isinstance(st, Store):
                dtypes.setdefault(st.buffer, graph.buffers[st.buffer].dtype)
    xs = ir.index_vars("x", len(plan.ranges))
    rs = ir.index_vars("r", len(plan.rranges))
    for r in list(plan.ranges) + list(plan.rranges):
        symbols.update(sympy.sympify(r).free_symbols)
    local = set(xs) | set(rs) | {s for s in symbols if s.name.startswith("i")}
    size_args = sorted((s for s in symbols if s not in local), key=lambda s: s.name)
    buffers = [BufferArg(b, dt, b in stored) for b, dt in dtypes.items()]
    return ir.FusedKernel(name, device, list(plan.ranges), list(plan.rranges), xs, rs, loops, buffers, size_args,
                          {s: size_hints[s] for s in size_args if s in size_hints})
