"""The transformed code of a captured frame.

Rather than emitting bytecode for the whole frame, the transformed code is a Python
closure over *recipes* (``rt -> value``) built from trackers: it reads the graph inputs
from ``f_locals`` through their sources, runs the compiled graph, replays side effects,
rebuilds the values the rest of the frame needs (graph outputs, values read from
sources, containers and objects made in the frame), and either returns the frame's
result or — at a graph break — runs the breaking instruction in Python and calls the
resume function (see :mod:`.resume`), through the frontend's ``compile_wrapper`` so the
rest is captured as its own frame.  This is TorchDynamo's PyCodegen plus its
transformed-code prologue/epilogue, expressed as closures.
"""
from __future__ import annotations

import types

import torch

from .frame import SKIP_MODULES, LazyLocal
from .source import compile_getter, hoist_shared_prefixes


class Runtime:
    """Per-call state of the transformed code."""

    __slots__ = ("L", "outs", "memo", "entered", "read")

    def __init__(self, L, outs, read):
        self.L = L
        self.outs = outs
        self.memo = {}
        self.entered = []
        self.read = read  # the values of the sources recipes use, read before side effects


class RuntimeCodegen:
    """Builds recipes for trackers and collects the graph outputs they need."""

    def __init__(self, tx):
        self.tx = tx
        self.output = tx.output
        self.outputs = []
        self._out_index: dict = {}
        self._recipes: dict[int, object] = {}
        self.source_getters: list = []  # read on entry, before side effects (see from_source)
        self._source_index: dict[str, int] = {}

    def recipe(self, vt):
        from .variables.containers import BaseListVariable, DictVariable, ListIteratorVariable, SetVariable
        from .variables.base import CellVariable
        from .variables.user_defined import NewObjectVariable

        if isinstance(vt, LazyLocal):
            return self.from_source(vt.source)
        key = id(vt)
        if key in self._recipes:
            return self._recipes[key]
        inner = vt.reconstruct(self)
        if isinstance(vt, (BaseListVariable, DictVariable, SetVariable, NewObjectVariable, ListIteratorVariable,
                           CellVariable)) or getattr(vt, "rebuilt_once", False):
            def memoized(rt, inner=inner, key=key):
                value = rt.memo.get(key, rt)
                if value is rt:
                    value = rt.memo[key] = inner(rt)
                return value
            result = memoized
        else:
            result = inner
        self._recipes[key] = result
        return result

    def graph_output(self, vt):
        node = vt.node
        if node.op == "placeholder" and vt.source is not None:
            return self.from_source(vt.source)
        idx = self._out_index.get(node)
        if idx is None:
            idx = self._out_index[node] = len(self.outputs)
            self.outputs.append(vt)
        return lambda rt: rt.outs[idx]

    def from_source(self, source):
        """Recipe of the value at ``source`` as the frame found it: every source is read
        when the transformed code starts, before side effects are replayed (a replayed
        ``obj.attr = ...`` must not change what an earlier read of ``obj.attr`` gave)."""
        idx = self._source_index.get(source)
        if idx is None:
            idx = self._source_index[source] = len(self.source_getters)
            self.source_getters.append(compile_getter(source, self.output.guards.env))
        return lambda rt: rt.read[idx]

    def read_sources(self):
        """``fn(L) -> list``: the values of every source a recipe uses (see from_source)."""
        getters = self.source_getters
        return lambda L: [g(L) for g in getters]

    def is_mutated(self, vt) -> bool:
        return self.output.side_effects.is_mutated(vt)

    def contents_recipe(self, vt):
        """The new contents of a mutated pre-existing container (list / dict / set)."""
        from .variables.containers import DictVariable

        if isinstance(vt, DictVariable):
            pairs = [(self.recipe(k), self.recipe(v)) for k, v in vt.items.values()]
            return lambda rt: {k(rt): v(rt) for k, v in pairs}
        if hasattr(vt, "items") and isinstance(vt.items, dict):
            recipes = [self.recipe(v) for v in vt.items.values()]
        elif hasattr(vt, "items"):
            recipes = [self.recipe(v) for v in vt.items]
        else:
            return lambda rt: None
        return lambda rt: [r(rt) for r in recipes]

    def reenter(self, ctx):
        """Recipe entering a real copy of a context manager; yields its ``__exit__``."""
        make = ctx.make_real

        def enter(rt):
            real = make()
            real.__enter__()
            rt.entered.append(real)
            return real.__exit__
        return enter

    def inputs_getter(self):
        """``fn(L) -> tuple`` of the graph's inputs, each shared source prefix read once."""
        guards = self.output.guards
        hoisted = hoist_shared_prefixes([guards.read_source(i.source) for i in self.output.inputs])
        lines = ["def ___inputs(L):"]
        lines += ["    " + line for setup, _ in hoisted for line in setup]
        lines.append("    return (" + "".join(code + ", " for _, code in hoisted) + ")")
        namespace = dict(self.output.guards.env)
        exec(compile("\n".join(lines) + "\n", "<torchkiln inputs>", "exec"), namespace)
        return namespace["___inputs"]


