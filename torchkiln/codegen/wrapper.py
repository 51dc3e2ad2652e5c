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
from .nodes import Buffer, ComputedBuffer, ExternKernel, InputBuffer, MultiOutput, MutationBuffer, ReinterpretView
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

    # ---- printing helpers
    def const(self, value) -> str:
        # a tensor (a prepacked weight, codegen/freezing.py) is its own constant
        key = (type(value), id(value)) if isinstance(value, torch.Tensor) else (type(value), repr(value))
        if key not in self._consts:
            name = f"_c{len(self._consts)}"
            self._consts[key] = name
            self.globals[name] = value
        return self._consts[key]

    def arg(self, a) -> str:
        if isinstance(a, ReinterpretView):  # an extern call's argument: an input itself is fine
            return self.view(a, inputs=True)
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
                and list(base.layout.size) == list(lay.size) and list(base.layout.stride) == list(lay.stride)):
            return base.name  # the buffer as allocated (or restrided): the view would be itself
        return self._as_strided(v)

    def _as_strided(self, v: ReinterpretView) -> str:
        lay = v.layout
        return f"reinterpret({v.base.name}, {self.shape(lay.size)}, {self.shape(lay.stride)}, {pexpr(lay.offset)})"

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
            if isinstance(buf, InputBuffer) and any(n != 1 for n in buf.layout.size):
                # kernels index inputs with the fake strides: never read another layout
                stride = self.shape(buf.layout.stride)
                if name in mutated:
                    body.append(f"assert {name}.stride() == {stride} or {name}.numel() <= 1, 'unexpected strides'")
                else:
                    body.append(f"if {name}.stride() != {stride}: "
                                f"{name} = restride({name}, {self.shape(buf.layout.size)}, {stride})")
        body += self.generator.prologue([e for e in self.entries if isinstance(e, FusedKernel)])
        uses = self._uses()
        reuse = self._plan_reuse(uses)
        taken = set(reuse.values())
        allocated: set = set()
        for i, e in enumerate(self.entries):
            if isinstance(e, FusedKernel):
                for b in e.buffers:
                    buf = g.buffers[b.name]
                    if b.stored and b.name not in allocated and isinstance(buf, ComputedBuffer):
                        body.append(self._allocate(buf, reuse.get(b.name)))
                        allocated.add(b.name)
                launch = self.generator.call(e, e.call_args())
                if config.kernel_profile:
                    body += [f"with _kiln_record('kiln_kernel:{e.name}'):", "    " + launch]
                else:
                    body.append(launch)
            elif isinstance(e, MultiOutput):
                body.append(f"{e.name} = {e.parent.name}" + "".join(f"[{j}]" for j in e.path))
                body.append(self._check_strides(e))
            else:
                op = self.const(e.op)
                args = [self.arg(a) for a in e.args] + [f"{k}={self.arg(v)}" for k, v in e.kwargs.items()]
                body.append(f"{e.name} = {op}({', '.join(args)})")
                body += self._bind_unbacked(e)
                if e.layout is not None:
                    body.append(self._check_strides(e))
            dead = sorted(n for n, last in uses.items()
                          if last == i and n not in taken and not isinstance(g.buffers.get(n), InputBuffer))
            if dead:
                body.append(f"del {', '.join(dead)}")
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
        self.lines.append(f"output_strides = {self._output_strides()!r}")
        return "\n".join(self.lines) + "\n", self.globals

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
        """{new buffer: dead buffer whose storage it takes} (same dtype, device, storage size)."""
        g = self.graph
        pool: dict = {}
        reuse: dict = {}
        seen: set = set()
        for i, e in enumerate(self.entries):
            if isinstance(e, FusedKernel):
                for b in e.buffers:
                    buf = g.buffers[b.name]
                    if b.stored and b.name not in seen and isinstance(buf, ComputedBuffer):
                        seen.add(b.name)
                        key = (buf.dtype, buf.device, sympy.expand(buf.layout.storage_size()))
                        if pool.get(key):
                            reuse[b.name] = pool[key].pop()
            for n, last in uses.items():
                buf = g.buffers.get(n)
                if last == i and isinstance(buf, ComputedBuffer):
                    key = (buf.dtype, buf.device, sympy.expand(buf.layout.storage_size()))
                    pool.setdefault(key, []).append(n)
        return reuse

    def _allocate(self, buf: ComputedBuffer, old) -> str:
        lay = buf.layout
        if old is not None:
            olay = self.graph.buffers[old].layout
            if list(olay.size) == list(lay.size) and list(olay.stride) == list(lay.stride):
                return f"{buf.name} = {old}; del {old}  # reuse"
            return f"{buf.name} = reinterpret({old}, {self.shape(lay.size)}, {self.shape(lay.stride)}, 0); del {old}  # reuse"
        return (f"{buf.name} = empty_strided({self.shape(lay.size)}, {self.shape(lay.stride)}, "
                f"dtype={self.const(lay.dtype)}, device={self.const(lay.device)})")


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
