"""Generators run lazily under capture, and ``contextlib.contextmanager`` contexts.

A call to a generator function made while tracing builds a :class:`GeneratorVariable`
holding a suspended inlining translator; each ``next()`` (a ``for`` loop, ``list()``,
a polyfill) runs the generator's bytecode up to its next ``yield``, so its side effects
interleave with the consumer's exactly as they do eagerly.  A generator that is still
alive where the frame breaks or returns is rebuilt by calling the function again when it
was never started; a started one cannot be rebuilt (graph break).
"""
from __future__ import annotations

from .base import ConstantVariable, IteratorProtocolMixin, VariableTracker, unsupported

MAX_YIELDS = 100_000


class GeneratorVariable(IteratorProtocolMixin, VariableTracker):

    rebuilt_once = True  # one object per run of the transformed code (identity)
    def __init__(self, translator, fn_vt, args, kwargs):
        self.translator = translator
        self.fn_vt = fn_vt
        self.args = args
        self.kwargs = kwargs
        self.started = False
        self.finished = False
        self.count = 0

    def python_type(self):
        import types

        return types.GeneratorType

    def next_item(self, tx):
        """The next yielded tracker, or None when the generator returned."""
        from ..symbolic_convert import Yielded

        if self.finished:
            return None
        sub = self.translator
        if self.started:
            sub.push(ConstantVariable(None))  # the value ``yield`` evaluates to (send(None))
        self.started = True
        self.count += 1
        if self.count > MAX_YIELDS:
            unsupported("generator yields too many items (endless generator?)")
        tx.output.side_effects.mutate(self)
        try:
            sub.run_body()
        except Yielded as y:
            return y.value
        self.finished = True
        return None

    def reconstruct(self, cg):
        if self.started:
            unsupported("a generator started during capture is still alive at a graph break or return")
        fn = cg.recipe(self.fn_vt)
        args = [cg.recipe(a) for a in self.args]
        kwargs = {k: cg.recipe(v) for k, v in self.kwargs.items()}
        return lambda rt: fn(rt)(*[a(rt) for a in args], **{k: v(rt) for k, v in kwargs.items()})

    def __repr__(self):
        return f"GeneratorVariable({self.fn_vt!r})"


class GeneratorContextManagerVariable(VariableTracker):
    """``with cm(...)`` where ``cm`` is decorated with ``contextlib.contextmanager``:
    entering runs the generator to its ``yield``; a normal exit runs it to its end (a
    second ``yield`` is CPython's "generator didn't stop" error: graph break)."""

    rebuilt_once = True  # one object per run of the transformed code (identity)

    def __init__(self, helper_vt, gen_vt, args, kwargs):
        self.helper_vt = helper_vt  # the decorated function (rebuilds a fresh context)
        self.gen = gen_vt
        self.args = args
        self.kwargs = kwargs

    def python_type(self):
        import contextlib

        return contextlib._GeneratorContextManager

    def enter(self, tx):
        value = self.gen.next_item(tx)
        if value is None and self.gen.finished:
            unsupported("RuntimeError: generator didn't yield")
        return value

    def exit_normally(self, tx):
        if self.gen.next_item(tx) is not None:
            unsupported("RuntimeError: generator didn't stop")
        return ConstantVariable(False)

    def reconstruct(self, cg):
        if self.gen.started:
            unsupported("a contextlib.contextmanager context entered during capture is alive at a graph break")
        helper = cg.recipe(self.helper_vt)
        args = [cg.recipe(a) for a in self.args]
        kwargs = {k: cg.recipe(v) for k, v in self.kwargs.items()}
        return lambda rt: helper(rt)(*[a(rt) for a in args], **{k: v(rt) for k, v in kwargs.items()})


class GeneratorExitVariable(VariableTracker):
    """The ``__exit__`` BEFORE_WITH leaves for a generator context manager; ``enter_ip``:
    that BEFORE_WITH's instruction in the captured frame (None when entered in an inlined
    function), where a graph break inside the block restarts (see ``finish_break``)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.enter_ip = None

    def call_function(self, tx, args, kwargs):
        if not all(a.is_python_constant() and a.as_python_constant() is None for a in args):
            unsupported("an exception leaving a contextlib.contextmanager block")
        return self.ctx.exit_normally(tx)

    def reconstruct(self, cg):
        unsupported("a contextlib.contextmanager context entered during capture is alive at a graph break")


def is_contextmanager_helper(fn) -> bool:
    """Whether ``fn`` is a function made by ``contextlib.contextmanager``."""
    import contextlib

    return getattr(fn, "__code__", None) is _HELPER_CODE and "func" in fn.__code__.co_freevars


def _helper_code():
    import contextlib

    return contextlib.contextmanager(lambda: (yield)).__code__


_HELPER_CODE = _helper_code()
