"""What the frame-capture modules share: the cache entry, graph-break reasons, binding
arguments to a frame's locals, and which modules capture never traces.

:mod:`.convert_frame` (entry) -> :mod:`.symbolic_convert` (interpreter) ->
:mod:`.codegen` (transformed code) all read these from here, top-down.
"""
from __future__ import annotations

import dataclasses
import inspect
import types
import weakref
from typing import Any, Callable

# Standard-library modules whose functions run natively (a graph break), as TorchDynamo's
# skipfiles do: tracing them is slow and they touch interpreter state.
SKIP_MODULES = {"logging", "warnings", "inspect", "typing", "abc", "importlib", "threading", "weakref", "copy",
                "traceback", "linecache", "tokenize", "ast", "dis", "contextvars", "os", "sys", "re", "json",
                "pickle", "io", "unittest", "pdb", "tempfile", "pathlib", "socket", "subprocess"}


class LazyLocal:
    """An argument of the root frame not read yet (guards are installed on first read)."""

    def __init__(self, value, source):
        self.value = value
        self.source = source


@dataclasses.dataclass
class BreakReason:
    """Why a graph break happened: ``reason`` text and the user's ``file:line``."""

    reason: str
    user_stack: str

    def __str__(self) -> str:
        return f"{self.reason} ({self.user_stack})"


@dataclasses.dataclass
class CacheEntry:
    """One captured version of a frame.

    ``guard``: a :class:`~torchkiln.capture.guards.Guard` (``check(f_locals) -> bool``,
    ``failure_reason(f_locals) -> str | None``, ``code_parts``, and
    ``size_failures(f_locals) -> dict[source_name, set[dim]] | None``: the tensor dims
    whose sizes changed, when sizes are the only failing guards — input for automatic
    dynamic).  ``fn(*args, **kwargs)`` runs the transformed code with the original
    arguments; ``run(f_locals)`` does the same from already-bound locals (faster).
    ``graphs``: the FX graphs compiled for this frame (not those of resume functions);
    ``break_reasons``: graph breaks met while capturing this frame.
    """

    guard: Any
    fn: Callable
    run: Callable[[dict], Any]
    graphs: list = dataclasses.field(default_factory=list)
    break_reasons: list[BreakReason] = dataclasses.field(default_factory=list)


_signatures: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _signature(fn) -> inspect.Signature:
    """The signature of ``fn``'s code and current defaults.  Not ``inspect.signature(fn)``:
    that honours ``__signature__`` and a partialmethod's ``_partialmethod``, while the
    frame binds by its code.  Cached per function while its ``__defaults__`` is the same
    tuple and its ``__kwdefaults__`` holds the same objects (the cache keeps both alive, so
    a replaced tuple's address cannot come back as a false hit; the dict is compared by
    content because it can be changed in place)."""
    defaults, kwdefaults = fn.__defaults__, fn.__kwdefaults__
    kw_items = tuple(kwdefaults.items()) if kwdefaults else ()
    hit = _signatures.get(fn)
    if (hit is not None and hit[0] is defaults and len(hit[1]) == len(kw_items)
            and all(a is c and b is d for (a, b), (c, d) in zip(hit[1], kw_items))):
        return hit[2]
    bare = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, defaults, fn.__closure__)
    bare.__kwdefaults__ = kwdefaults
    sig = inspect.signature(bare, follow_wrapped=False)
    _signatures[fn] = (defaults, kw_items, sig)
    return sig


def bind_locals(fn: types.FunctionType, args: tuple, kwargs: dict) -> dict:
    """The frame's ``f_locals`` after binding ``args``/``kwargs`` to ``fn``'s parameters.

    ``*args`` and ``**kwargs`` parameters become a tuple and a dict; free variables of a
    closure are included under their names (as in a real frame's ``f_locals``).  Raises
    ``TypeError`` on arguments that do not bind, as calling ``fn`` would.
    """
    code = fn.__code__
    if not kwargs and code.co_flags & 0x0C == 0 and len(args) == code.co_argcount and not code.co_kwonlyargcount:
        f_locals = dict(zip(code.co_varnames, args))
    else:
        bound = _signature(fn).bind(*args, **kwargs)
        bound.apply_defaults()
        f_locals = dict(bound.arguments)
    if fn.__closure__:
        for name, cell in zip(code.co_freevars, fn.__closure__):
            try:
                f_locals[name] = cell.cell_contents
            except ValueError:
                pass
    return f_locals


def skip_entry(fn: types.FunctionType) -> CacheEntry:
    """An entry that always matches and runs ``fn`` natively (torch's "skip frame")."""
    from .guards import Guard

    return CacheEntry(guard=Guard.always(), fn=fn, run=lambda f_locals: call_with_locals(fn, f_locals))


def call_with_locals(fn: types.FunctionType, f_locals: dict):
    """Call ``fn`` with arguments taken from bound ``f_locals``."""
    code = fn.__code__
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)]
    pos = [f_locals[n] for n in names[: code.co_argcount]]
    kw = {n: f_locals[n] for n in names[code.co_argcount: code.co_argcount + code.co_kwonlyargcount]}
    i = code.co_argcount + code.co_kwonlyargcount
    if code.co_flags & 4:
        pos.extend(f_locals[names[i]])
        i += 1
    if code.co_flags & 8:
        kw.update(f_locals[names[i]])
    return fn(*pos, **kw)