def returning_code(compiled, inputs, read, side_effects, result):
    """Transformed code of a frame captured to its end: ``run(L, checked=None)``, where
    ``checked`` is what the guard returned on ``L`` (the graph inputs' tuple when the
    guard reads them, see :meth:`.guards.GuardBuilder.build`; else they are read here)."""
    def run(L, checked=None):
        rt = Runtime(L, compiled(*(checked if checked.__class__ is tuple else inputs(L))), read(L))
        if side_effects is not None:
            side_effects(rt)
        return result(rt)
    run.takes_checked = True
    return run


def breaking_code(compiled, inputs, read, side_effects, stack, local_values, step, handler=None):
    """Transformed code of a frame that graph-breaks: graph, then ``step`` in Python,
    then the resume function ``step`` chooses.

    ``handler``: for a break inside a ``try``/``with`` range, the handler resume function
    (see :func:`~.resume.resume_code` with ``raising=True``): an exception of ``step`` is
    passed to it with the stack and locals of the break, and the frame's own handlers run
    natively in it; without one, the contexts re-entered for the break are exited and
    the exception propagates.
    """
    def run(L, checked=None):
        rt = Runtime(L, compiled(*(checked if checked.__class__ is tuple else inputs(L))), read(L))
        if side_effects is not None:
            side_effects(rt)
        values = [r(rt) for r in stack]
        locals_ = [r(rt) for r in local_values]
        try:
            after, resume = step(rt, values)
        except BaseException as e:
            if handler is None:
                for ctx in reversed(rt.entered):
                    ctx.__exit__(type(e), e, e.__traceback__)
                raise
            exc = e
        else:
            return resume(*after, *locals_)
        # outside the except block: the handler sees the caller's sys.exc_info(), as eagerly
        return handler(exc, *values, *locals_)
    run.takes_checked = True
    return run


def wrap_callee(fn, compile_wrapper):
    """How the breaking call is made: user Python functions (and the forward of a module)
    go through ``compile_wrapper`` so they are captured as their own frame; a module's
    hooks run around that forward as ``OptimizedModule`` runs them, each compiled as a
    frame of its own (what torch's frame hook does; FSDP2's hooks run natively)."""
    if isinstance(fn, types.FunctionType) and _wants_frame(fn):
        return compile_wrapper(fn)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType) and _wants_frame(fn.__func__):
        return types.MethodType(compile_wrapper(fn.__func__), fn.__self__)
    if isinstance(fn, torch.nn.Module) and type(fn).__call__ is torch.nn.Module.__call__:
        forward = fn.forward
        if isinstance(forward, types.MethodType) and isinstance(forward.__func__, types.FunctionType) \
                and _wants_frame(forward.__func__) and not isinstance(fn, torch.nn.modules.lazy.LazyModuleMixin):
            from .optimized_module import _call_with_hooks, _has_hooks

            compiled = types.MethodType(compile_wrapper(forward.__func__), fn)
            if not _has_hooks(fn):
                return compiled
            if not fn._get_backward_hooks()[1]:  # no legacy backward hooks: hooks around the compiled forward
                shim = types.SimpleNamespace(wrap=compile_wrapper)
                return lambda *args, **kwargs: _call_with_hooks(shim, fn, compiled, args, kwargs)
    return fn


def reads_caller_frame(fn) -> bool:
    """Whether Python function ``fn`` reads its caller's frame (``sys._getframe(1)``, as
    ``collections.namedtuple`` does for ``__module__``): it must be called natively from
    the user's frame (a resume function), not from transformed code nor as a captured frame."""
    code = getattr(fn, "__code__", None)
    return isinstance(code, types.CodeType) and not {"_getframe", "currentframe"}.isdisjoint(code.co_names)


def _wants_frame(fn) -> bool:
    module = fn.__module__ or ""
    if getattr(fn, "_torchkiln_disable", False) or getattr(fn, "_torchkiln_graph_break", False):
        return False
    if reads_caller_frame(fn):
        return False
    return not module.startswith(("torch.", "torchkiln")) and module != "torch" and \
        module.split(".")[0] not in SKIP_MODULES
