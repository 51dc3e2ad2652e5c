"""Markers the user puts in code and the interpreter recognises.

``graph_break()`` (mirrors ``torch._dynamo.graph_break``), ``allow_in_graph(fn)``
(``torch._dynamo.allow_in_graph``) and ``disable(fn)`` (``torch._dynamo.disable`` /
``torch.compiler.disable``).  This module imports nothing else from capture, so the
interpreter can import it to recognise these functions by identity:

- ``graph_break`` (it carries ``_torchkiln_graph_break = True``) breaks the graph;
- a function with ``_torchkiln_allow_in_graph = True`` goes into the graph as one
  ``call_function`` node;
- a function returned by ``disable`` carries ``_torchkiln_disable = True`` and its
  original in ``_torchkiln_orig_callable``; capture graph-breaks on a call to it.

While a disabled function runs, a thread-local flag is set, and compiled wrappers
called inside it run their original code.
"""
from __future__ import annotations

import functools
import threading
from typing import Callable

_tls = threading.local()
_tls.disabled = False


def set_disabled_region(value: bool) -> bool:
    """Set the thread-local disabled flag; returns the previous value."""
    prior = getattr(_tls, "disabled", False)
    _tls.disabled = value
    return prior


# Code objects whose functions always run natively: capture graph-breaks on a call to
# one (with the reason given) and compiling one returns it unchanged, as for
# ``disable``d functions.  torchkiln.distributed registers FSDP2's hook wrapper,
# which torch marks ``torch._dynamo.disable`` at call time.
skipped_codes: dict = {}


def skip_code(code, reason: str) -> None:
    """Never capture functions with this code object; a call to one is a graph break."""
    skipped_codes[code] = reason


def graph_break() -> None:
    """Force a graph break here when captured (mirrors ``torch._dynamo.graph_break``).

    Run natively it does nothing.
    """


graph_break._torchkiln_graph_break = True


def allow_in_graph(fn: Callable) -> Callable:
    """Put calls to ``fn`` in the graph as a single node instead of tracing into it.

    Mirrors ``torch._dynamo.allow_in_graph``: ``fn`` must take and return tensors (or
    containers of them) and is called on fake tensors while capturing.  Returns ``fn``
    (marked with ``_torchkiln_allow_in_graph``).  Raises ``TypeError`` when ``fn`` is not
    callable or takes no attributes (a C function: capture already records those).
    """
    if isinstance(fn, (list, tuple)):
        return [allow_in_graph(f) for f in fn]
    if not callable(fn):
        raise TypeError(f"allow_in_graph expects a callable, got {type(fn).__name__}")
    try:
        fn._torchkiln_allow_in_graph = True
    except (AttributeError, TypeError) as e:
        raise TypeError(f"allow_in_graph cannot mark {fn!r}: {e}") from e
    return fn


def disable(fn=None, recursive: bool = True):
    """Never capture ``fn``; run it natively (mirrors ``torch._dynamo.disable``).

    With ``recursive=True`` (default) compiled functions called while ``fn`` runs also
    run natively; with ``recursive=False`` only ``fn``'s own frame is skipped.  Usable
    as ``@disable``, ``@disable(recursive=False)`` and ``disable(fn)``.  An
    ``nn.Module`` gives an ``OptimizedModule`` whose calls run natively.  Capture
    graph-breaks on a call to a disabled function.
    """
    if fn is None:
        return functools.partial(disable, recursive=recursive)
    import torch

    if isinstance(fn, torch.nn.Module):
        from .optimized_module import OptimizedModule

        return OptimizedModule(fn, _DisabledContext(recursive))
    if not callable(fn):
        raise TypeError(f"disable expects a callable, got {type(fn).__name__}")
    return _DisabledContext(recursive).wrap(fn)


class _DisabledContext:
    """What ``disable`` applies to a callable; also used by ``OptimizedModule``."""

    def __init__(self, recursive: bool) -> None:
        self.recursive = recursive

    def wrap(self, fn: Callable) -> Callable:
        if getattr(fn, "_torchkiln_disable", False) and getattr(fn, "_torchkiln_recursive", None) == self.recursive:
            return fn
        if self.recursive:
            def disabled(*args, **kwargs):
                prior = set_disabled_region(True)
                try:
                    return fn(*args, **kwargs)
                finally:
                    set_disabled_region(prior)
        else:
            def disabled(*args, **kwargs):
                return fn(*args, **kwargs)
        functools.update_wrapper(disabled, fn)
        disabled._torchkiln_disable = True
        disabled._torchkiln_recursive = self.recursive
        disabled._torchkiln_orig_callable = fn
        return disabled
