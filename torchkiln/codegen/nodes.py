"""Lowering-level tensors: unrealized pointwise/reduction values, views and buffers.

A lowering returns a :class:`TensorBox`.  Its ``data`` is one of

* :class:`Pointwise` — ``inner_fn(index) -> ir value``, not yet in memory; consumers
  inline it (fusion by construction);
* :class:`Reduction` — ``inner_fn(index, rindex)`` reduced over ``reduction_ranges``;
  always realized before use;
* :class:`View` — an index rewrite of another box (permute, expand, slice...), no copy;
* a :class:`Buffer` (graph input, computed buffer, extern kernel output) or a
  :class:`ReinterpretView` of one (a strided alias: ``as_strided`` in the wrapper).

``TensorBox.realize()`` turns pointwise/reduction data into a :class:`ComputedBuffer`
registered with the graph being lowered (``current_graph()``), which the scheduler
turns into kernels.  Sizes, strides and offsets are sympy expressions throughout.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import sympy
import torch

from . import ir
from .ir import Constant, IndexValue, Load, Op

_graph_stack: list = []


def current_graph():
    """The GraphLowering being built (set by ``graph.GraphLowering.run``)."""
    return _graph_stack[-1]


def to_sympy(x) -> sympy.Expr:
    """An int / SymInt / sympy value as a sympy expression."""
    if isinstance(x, sympy.Basic):
        return x
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return x.node.expr
    if isinstance(x, bool):
        return sympy.true if x else sympy.false
    if isinstance(x, int):
        return sympy.Integer(x)
    if isinstance(x, float):
        return sympy.Float(x)
    raise TypeError(f"not a size: {x!r}")


def contiguous_strides(size) -> list[sympy.Expr]:
    strides, acc = [], sympy.Integer(1)
    for s in reversed(size):
        strides.append(acc)
        acc = acc * s
    return list(reversed(strides))


def cast(value, dtype: torch.dtype):
    """``value`` converted to ``dtype`` (no-op when it already is; folds constants)."""
    if value.dtype == dtype:
        return value
    if isinstance(value, Constant):
        v = value.value
        if dtype == torch.bool:
            return Constant(bool(v), dtype)
        if dtype.is_floating_point:
            return Constant(float(v), dtype)
        if not (isinstance(v, float) and (v != v or v in (float("inf"), float("-inf")))):
            return Constant(int(v), dtype)
    if isinstance(value, IndexValue):
        return IndexValue(value.expr, dtype)
    return Op("to_dtype", (value,), dtype)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype pointwise math runs in: float32 for float16/bfloat16 (ATen's opmath)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


@dataclasses.dataclass
class Layout:
    """Where a buffer's elements live: ``offset + sum(index[i] * stride[i])``."""

    size: list
    stride: list
    offset: sympy.Expr
    dtype: torch.dtype
    device: torch.device

    def index(self, idx) -> sympy.Expr:
        out = self.offset
        for i, s, n in zip(idx, self.stride, self.size):
            if n != 1:
                out = out + i * s
        return out

    def storage_size(self) -> sympy.Expr:
        """Elements of storage needed (from the data pointer)."""
        if any(n == 0 for n in self.size):
            return sympy.Integer(0)
        return self.offset + sum(((n - 1) * s for n, s in zip(self.size, self.stride)), sympy.Integer(0)) + 1


class IRNode:
    """Anything a lowering can consume: size, dtype, device and a loader."""

    def get_size(self) -> list:
        raise NotImplementedError

    def make_loader(self) -> Callable:
        raise NotImplementedError


