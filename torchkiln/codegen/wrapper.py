"""Wrapper code: the generated Python function that runs one compiled graph.

It binds size symbols from the inputs (``s0 = arg0_1.size(0)``), allocates buffers
with ``empty_strided`` (the fake values' strides for outputs, as eager's), launches
kernels and extern calls in order, frees each buffer after its last use (``del
buf3``), reuses the storage of dead buffers of the same dtype and size, and returns
the outputs (views of buffers as ``as_strided`` aliases).  Mirrors TorchInductor's
``PythonWrapperCodegen``; the source is printed by ``TORCHKILN_LOGS=output_code``.
"""
from __future__ import annotations

import math

import sympy
import torch

from . import config
from .ir import FusedKernel
from .nodes import (Buffer, ComputedBuffer, ExternKernel, InputBuffer, MultiOutput, MutationBuffer, ReinterpretView,
                    contiguous_strides)
from ..shapes.checks import DEFAULT_MESSAGE, user_checks
from .printers import pexpr
from .wrapper_runtime import base_globals


class WrapperCodegen:
    """Builds the wrapper source for a scheduled graph; ``generate()`` returns (source, globals)."""

    def __init__(self, graph, entries, generator, kernel_objects: dict) -> None:
        self.graph = graph
        self.entries = entries
        self.generator = generator
        self.globals = {**base_globals(), **kernel_objects, **graph.constants}
        self.lines: list[str] = []
        self._consts: dict = {}
        self._bound: set = set()     # unbacked symbols bound so far
        self._asserted: set = set()  # runtime asserts emitted
        self._fresh: set = set()     # buffers the wrapper allocated: storage offset 0
        self._same: dict = {}        # buffer -> the first name of its tensor object (``reuse`` renames)
        self._views: dict = {}       # (tensor object's first name, view) -> variable holding the view
        self._view_count = 0
        self._callers: dict = {}     # extern op -> the name of its direct callable
        self._preamble: list[str] = []
        self._allocators: set = set()  # names of the CPU allocators the preamble binds
        self._shapes: dict = {}      # buffer -> the size it is allocated with, if not its own
        # extern kernels whose result the wrapper allocates (``out=``, from the reuse pool)
        self._out_variant = {e.name: out for e in entries if isinstance(e, ExternKernel)
                             and (out := out_overload(e)) is not None}

    # ---- printing helpers
    def const(self, value) -> str:
        # a tensor (a prepacked weight, codegen/freezing.py) is its own constant
        key = (type(value), id(value)) if isinstance(value, torch.Tensor) else (type(value), repr(value))
        if key not in self._consts:
            name = f"_c{len(self._consts)}"
            self._consts[key] = name
            self.globals[name] = value
        return self._consts[key]

    def caller(self, op) -> str:
        """The name of what the wrapper calls for extern ``op``: an ``OpOverload``'s own
        builtin (``op._op``, what ``OpOverload.__call__`` forwards to; one Python frame
        less per call), bound once when the wrapper is loaded; other callables as they are."""
        name = self.const(op)
        if type(op) is not torch._ops.OpOverload:
            return name
        if op not in self._callers:
            self._callers[op] = f"{name}_call"
            self._preamble.append(f"{name}_call = extern_callable({name})")
        return self._callers[op]

    def arg(self, a) -> str:
        if isinstance(a, ReinterpretView):  # an extern call's argument: an input itself is fine
            return self._kept_view(a.base.name, self.extern_view(a))
        if isinstance(a, Buffer):
            return a.name
        if isinstance(a, sympy.Basic):
            return pexpr(a)
        if isinstance(a, list):
            return "[" + ", ".join(self.arg(b) for b in a) + "]"
        if isinstance(a, tuple):
            return "(" + "".join(self.arg(b) + ", " for b in a) + ")"
        if a is None or isinstance(a, (bool, str)) or (isinstance(a, int)):
            return repr(a)
        if isinstance(a, float) and math.isfinite(a):
            return repr(a)
        return self.const(a)

    def shape(self, exprs) -> str:
        return "(" + "".join(pexpr(e) + ", " for e in exprs) + ")"

    def view(self, v: ReinterpretView, inputs: bool = False) -> str:
        """``v`` as an expression: its buffer when the view would be the buffer itself (for
        a graph input only with ``inputs``: a returned view of an input must stay a new
        tensor object, as eager's; the prologue gave every input its fake strides)."""
        lay = v.layout
        base = v.base
        if ((inputs or not isinstance(base, InputBuffer)) and base.layout is not None and lay.offset == 0
                and self._allocated_as(base) == (list(lay.size), list(lay.stride))):
            return base.name  # the buffer as allocated (or restrided): the view would be itself
        return self._as_strided(v)

    def _allocated_as(self, buf) -> tuple[list, list]:
        """(size, strides) of the tensor object the wrapper holds for ``buf``."""
        size = self._shapes.get(buf.name)
        if size is not None:
            return list(size), contiguous_strides(size)
        return list(buf.layout.size), list(buf.layout.stride)

    def _allocation_shapes(self) -> dict:
        """{buffer: size} for the wrapper-allocated, row-major buffers that only kernels
        (through ``data_ptr()``) and extern calls or outputs through one row-major
        reshape of them use (a [4, 32, 128] LayerNorm output read as the [128, 128] input
        of its GEMMs): allocated in that shape, the extern argument is the buffer itself,
        not an ``as_strided`` view made per call (~2 us each).  Its data is the same."""
        g = self.graph
        own = {n for _, names in self._allocations() for n in names if n not in self._out_variant}
        wanted: dict = {}
        plain: set = set()

        def visit(a):
            if isinstance(a, ReinterpretView) and a.base.name in own:
                wanted.setdefault(a.base.name, set()).add(_reshape_of(a))
            elif isinstance(a, Buffer):
                plain.add(a.name)
            elif isinstance(a, (list, tuple)):
                for b in a:
                    visit(b)

        for e in self.entries:
            if isinstance(e, ExternKernel):
                visit(list(e.args))
                visit(list(e.kwargs.values()))
        visit(list(g.outputs))
        out = {}
        for name, sizes in wanted.items():
            lay = g.buffers[name].layout
            if (name not in plain and len(sizes) == 1 and None not in sizes
                    and list(lay.stride) == contiguous_strides(lay.size)):
                out[name] = list(next(iter(sizes)))
        return out

    def _as_strided(self, v: ReinterpretView) -> str:
        lay = v.layout
        if v.base.name in self._fresh:  # storage offset 0: as_strided's offset is the view's
            offset = "" if lay.offset == 0 else f", {pexpr(lay.offset)}"
            return f"{v.base.name}.as_strided({self.shape(lay.size)}, {self.shape(lay.stride)}{offset})"
        return f"reinterpret({v.base.name}, {self.shape(lay.size)}, {self.shape(lay.stride)}, {pexpr(lay.offset)})"

    def _kept_view(self, base: str, text: str) -> str:
        """A view of a wrapper-allocated tensor made once per tensor object: a ``reuse``
        that keeps the shape (``buf4 = buf0``) renames the same object, so ``buf4.t()``
        is the ``buf0.t()`` made before (its ``t()`` or ``as_strided`` cost ~2 us per
        call; a weight gradient ``mm(g.t(), x)`` per layer).  Kept in a variable until
        the object is freed or its storage taken under another shape (:meth:`_drop_views`)."""
        if base not in self._fresh or not text.startswith(base + "."):
            return text
        root = self._same.get(base, base)
        key = (root, text[len(base):])
        var = self._views.get(key)
        if var is not None:
            return var
        self._view_count += 1
        var = self._views[key] = f"{root}_v{self._view_count}"
        return f"({var} := {text})"

    def _drop_views(self, names) -> list[str]:
        """The view variables of the tensor objects ``names`` (being freed)."""
        roots = {self._same.get(n, n) for n in names}
        dropped = [var for (root, _), var in self._views.items() if root in roots]
        self._views = {k: v for k, v in self._views.items() if k[0] not in roots}
        return dropped

    def extern_view(self, v: ReinterpretView) -> str:
        """``v`` as an extern call's argument.  Besides :meth:`view`'s cases, a view that
        ``t()`` or ``view(sizes)`` make from the base's own layout is made by them (no
        storage offset to read: they keep the base's).  The base has its layout's strides
        at run time (inputs are restrided by the prologue, extern results checked, buffers
        allocated with them), up to the strides of size-1 dims, which address nothing."""
        text = self.view(v, inputs=True)
        blay, lay = v.base.layout, v.layout
        made = text.startswith("reinterpret(") or text.startswith(f"{v.base.name}.as_strided(")
        if not made or blay is None or lay.offset != 0:
            return text
        bsize, bstride, size, stride = list(blay.size), list(blay.stride), list(lay.size), list(lay.stride)
        perm = _permutation(bsize, bstride, size, stride)
        if perm is not None:
            return f"{v.base.name}.t()" if perm == [1, 0] else f"{v.base.name}.permute({self.shape(perm)})"
        if (bstride == contiguous_strides(bsize) and stride == contiguous_strides(size)
                and sympy.expand(sympy.Mul(*bsize) - sympy.Mul(*size)) == 0):
            return f"{v.base.name}.view({self.shape(size)})"
        return text

    # ---- buffer lifetimes
    def _uses(self):
        uses: dict[str, int] = {}
        for i, e in enumerate(self.entries):
            for name in self._entry_names(e):
                uses[name] = i
        for out in self.graph.outputs:
            if isinstance(out, (Buffer, ReinterpretView)):
                uses[out.name] = len(self.entries)
        self._extend_to_waits(uses)
        # an extern view op's result shares its input's storage (view.dtype, as_strided...):
        # the input lives as long as the result, or its storage is reused under the view
        for e in reversed(self.entries):
            if isinstance(e, MultiOutput) and e.name in uses and _may_alias(e.parent):
                uses[e.parent.name] = max(uses.get(e.parent.name, -1), uses[e.name])
            elif isinstance(e, ExternKernel) and e.name in uses and _may_alias(e):
                for name in self._entry_names(e)[1:]:
                    uses[name] = max(uses.get(name, -1), uses[e.name])
        return uses

    def _extend_to_waits(self, uses) -> None:
        """A collective (``_c10d_functional``) may read its inputs until its ``wait_tensor``
        returns: they stay alive, and their storage is not reused, until that wait."""
        pending: dict[str, list[str]] = {}
        for i, e in enumerate(self.entries):
            op = getattr(e, "op", None)
            if not (isinstance(op, torch._ops.OpOverload) and op.namespace == "_c10d_functional"):
                continue
            names = self._entry_names(e)
            if op.__name__.startswith("wait_tensor"):
                for name in names[1:]:
                    for arg in pending.pop(name, ()):
                        uses[arg] = max(uses[arg], i)
            else:
                pending[e.name] = names[1:]

    def _entry_names(self, e):
        if isinstance(e, FusedKernel):
            return [b.name for b in e.buffers]
        if isinstance(e, MultiOutput):
            return [e.parent.name, e.name]
        names = [e.name]

        def walk(a):
            if isinstance(a, (Buffer, ReinterpretView)):
                names.append(a.name)
            elif isinstance(a, (list, tuple)):
                for b in a:
                    walk(b)

        walk(e.args)
        walk(list(e.kwargs.values()))
        return names

    def generate(self):
        g = self.graph
        params = [name for name, _ in g.inputs]
        self.lines.append(f"def call({', '.join(params)}):")
        body = []
        for sym, src in g.symbol_sources.items():
            body.append(f"{sym} = {src}")
        mutated = {b.target.name for b in g.buffers.values() if isinstance(b, MutationBuffer)}
        for name, buf in g.inputs:
            if name in g.guarded_strides and name not in mutated:
                continue  # capture's guard checked these strides before the call
            if isinstance(buf, InputBuffer) and any(n != 1 for n in buf.layout.size):
                # kernels index inputs with the fake strides: never read another layout
                stride = self.shape(buf.layout.stride)
                if name in mutated:
                    body.append(f"assert {name}.stride() == {stride} or {name}.numel() <= 1, 'unexpected strides'")
                elif _static_contiguous(buf.layout):
                    # restride keeps a tensor whose strides differ only where a dim has
                    # size 1 (or that is empty): exactly what is_contiguous() accepts;
                    # one bool instead of a strides tuple made and compared (~0.3 us)
                    body.append(f"if not {name}.is_contiguous(): "
                                f"{name} = restride({name}, {self.shape(buf.layout.size)}, {stride})")
                else:
                    body.append(f"if {name}.stride() != {stride}: "
                                f"{name} = restride({name}, {self.shape(buf.layout.size)}, {stride})")
        body += self.generator.prologue([e for e in self.entries if isinstance(e, FusedKernel)])
        uses = self._uses()
        self._shapes = self._allocation_shapes()
        reuse = self._plan_reuse(uses)
        taken = set(reuse.values())
        allocated: set = set()
        groups = self.generator.launch_groups()
        # inside a launch group (its members before the last): buffers whose storage a
        # later member's output took (old name -> new), frees held until the launch
        renamed: dict = {}
        held: list = []
        for i, e in enumerate(self.entries):
            if isinstance(e, FusedKernel):
                group = groups.get(e.name)
                for b in e.buffers:
                    buf = g.buffers[b.name]
                    if b.stored and b.name not in allocated and isinstance(buf, ComputedBuffer):
                        old = reuse.get(b.name)
                        body.append(self._allocate(buf, old))
                        allocated.add(b.name)
                        if group is not None and old is not None:
                            renamed[old] = b.name
                if group is not None:
                    if e is not group.members[-1]:
                        held += [n for n, last in uses.items() if last == i and n not in taken
                                 and not isinstance(g.buffers.get(n), InputBuffer)]
                        continue
                    args = []
                    for name in group.call_args():
                        while name in renamed:
                            name = renamed[name]
                        args.append(name)
                    body.append(self.generator.call(group, args))
                    renamed = {}
                else:
                    launch = self.generator.call(e, e.call_args())
                    if config.kernel_profile:
                        body += ["_kiln_t = _kiln_clock()", launch,
                                 "_kiln_kernel_time[0] += _kiln_clock() - _kiln_t; _kiln_kernel_time[1] += 1"]
                    else:
                        body.append(launch)
            elif isinstance(e, MultiOutput):
                body.append(f"{e.name} = {e.parent.name}" + "".join(f"[{j}]" for j in e.path))
                body.append(self._check_strides(e))
            elif e.name in self._out_variant:
                # the result's buffer (a dead one's storage if any) is ours: its layout,
                # dtype and storage offset are known, no check after the call
                allocated.add(e.name)
                if reuse.get(e.name) is not None:
                    body.append(self._allocate(e, reuse.get(e.name)))
                body.append(self._gemm(e, out=reuse.get(e.name) is not None))
            else:
                op = self.caller(e.op)
                args = [self.arg(a) for a in e.args] + [f"{k}={self.arg(v)}" for k, v in e.kwargs.items()]
                body.append(f"{e.name} = {op}({', '.join(args)})")
                body += self._bind_unbacked(e)
                if e.layout is not None:
                    body.append(self._check_strides(e))
            dead = sorted(held + [n for n, last in uses.items()
                                  if last == i and n not in taken and not isinstance(g.buffers.get(n), InputBuffer)])
            held = []
            if dead:
                body.append(f"del {', '.join(dead + self._drop_views(dead))}")
        outs = []
        bases = [o.base.name if isinstance(o, ReinterpretView) else getattr(o, "name", None) for o in g.outputs]
        for out, base in zip(g.outputs, bases):
            if isinstance(out, ReinterpretView):
                # two outputs on one buffer stay two tensor objects, as eager's would be
                shared = bases.count(base) > 1
                outs.append(self._as_strided(out) if shared else self.view(out))
            else:
                outs.append(self.arg(out))
        body.append("return (" + "".join(o + ", " for o in outs) + ")")
        self.lines += ["    " + line for line in body]
        self.lines[:0] = self._preamble
        self.lines.append(f"output_strides = {self._output_strides()!r}")
        return "\n".join(self.lines) + "\n", self.globals

    def _gemm(self, e, out: bool) -> str:
        """A GEMM extern call: into its buffer (``out=``) when that takes a dead buffer's
        storage, else through the functional overload, which allocates the result as
        ``empty_strided`` would (dense row-major, storage offset 0, the inputs' dtype):
        one call instead of two (~1 us per GEMM on small shapes).  ``addmm(bias, x, w.t())``
        and ``mm(x, w.t())`` of a 2-D ``w`` are called as ``linear(x, w, bias)`` /
        ``linear(x, w, None)``, which is that ``addmm`` / ``mm`` in ATen, without a
        transposed view of ``w`` made in Python per call (0.4-0.7 us less per GEMM)."""
        self._fresh.add(e.name)
        gemm = {torch.ops.aten.addmm.default: 3, torch.ops.aten.mm.default: 2}.get(e.op)
        w = e.args[-1] if gemm == len(e.args) else None
        linear = getattr(torch.ops.aten.linear, "out" if out else "default", None)
        if (w is not None and not e.kwargs and isinstance(w, ReinterpretView)
                and linear is not None and self.extern_view(w) == f"{w.base.name}.t()"):
            args = [self.arg(e.args[-2]), w.base.name, self.arg(e.args[0]) if gemm == 3 else "None"]
            op = linear
        else:
            args = [self.arg(a) for a in e.args] + [f"{k}={self.arg(v)}" for k, v in e.kwargs.items()]
            op = self._out_variant[e.name] if out else e.op
        if out:
            return f"{self.caller(op)}({', '.join(args)}, out={e.name})"
        return f"{e.name} = {self.caller(op)}({', '.join(args)})"

    def _output_strides(self) -> tuple:
        """Each output's strides as ints (None: not a tensor, or symbolic strides): what the
        backward of a forward graph is compiled for (``CompiledGraph.output_strides``)."""
        out = []
        for o in self.graph.outputs:
            lay = getattr(o, "layout", None) if isinstance(o, (Buffer, ReinterpretView)) else None
            strides = None
            if lay is not None and all(sympy.sympify(x).is_Integer for x in lay.stride):
                strides = tuple(int(x) for x in lay.stride)
            out.append(strides)
        return tuple(out)

    def _bind_unbacked(self, e) -> list[str]:
        """``u0 = buf3.size(0)`` for each unbacked symbol extern ``e`` defines, then the
        runtime asserts the ShapeEnv deferred on them (``torch._check``, a size's
        ``u0 >= 0``, ``split``'s sizes adding up) as soon as all their symbols are bound."""
        bindings = getattr(e, "bindings", None)
        if not bindings:
            return []
        lines = [f"{sym} = {keypath_code(e.name, path)}" for sym, path in bindings.items()]
        self._bound.update(bindings)
        env = self.graph.shape_env
        known = self._bound | set(self.graph.symbol_sources)
        for check in user_checks(env):  # the user's torch._check*: eager's error and message
            free = check.cond.free_symbols
            if check.cond is not sympy.true and free & set(bindings) and free <= known:
                lines.append(self._raise_unless(check.cond, check.error_type, check.message, e.op))
        checks = []
        for sym in bindings:
            vr = env.var_to_range.get(sym)
            if vr is not None and sym.name.startswith("u"):
                if _finite(vr.lower):
                    checks.append(sympy.Le(vr.lower, sym, evaluate=False))
                if _finite(vr.upper):
                    checks.append(sympy.Le(sym, vr.upper, evaluate=False))
        for ras in env.deferred_runtime_asserts.values():
            for ra in ras:
                free = ra.expr.free_symbols
                if free & set(bindings) and free <= self._bound | set(self.graph.symbol_sources):
                    checks.append(ra.expr)
        for expr in checks:
            text = pexpr(expr)
            if text not in self._asserted:
                self._asserted.add(text)
                values = ", ".join(f"{n}={{{n}}}" for n in sorted(map(str, expr.free_symbols)))
                lines.append(f'if not ({text}): raise RuntimeError(f"torchkiln runtime assertion failed: {text} '
                             f'({values}; data-dependent values from {e.op})")')
        return lines

    def _raise_unless(self, cond, error_type, message, op) -> str:
        """``if not (cond): raise error_type(message)``; no message: torch's default text,
        then the condition and the values that broke it."""
        import builtins

        text = pexpr(cond)
        error = error_type.__name__ if getattr(builtins, error_type.__name__, None) is error_type \
            else self.const(error_type)
        if message is None:
            values = ", ".join(f"{n}={{{n}}}" for n in sorted(map(str, cond.free_symbols)))
            message = f"{DEFAULT_MESSAGE!r} + f\" (torchkiln: {text} is False; {values}; data-dependent values from {op})\""
        else:
            message = repr(message)
        return f"if not ({text}): raise {error}({message})"

    def _check_strides(self, buf) -> str:
        """Kernels index an extern result with the fake value's strides; if the ATen
        kernel chose others at run time, copy it into that layout (never read it wrong).
        An ATen kernel may return an undefined tensor (None) for an output its fake
        kernel describes as empty, e.g. the RNN workspace in inference.  A result whose
        dtype is not the fake value's (a wrong meta: torch's ``prims.signbit`` says float64,
        returns bool) is converted to it: the kernels would read its bytes as that dtype."""
        lay = buf.layout
        size, stride = self.shape(lay.size), self.shape(lay.stride)
        dtype = self.const(buf.dtype)
        return (f"if {buf.name} is not None and ({buf.name}.stride() != {stride} or {buf.name}.dtype != {dtype}): "
                f"{buf.name} = restride({buf.name}.to({dtype}), {size}, {stride})")

    def _plan_reuse(self, uses) -> dict:
        """{new buffer: dead buffer whose storage it takes} (same dtype, device, storage size).

        The wrapper's allocations, in order: the buffers kernels store to and the results
        of ``out=`` extern calls.  A buffer joins the pool after the entry of its last use
        (``uses``: extended to the last use of anything that may alias it), so an entry
        never writes into the storage of a buffer it reads, and two live buffers never
        share storage."""
        return plan_reuse(self._allocations(), uses, self._key)

    def _allocations(self) -> list:
        """[(entry index, buffer names the wrapper allocates there)]."""
        g = self.graph
        seen: set = set()
        plan = []
        for i, e in enumerate(self.entries):
            names = []
            if isinstance(e, FusedKernel):
                for b in e.buffers:
                    if b.stored and b.name not in seen and isinstance(g.buffers[b.name], ComputedBuffer):
                        seen.add(b.name)
                        names.append(b.name)
            elif getattr(e, "name", None) in self._out_variant:
                names.append(e.name)
            plan.append((i, names))
        return plan

    def _key(self, name):
        buf = self.graph.buffers.get(name)
        if buf is None or not (isinstance(buf, ComputedBuffer) or name in self._out_variant):
            return None  # not the wrapper's: its storage may be shared or offset
        return (buf.dtype, buf.device, sympy.expand(buf.layout.storage_size()))

    def _allocate(self, buf: Buffer, old) -> str:
        lay = buf.layout
        self._fresh.add(buf.name)
        size, stride = self._allocated_as(buf)
        if old is not None:
            if self._allocated_as(self.graph.buffers[old]) == (size, stride):
                self._same[buf.name] = self._same.get(old, old)  # the same tensor object
                return f"{buf.name} = {old}; del {old}  # reuse"
            stale = "".join(", " + var for var in self._drop_views([old]))
            return (f"{buf.name} = {old}.as_strided({self.shape(size)}, {self.shape(stride)}); del {old}{stale}"
                    "  # reuse")
        if getattr(lay.device, "type", None) == "cpu":
            return f"{buf.name} = {self._allocator(lay.dtype, lay.device)}({self.shape(size)}, {self.shape(stride)})"
        return (f"{buf.name} = empty_strided({self.shape(size)}, {self.shape(stride)}, "
                f"dtype={self.const(lay.dtype)}, device={self.const(lay.device)})")

    def _allocator(self, dtype, device) -> str:
        """A CPU buffer's allocator: ``new_empty_strided`` bound to an empty tensor of its
        dtype and device, made once when the wrapper is loaded.  The same uninitialized
        dense tensor as ``empty_strided(size, stride, dtype=, device=)`` without parsing
        two keyword arguments per call (~0.5 us of a ~3 us allocation; hooked_small's
        training step allocates 19 buffers).  CPU only: a CUDA device without an index
        means the current device when the call is made."""
        dt, dev = self.const(dtype), self.const(device)
        name = f"{dt}{dev}_empty_strided"
        if name not in self._allocators:
            self._allocators.add(name)
            self._preamble.append(f"{name} = empty_strided((0, ), (1, ), dtype={dt}, device={dev}).new_empty_strided")
        return name


