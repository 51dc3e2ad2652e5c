"""The loop-level IR: what a fused kernel looks like to a kernel generator.

This is the contract between the scheduler and every kernel generator (C++ in
``codegen/cpp``, Triton in ``codegen/triton``); ``docs/codegen.md`` describes it in
prose.  It mirrors the shape of TorchInductor's kernels (iteration ranges, loads with
index expressions, pointwise compute, reductions, stores) but is plain data: every
value is a small frozen dataclass, so two equal sub-expressions compare and hash equal
and a generator gets common-subexpression elimination from a dict.

A :class:`FusedKernel` iterates ``ranges`` (the outer, parallel iteration space,
index variables ``x0, x1, ...``) and, per outer point, runs its :class:`Loop` s in order.
A loop with ``reduction=False`` runs once per outer point; a loop with
``reduction=True`` runs for every point of ``reduction_ranges`` (variables
``r0, r1, ...``).  Values computed by a ``Reduce`` statement become readable as
:class:`ReductionValue` in every later loop of the same outer point.

Index expressions are sympy expressions over the index variables, size symbols
(``s0``, ``u0``, from the ShapeEnv) and indirect symbols (``i0``...; see
:class:`Indirect`).  They give the element offset from the buffer's data pointer
(the storage offset of a tensor is already inside its data pointer).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import sympy
import torch


class _Node:
    """Base of IR values: frozen, structurally compared, hash cached."""

    __slots__ = ()

    def __hash__(self) -> int:  # cached: trees are hashed again and again by CSE
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
            object.__setattr__(self, "_hash", h)
        return h


def _value(cls):
    cls = dataclasses.dataclass(frozen=True, eq=True)(cls)
    cls.__hash__ = _Node.__hash__
    return cls


# ---------------------------------------------------------------- values


@_value
class Load(_Node):
    """``buffer[index]`` converted to ``dtype`` (the buffer's dtype).

    ``indirect`` lists the :class:`Indirect` symbols used in ``index`` (gather, embedding,
    index): the generator computes each one before the load.
    """

    buffer: str
    index: sympy.Expr
    dtype: torch.dtype
    indirect: tuple = ()


@_value
class Indirect(_Node):
    """An index symbol whose value is computed in the kernel (an indirect index).

    ``value`` is an integer IR value; a negative value wraps by adding ``size`` (as
    Python and ATen indexing do) unless ``wrap`` is False (the lowering proved it
    non-negative).  With ``check`` (``codegen.config.assert_indirect_indexing``, unless
    the lowering proved the range, see :mod:`..bounds`) the generator checks the wrapped
    value against ``[0, size)``; an index outside raises in the wrapper the exception
    eager raises for the user's ``op`` (the ATen op's name) at dimension ``dim`` (C++:
    the kernel records the first failure and returns non-zero; Triton:
    ``tl.device_assert``, and a raise in the interpreter).  A failing point reads or
    writes element 0 of the dimension instead, so no access leaves the buffer.
    """

    symbol: sympy.Symbol
    value: Any
    size: sympy.Expr
    check: bool = False
    wrap: bool = True
    op: str = ""
    dim: int = 0


@_value
class Constant(_Node):
    """A Python scalar (``int``, ``float`` incl. inf/nan, ``bool``) of ``dtype``.

    Compared by its Python type and, for floats, its repr: ``0.0 == -0.0`` in Python,
    but ``x * -0.0`` is not ``x * 0.0`` (a dict-based CSE would merge them); nan equals
    nan here."""

    value: Any
    dtype: torch.dtype

    def _key(self):
        v = self.value
        return type(v), repr(v) if isinstance(v, float) else v, self.dtype

    def __eq__(self, other):
        return type(other) is Constant and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


@_value
class IndexValue(_Node):
    """The value of a sympy expression (an index or a size) as ``dtype``."""

    expr: sympy.Expr
    dtype: torch.dtype


@_value
class Op(_Node):
    """A pointwise operation ``name(*args)`` producing ``dtype``; names in :data:`OPS`.

    Arguments already have the operation's compute dtype (lowering inserts
    ``to_dtype``), except comparisons (both arguments share a dtype, result bool),
    ``where`` (a bool condition) and ``to_dtype`` itself (any argument).  Generators
    compute float16/bfloat16 values in float32 and round only in ``to_dtype`` and
    stores.
    """

    name: str
    args: tuple
    dtype: torch.dtype


@_value
class Masked(_Node):
    """``body`` where ``mask`` is true, else the constant ``other`` (pad, cat, slice_scatter).

    The loads inside ``body`` may be out of bounds where ``mask`` is false, so a
    generator must evaluate ``body`` only under the mask (a C++ ``if``, Triton's
    ``mask=`` on loads).
    """

    mask: Any
    body: Any
    other: Any
    dtype: torch.dtype


@_value
class ReductionValue(_Node):
    """The result of the ``Reduce`` statement called ``name`` (read in a later loop)."""

    name: str
    dtype: torch.dtype


#: Pointwise operation names every generator implements, by arity.
UNARY_OPS = frozenset(
    """neg abs exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan sinh
    cosh tanh asinh acosh atanh erf erfc erfinv sigmoid relu floor ceil round trunc sign signbit
    reciprocal isnan isinf isfinite logical_not bitwise_not lgamma to_dtype""".split()
)
BINARY_OPS = frozenset(
    """add sub mul truediv floordiv truncdiv remainder fmod pow atan2 maximum minimum eq ne lt le
    gt ge logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor lshift rshift
    copysign hypot""".split()
)
TERNARY_OPS = frozenset(["where"])
OPS = UNARY_OPS | BINARY_OPS | TERNARY_OPS
# math functions that cost tens of cycles per element (worth storing once, not recomputing)
TRANSCENDENTAL = frozenset("exp exp2 expm1 log log2 log10 log1p sin cos tan tanh erf erfc sigmoid asin acos "
                           "atan atan2 sinh cosh asinh acosh atanh lgamma pow".split())
COMPARISONS = frozenset("eq ne lt le gt ge".split())

#: Reduction types of :class:`Reduce`.  ``argmax``/``argmin`` give the int64 position
#: (``Reduce.index``) of the first extreme value, NaN counting as the extreme, as eager.
#: ``welford`` gives two results, the mean and the M2 (sum of squared deviations from the
#: mean) of the value, read as ``ReductionValue(welford_mean(name))`` and
#: ``ReductionValue(welford_m2(name))``.
REDUCTION_TYPES = frozenset("sum prod max min argmax argmin any all welford".split())


def welford_mean(name: str) -> str:
    """The :class:`ReductionValue` name of the mean of the ``welford`` Reduce ``name``."""
    return f"{name}_mean"


def welford_m2(name: str) -> str:
    """The :class:`ReductionValue` name of the M2 of the ``welford`` Reduce ``name``."""
    return f"{name}_m2"


# ---------------------------------------------------------------- statements


@dataclasses.dataclass
class Store:
    """``buffer[index] = value`` (``mode="atomic_add"``: ``buffer[index] += value``).

    ``indirect`` as in :class:`Load`.  A store with ``mode="atomic_add"`` or with
    indirect symbols may hit one element from several iterations (scatter,
    index_put); generators make that safe (atomics, or a serial loop).
    """

    buffer: str
    index: sympy.Expr
    value: Any
    mode: Optional[str] = None
    indirect: tuple = ()


@dataclasses.dataclass
class Reduce:
    """Accumulate ``value`` over the reduction ranges into the accumulator ``name``.

    ``dtype`` is the accumulator's dtype (float32 for float16/bfloat16 inputs, as eager;
    int64 for ``argmax``/``argmin``), ``index`` the flat position within the reduced
    dimensions (used by ``argmax``/``argmin`` only).

    ``reduction_type="welford"`` (floating ``dtype`` only) has two results, the mean and
    M2 = sum((value - mean)**2) over the ``n = reduction_numel`` points, computed in one
    pass with Welford's update (or any method as stable: not sum-of-squares); readable
    as ``ReductionValue(welford_mean(name))`` and ``ReductionValue(welford_m2(name))``.
    Over zero points both are 0.  It mirrors TorchInductor's ``welford_reduce``
    (var/var_mean, and through them layer_norm, batch_norm and group_norm).
    """

    name: str
    reduction_type: str
    value: Any
    dtype: torch.dtype
    index: Optional[sympy.Expr] = None


@dataclasses.dataclass
class Loop:
    """Statements run once per outer point, or for every reduction point."""

    reduction: bool
    body: list


@dataclasses.dataclass
class BufferArg:
    """A buffer a kernel reads or writes: its dtype and whether the kernel stores to it."""

    name: str
    dtype: torch.dtype
    stored: bool


@dataclasses.dataclass
class FusedKernel:
    """One generated kernel: iteration space, loops, and the buffers it touches.

    ``ranges`` and ``reduction_ranges`` are sympy sizes (empty lists mean one point);
    ``index_vars``/``reduction_vars`` the matching symbols.  ``buffers`` lists every
    buffer argument in call order; ``size_args`` the size symbols the kernel needs
    (passed after the buffers, as int64).  ``size_hints`` gives an example value of each
    size symbol (for block-size choices; never for correctness).
    """

    name: str
    device: torch.device
    ranges: list
    reduction_ranges: list
    index_vars: list
    reduction_vars: list
    loops: list
    buffers: list
    size_args: list
    size_hints: dict = dataclasses.field(default_factory=dict)

    @property
    def numel(self) -> sympy.Expr:
        return sympy_product(self.ranges)

    @property
    def reduction_numel(self) -> sympy.Expr:
        return sympy_product(self.reduction_ranges)

    def call_args(self) -> list[str]:
        """Names of the wrapper variables passed to the kernel, in order."""
        return [b.name for b in self.buffers] + [str(s) for s in self.size_args]

    def __str__(self) -> str:
        return format_kernel(self)


def sympy_product(items) -> sympy.Expr:
    return functools.reduce(lambda a, b: a * b, items, sympy.Integer(1))


def is_float_symbol(s: sympy.Symbol) -> bool:
    """A SymFloat's symbol (``zuf0`` from a float ``.item()``, ``zf0`` a float input): a
    kernel takes it as a double (C++) / fp32 (Triton) scalar argument, not an int64 size."""
    return s.name.startswith(("zuf", "zf"))


def index_vars(prefix: str, n: int) -> list[sympy.Symbol]:
    """``x0..x{n-1}`` (or ``r0..``): integer, non-negative index symbols."""
    return [sympy.Symbol(f"{prefix}{i}", integer=True, nonnegative=True) for i in range(n)]


def split_flat_index(flat: sympy.Expr, ranges) -> list[sympy.Expr]:
    """Per-dimension indices of a flat (row-major) index over ``ranges``.

    Kernel generators that iterate a flattened space (Triton's ``xindex``) substitute
    these for ``index_vars``: ``x_i = ModularIndexing(flat, prod(ranges[i+1:]), ranges[i])``.
    """
    from torch.utils._sympy.functions import FloorDiv, ModularIndexing

    out = []
    stride = sympy.Integer(1)
    if any(r == 0 for r in ranges):  # no point to index (a kernel over 0 elements): any split
        ranges = [sympy.Integer(1)] * len(ranges)
    for i in reversed(range(len(ranges))):
        if i == 0:
            out.append(FloorDiv(flat, stride) if stride != 1 else flat)
        else:
            out.append(ModularIndexing(flat, stride, ranges[i]))
        stride = stride * ranges[i]
    return list(reversed(out))


# ---------------------------------------------------------------- printing


def format_value(v, names: Optional[dict] = None) -> str:
    """A readable one-line rendering of an IR value (for logs and test failures)."""
    if isinstance(v, Load):
        ind = "".join(f", {i.symbol}={format_value(i.value)}" for i in v.indirect)
        return f"load({v.buffer}, {v.index}{ind})"
    if isinstance(v, Constant):
        return repr(v.value)
    if isinstance(v, IndexValue):
        return f"index({v.expr})"
    if isinstance(v, Op):
        if v.name == "to_dtype":
            return f"to_dtype({format_value(v.args[0])}, {v.dtype})"
        return f"{v.name}({', '.join(format_value(a) for a in v.args)})"
    if isinstance(v, Masked):
        return f"masked({format_value(v.mask)}, {format_value(v.body)}, {v.other!r})"
    if isinstance(v, ReductionValue):
        return v.name
    return repr(v)


def format_kernel(k: FusedKernel) -> str:
    lines = [f"kernel {k.name}({', '.join(k.call_args())}) on {k.device}:",
             f"  ranges {dict(zip(k.index_vars, k.ranges))} reduction {dict(zip(k.reduction_vars, k.reduction_ranges))}"]
    for loop in k.loops:
        lines.append("  reduction loop:" if loop.reduction else "  outer:")
        for s in loop.body:
            if isinstance(s, Store):
                mode = f" ({s.mode})" if s.mode else ""
                lines.append(f"    {s.buffer}[{s.index}] = {format_value(s.value)}{mode}")
            elif s.reduction_type == "welford":
                lines.append(f"    {welford_mean(s.name)}, {welford_m2(s.name)} = welford({format_value(s.value)})")
            else:
                lines.append(f"    {s.name} = {s.reduction_type}({format_value(s.value)})")
    return "\n".join(lines)