@dataclasses.dataclass(eq=False)
class Pointwise(IRNode):
    size: list
    dtype: torch.dtype
    device: torch.device
    inner_fn: Callable

    def get_size(self):
        return self.size

    def make_loader(self):
        return self.inner_fn

    def num_ops(self) -> int:
        """Size of the expression tree (a cost estimate for inlining)."""
        value = self.inner_fn([sympy.Symbol(f"t{i}", integer=True) for i in range(len(self.size))])
        return _count_ops(value)

    def num_reads(self) -> int:
        """How many distinct buffers the expression loads (indirect index values included),
        leaving out direct loads that some dim of size > 1 does not index (a bias vector, a
        row's mean): one element serves many points, from cache."""
        syms = [sympy.Symbol(f"t{i}", integer=True) for i in range(len(self.size))]
        names: set = set()
        _loaded_names(self.inner_fn(syms), names, set(), {s for s, n in zip(syms, self.size) if n != 1})
        return len(names)

    def has_transcendental(self) -> bool:
        """Whether the expression calls a math function (exp, sin, cos...) that costs
        tens of cycles per element, too much to recompute in every consumer."""
        value = self.inner_fn([sympy.Symbol(f"t{i}", integer=True) for i in range(len(self.size))])
        return _has_op(value, ir.TRANSCENDENTAL, set())


def _has_op(v, names, seen) -> bool:
    if id(v) in seen:
        return False
    seen.add(id(v))
    if isinstance(v, Op):
        return v.name in names or any(_has_op(a, names, seen) for a in v.args)
    if isinstance(v, ir.Masked):
        return _has_op(v.body, names, seen) or _has_op(v.mask, names, seen)
    if isinstance(v, Load):
        return any(_has_op(i.value, names, seen) for i in v.indirect)
    return False


def _loaded_names(v, names: set, seen: set, every: set) -> None:
    """Buffers ``v`` loads whose index is indirect or uses each symbol of ``every``."""
    if id(v) in seen:
        return
    seen.add(id(v))
    if isinstance(v, Op):
        for a in v.args:
            _loaded_names(a, names, seen, every)
    elif isinstance(v, ir.Masked):
        _loaded_names(v.body, names, seen, every)
        _loaded_names(v.mask, names, seen, every)
    elif isinstance(v, Load):
        if v.indirect or every <= v.index.free_symbols:
            names.add(v.buffer)
        for i in v.indirect:
            _loaded_names(i.value, names, seen, every)


def _count_ops(v, seen=None) -> int:
    seen = set() if seen is None else seen
    if id(v) in seen:
        return 0
    seen.add(id(v))
    if isinstance(v, Op):
        return 1 + sum(_count_ops(a, seen) for a in v.args)
    if isinstance(v, ir.Masked):
        return 1 + _count_ops(v.body, seen) + _count_ops(v.mask, seen)
    if isinstance(v, Load):
        return 1 + sum(_count_ops(i.value, seen) for i in v.indirect)
    return 0


@dataclasses.dataclass(eq=False)
class Reduction(IRNode):
    """``reduction_type`` of ``inner_fn(index, rindex)`` over ``reduction_ranges``.

    ``size`` is the output size; ``acc_dtype`` the accumulator dtype; ``dtype`` the output.
    """

    size: list
    reduction_ranges: list
    reduction_type: str
    dtype: torch.dtype
    acc_dtype: torch.dtype
    device: torch.device
    inner_fn: Callable

    def get_size(self):
        return self.size


class _InMemory(IRNode):
    """A node read from memory named ``self.name`` through ``self.layout``."""

    layout: Layout

    @property
    def dtype(self):
        return self.layout.dtype

    @property
    def device(self):
        return self.layout.device

    def get_size(self):
        return self.layout.size

    def make_loader(self):
        name, layout = self.name, self.layout
        return lambda idx: Load(name, layout.index(idx), layout.dtype)


class Buffer(_InMemory):
    """A tensor in memory, named in the wrapper."""

    def __init__(self, name: str, layout: Layout) -> None:
        self.name = name
        self.layout = layout

    def __repr__(self):
        return f"{type(self).__name__}({self.name})"


class InputBuffer(Buffer):
    """A graph input (placeholder)."""


class ComputedBuffer(Buffer):
    """A buffer a generated kernel fills from ``data`` (Pointwise or Reduction)."""

    def __init__(self, name: str, layout: Layout, data) -> None:
        super().__init__(name, layout)
        self.data = data


class MutationBuffer(ComputedBuffer):
    """A kernel that writes into an existing buffer ``target`` (copy_ into a graph input,
    scatter / index_put into a fresh copy).  Its own name is never allocated."""

    def __init__(self, name: str, target: Buffer, data) -> None:
        super().__init__(name, target.layout, data)
        self.target = target