def plan_reuse(allocations, uses: dict, key) -> dict:
    """{new buffer: dead buffer whose storage it takes}.

    ``allocations``: ``[(entry index, [names allocated there])]`` in order; ``uses``:
    ``{name: index of the entry of its last use}``; ``key(name)``: what two buffers must
    share to swap storage (dtype, device, storage size), None for a buffer that is never
    reused nor reuses.  A buffer becomes free after the entry of its last use, and each
    free storage is taken at most once, so the buffers live at any entry have distinct
    storages."""
    pool: dict = {}
    reuse: dict = {}
    dying: dict = {}
    for n, last in uses.items():
        dying.setdefault(last, []).append(n)
    for i, names in allocations:
        for n in names:
            k = key(n)
            if k is not None and pool.get(k):
                reuse[n] = pool[k].pop()
        for n in sorted(dying.get(i, ())):
            k = key(n)
            if k is not None:
                pool.setdefault(k, []).append(n)
    return reuse


def out_overload(e):
    """The ``out=`` overload of extern ``e`` when its result can be a buffer the wrapper
    allocates (a GEMM whose fake result is dense row-major, as ATen's own), else None.
    ATen's ``*.out`` kernels write a correctly sized ``out`` in place, whatever it held."""
    if e.op not in _OUT_OPS or e.layout is None or e.mutated or getattr(e, "bindings", None):
        return None
    lay = e.layout
    if lay.offset != 0 or list(lay.stride) != contiguous_strides(lay.size):
        return None
    return getattr(e.op.overloadpacket, "out", None)