@dataclasses.dataclass(eq=False)
class Scatter(IRNode):
    """For each point of ``size``: ``target[store_index(idx)] (+)= inner_fn(idx)``.

    ``store_index(idx) -> (index expr, indirect tuple)``; ``mode`` None or "atomic_add".
    """

    size: list
    dtype: torch.dtype
    device: torch.device
    inner_fn: Callable
    store_index: Callable
    mode: Optional[str] = None

    def get_size(self):
        return self.size


class ExternKernel(Buffer):
    """An ATen call in the wrapper: ``name = op(*args, **kwargs)``.

    ``args``/``kwargs`` hold buffers (or ReinterpretViews), sympy sizes and plain
    constants.  ``layout`` is the output's (from the fake value); ``multi`` outputs are
    unpacked by :class:`MultiOutput` nodes.  ``mutated`` lists buffers the op writes.
    """

    def __init__(self, name, layout, op, args, kwargs, fallback=False, mutated=()):
        super().__init__(name, layout)
        self.op = op
        self.args = args
        self.kwargs = kwargs
        self.fallback = fallback
        self.mutated = list(mutated)


class MultiOutput(Buffer):
    """``name = parent[i][j]...``: one tensor of an extern kernel's tuple result."""

    def __init__(self, name, layout, parent: ExternKernel, path: tuple) -> None:
        super().__init__(name, layout)
        self.parent = parent
        self.path = path


class ReinterpretView(_InMemory):
    """A strided alias of ``base`` with its own layout (offset relative to base's data)."""

    def __init__(self, base: Buffer, layout: Layout) -> None:
        self.base = base
        self.layout = layout

    @property
    def name(self):
        return self.base.name


class View(IRNode):
    """``base`` read through ``reindex(new_index) -> base_index`` (no copy)."""

    def __init__(self, base: "TensorBox", size: list, reindex: Callable) -> None:
        self.base = base
        self.size = list(size)
        self.reindex = reindex

    @property
    def dtype(self):
        return self.base.dtype

    @property
    def device(self):
        return self.base.device

    def get_size(self):
        return self.size

    def make_loader(self):
        inner = self.base.make_loader()
        reindex = self.reindex
        return lambda idx: inner(reindex(idx))


class TensorBox:
    """A mutable handle on a lowered tensor: realizing it replaces ``data`` in place."""

    def __init__(self, data) -> None:
        self.data = data
        # set by the graph on an unrealized pointwise value with several users: the
        # strides to store it in when a view of it is stored (see _realize_shared_root)
        self.shared_stride: Optional[list] = None

    @property
    def dtype(self) -> torch.dtype:
        return self.data.dtype

    @property
    def device(self) -> torch.device:
        return self.data.device

    def get_size(self) -> list:
        return self.data.get_size()

    def make_loader(self) -> Callable:
        if isinstance(self.data, Reduction):
            self.realize()
        return self.data.make_loader()

    def is_realized(self) -> bool:
        return isinstance(self.data, (Buffer, ReinterpretView))

    def realize(self, stride: Optional[list] = None):
        """Store the value in a buffer (``stride``: preferred strides); returns the buffer or view."""
        data = self.data
        if isinstance(data, (Buffer, ReinterpretView)):
            return data
        if isinstance(data, View):
            stored = _realize_shared_root(data)
            view = as_strided_view(data)
            if view is not None and (not stored or stride is None or _strides_equal(view.layout, stride)):
                self.data = view
                return view
            data = Pointwise(data.get_size(), data.dtype, data.device, data.make_loader())
        size = list(data.get_size())
        if stride is None or len(stride) != len(size):
            stride = contiguous_strides(size)
        layout = Layout(size, [to_sympy(s) for s in stride], sympy.Integer(0), data.dtype, data.device)
        buf = current_graph().register_buffer(lambda name: ComputedBuffer(name, layout, data))
        self.data = buf
        return buf

    def __repr__(self):
        return f"TensorBox({self.data!r})"


def _view_root(view: View) -> "TensorBox":
    box = view.base
    while isinstance(box.data, View):
        box = box.data.base
    return box


def _realize_shared_root(view: View) -> bool:
    """A view (permute, reshape...) of a pointwise value that other consumers read too
    (``TensorBox.shared_stride``, set by the graph for a value with several users) is
    about to be stored: store the value itself once, so that the view becomes a strided
    alias of it and the other consumers load it, instead of each recomputing it (a
    ``silu`` backward feeding both a weight-gradient ``mm`` through a transpose and a
    bias-gradient sum computed its sigmoid twice).  Only when the view has as many
    elements as the value (nothing is computed that no one reads).  Returns whether it
    stored the value now."""
    root = _view_root(view)
    if root.shared_stride is None or not isinstance(root.data, Pointwise):
        return False
    numel = lambda size: sympy.expand(sympy.Mul(*[to_sympy(s) for s in size]))  # noqa: E731
    if sympy.expand(numel(view.get_size()) - numel(root.get_size())) != 0:
        return False
    root.realize(root.shared_stride)
    return True


def realize_expanded_root(box: "TensorBox") -> None:
    """An expand (a view of more elements than the value it reads) about to be stored
    for an extern kernel: store the value itself, so that the view becomes a stride-0
    alias of it, as eager passes it, instead of a copy of every element (SDPA's causal
    mask expanded over the heads: the mask kernel wrote, and the attention kernel read,
    12x the bytes on GPT-2)."""
    if not isinstance(box.data, View):
        return
    root = _view_root(box.data)
    numel = lambda size: sympy.expand(sympy.Mul(*[to_sympy(s) for s in size]))  # noqa: E731
    diff = sympy.expand(numel(box.get_size()) - numel(root.get_size()))
    if not root.is_realized() and diff.is_positive:
        root.realize()


def _strides_equal(layout: Layout, want) -> bool:
    return all(n == 1 or sympy.expand(to_sympy(a) - to_sympy(b)) == 0
               for n, a, b in zip(layout.size, layout.stride, want))


def as_strided_view(view: View) -> Optional[ReinterpretView]:
    """``view`` as a strided alias of a realized buffer, if its index is affine."""
    vars_ = ir.index_vars("v", len(view.size))
    value = view.make_loader()(vars_)
    if not isinstance(value, Load) or value.indirect:
        return None
    buffer = current_graph().buffers[value.buffer]
    index = sympy.expand(value.index.subs({v: 0 for v, n in zip(vars_, view.size) if n == 1}))
    offset = index.subs({v: 0 for v in vars_})
    strides = [index.coeff(v) for v in vars_]
    if any(s.free_symbols & set(vars_) for s in strides):
        return None
    if sympy.expand(offset + sum((v * s for v, s in zip(vars_, strides)), sympy.Integer(0)) - index) != 0:
        return None
    return ReinterpretView(buffer, Layout(list(view.size), strides, offset, buffer.dtype, buffer.device))


def loader_for(x, dtype: Optional[torch.dtype] = None) -> Callable:
    """A loader for a box or a scalar (Python number or sympy expression)."""
    if isinstance(x, TensorBox):
        load = x.make_loader()
        return load if dtype is None else (lambda idx: cast(load(idx), dtype))
    if isinstance(x, sympy.Basic):
        value = IndexValue(x, dtype or (torch.float64 if not x.is_integer else torch.int64))
        return lambda idx: value
    if isinstance(x, bool):
        value = Constant(x, dtype or torch.bool)
    elif isinstance(x, int):
        value = Constant(x, dtype or torch.int64)
    else:
        value = Constant(float(x), dtype or torch.float32)
    value = cast(value, dtype) if dtype is not None else value
    return lambda idx: value


def broadcast_loader(x, size: list, dtype: Optional[torch.dtype] = None) -> Callable:
    """Loader of ``x`` broadcast (ATen rules, right-aligned) to ``size``."""
    load = loader_for(x, dtype)
    if not isinstance(x, TensorBox):
        return load
    xsize = x.get_size()
    lead = len(size) - len(xsize)
    ones = [i for i, n in enumerate(xsize) if n == 1]

    def reindexed(idx):
        sub = list(idx[lead:])
        for i in ones:
            sub[i] = sympy.Integer(0)
        return load(sub)

    return reindexed