_OUT_OPS = frozenset({torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
                      torch.ops.aten.baddbmm.default})


def _reshape_of(v: ReinterpretView):
    """``v``'s size when ``v`` is a row-major reshape of all of its row-major base
    (offset 0, the same number of elements), else None."""
    lay, blay = v.layout, v.base.layout
    if (blay is None or lay.offset != 0 or list(lay.stride) != contiguous_strides(lay.size)
            or sympy.expand(sympy.Mul(*lay.size) - sympy.Mul(*blay.size)) != 0):
        return None
    return tuple(lay.size)


def _static_contiguous(layout) -> bool:
    """Whether ``layout`` has integer sizes and the row-major strides of them."""
    size, stride = list(layout.size), list(layout.stride)
    if not all(isinstance(x, int) or getattr(x, "is_Integer", False) for x in size + stride):
        return False
    return [int(x) for x in stride] == [int(x) for x in contiguous_strides(size)]


def _permutation(bsize, bstride, size, stride):
    """``perm`` with ``size[i], stride[i] == bsize[perm[i]], bstride[perm[i]]`` (a view that
    ``base.permute(perm)`` makes), for static sizes above 1 each; else None."""
    if len(size) != len(bsize) or len(size) < 2:
        return None
    if not all(isinstance(n, sympy.Integer) and n > 1 for n in bsize):
        return None
    free = list(range(len(bsize)))
    perm = []
    for n, st in zip(size, stride):
        match = next((j for j in free if bsize[j] == n and bstride[j] == st), None)
        if match is None:
            return None
        free.remove(match)
        perm.append(match)
    return perm


def _finite(bound) -> bool:
    try:
        int(bound)
        return True
    except (TypeError, ValueError, OverflowError, AttributeError):
        return False


def keypath_code(name: str, path) -> str:
    """Python source reading the value at ``path`` (an ``unbacked_bindings`` key path:
    ``.size()[0]``, a tuple element, a bool as int...) of the variable ``name``."""
    from torch.fx.experimental.symbolic_shapes import CallMethodKey, ConvertIntKey, DivideByKey
    from torch.utils._pytree import SequenceKey

    code = name
    for key in path:
        if isinstance(key, CallMethodKey):
            code = f"{code}.{key.name}()"
        elif isinstance(key, SequenceKey):
            code = f"{code}[{key.idx}]"
        elif isinstance(key, ConvertIntKey):
            code = f"(1 if {code} else 0)"
        elif isinstance(key, DivideByKey):
            code = f"({code} // {key.divisor})"
        else:
            raise NotImplementedError(f"unbacked binding path {path}")
    return code


def _may_alias(e) -> bool:
    """Whether an extern kernel's result may share storage with an argument (a view op,
    or an op without a schema)."""
    schema = getattr(e.op, "_schema", None)
    if schema is None:
        return True
    return any(r.alias_info is not None for r in schema.returns)
