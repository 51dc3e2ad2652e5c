"""Compiled autograd: the whole backward pass captured as one FX graph and compiled.

Mirrors ``torch._dynamo.compiled_autograd``:

* ``enable(compiler_fn)``: a context manager; every ``.backward()`` and
  ``torch.autograd.grad()`` inside runs through the autograd engine's compiled path.
  On the first backward of an autograd graph (keyed by node types, saved-tensor
  metadata, sizes, hooks) the engine's nodes are captured into one graph
  (``tracer.py``) and ``compiler_fn(gm)`` compiles it (e.g.
  ``lambda gm: torchkiln.compile(gm, backend="inductor", fullgraph=True, dynamic=True)``);
  the next backward of the same structure is a cache lookup.  A size that changes
  costs one recapture with that size symbolic.
  ``counters["compiled_autograd"]["captures"]`` counts captures.
* ``reset()``: drop the engine's cache and turn compiled autograd off.
* ``torchkiln.config.compiled_autograd = True`` at ``torchkiln.compile`` time: every call
  of the compiled function runs inside ``enable`` with a compiler_fn of the same backend.

On a torch minor version whose engine protocol is not verified (``protocol.VERIFIED``)
``enable`` warns once and the backward runs on the plain eager engine.

Not supported (raise as torch's do): ``create_graph=True`` (double backward), anomaly
mode.  Multithreaded autograd is turned off inside ``enable``.
"""
from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from typing import Callable

import torch

from ..capture import compile as _compile
from ..capture.eval_frame import register_compiled_autograd, register_reset_hook
from ..capture.guards import mark_keyed_inputs
from ..config import config
from . import logs, protocol, state

__all__ = ["enable", "disable", "reset", "compiler_fn_for_backend"]


class enable:
    """Run every backward inside through compiled autograd with ``compiler_fn(gm) -> callable``
    (a context manager, as ``torch._dynamo.compiled_autograd._enable``).

    On a torch whose engine protocol torchkiln has not verified: one ``UserWarning`` per
    process, and backwards inside run eagerly (eager's gradients, nothing captured).
    A plain class, not a generator: a training step may enter it around every backward."""

    __slots__ = ("compiler_fn", "dynamic", "_prior")

    def __init__(self, compiler_fn: Callable, dynamic: bool = True) -> None:
        self.compiler_fn = compiler_fn
        self.dynamic = bool(dynamic)
        self._prior = None

    def __enter__(self) -> None:
        reason = protocol.unverified_reason()
        if reason is not None:
            _warn_once(reason)
            return
        verbose = logs.verbose_enabled()  # snapshot, as torch's: turning it on inside has no effect
        capture = _AutogradCapture or _capture_class()
        prior = protocol.set_compiler(functools.partial(capture, self.compiler_fn, verbose), self.dynamic)
        if verbose:
            protocol.set_verbose_logger(logs.ENGINE_LOGGER)
        state.enabled_depth += 1
        self._prior = (prior, verbose, _is_multithreading_enabled())
        _set_multithreading_enabled(False)

    def __exit__(self, *exc) -> None:
        if self._prior is None:
            return
        (prior, verbose, multithreading), self._prior = self._prior, None
        _set_multithreading_enabled(multithreading)
        state.enabled_depth -= 1
        if verbose:
            protocol.set_verbose_logger(None)
        protocol.set_compiler(*prior)


# bound once: entered around every training step's backward
_is_multithreading_enabled = torch._C._is_multithreading_enabled
_set_multithreading_enabled = torch._C._set_multithreading_enabled


def _capture_class():
    global _AutogradCapture
    if _AutogradCapture is None:
        from .tracer import AutogradCapture  # on first use, not at import: it loads ShapeEnv and sympy (~1 s)

        _AutogradCapture = AutogradCapture
    return _AutogradCapture


_AutogradCapture = None


_warned: set[str] = set()


def _warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(reason, stacklevel=4)


@contextlib.contextmanager
def disable():
    """Backwards inside run on the eager engine, also within ``enable``."""
    if protocol.unverified_reason() is not None:  # our compiler is never installed there
        yield
        return
    prior = protocol.set_compiler(None, False)
    try:
        yield
    finally:
        protocol.set_compiler(*prior)


def reset() -> None:
    """Back to a new process's state: compiler off, engine cache empty, capture ids from 0."""
    if state.in_graph:
        raise AssertionError("compiled_autograd.reset() called while a compiled backward runs")
    _reset_capture_ids()
    if protocol.unverified_reason() is not None:  # the engine never got our compiler
        return
    protocol.set_compiler(None, False)
    protocol.set_verbose_logger(None)
    protocol.clear_cache()


def _clear_cache() -> None:
    """``torchkiln.reset()``'s part: the engine's cache (an active ``enable`` stays on)."""
    if not state.in_graph and protocol.unverified_reason() is None:
        protocol.clear_cache()
        _reset_capture_ids()


def _reset_capture_ids() -> None:
    tracer = sys.modules.get(__name__ + ".tracer")  # not imported yet: no capture ids handed out
    if tracer is not None:
        tracer.reset_capture_ids()


def compiler_fn_for_backend(backend, *, fullgraph: bool = False, dynamic: bool | None = None) -> Callable:
    """``compiler_fn`` compiling the captured backward with ``torchkiln.compile(backend=...)``.

    ``dynamic=None`` (the default, as ``torch.compile``'s): the graph is compiled for the
    sizes it first sees, and a size that changes recompiles it once with that size
    symbolic (the engine's own ``enable(dynamic=)`` decides what it lifts as symbolic);
    a graph compiled static skips the size arithmetic and the size guards per call.
    The graph's ``forward`` is compiled as a bound method, not the module through an
    ``OptimizedModule``: the same capture and guards, without the module-call layers
    (its hook checks) on every backward.  For a graph the engine's capture made, its
    guard leaves out dtype, device and requires_grad of each ``inputs[i]`` and their
    distinctness: the engine's cache key already holds the first three of every lifted
    tensor, its lifted tensors are distinct, and the compiled function is called only
    for that key (``capture.guards.mark_keyed_inputs``)."""
    def compiler_fn(gm):
        if getattr(gm, "_torchkiln_engine_graph", False):
            mark_keyed_inputs(type(gm).forward, "inputs")
        with config.patch(compiled_autograd=False):  # the backward graph has no backward inside
            return _compile(gm.forward, backend=backend, fullgraph=fullgraph, dynamic=dynamic)

    return compiler_fn


def _enable_for(context) -> Callable:
    """The hook ``config.compiled_autograd`` installs in compiled functions: the backward
    is compiled with the forward's backend; sizes start static unless ``dynamic=True``."""
    backend, fullgraph, dynamic = context._args[:3]
    compiler_fn = compiler_fn_for_backend(backend, fullgraph=fullgraph, dynamic=dynamic)
    engine_dynamic = bool(dynamic) if dynamic is not None else not config.assume_static_by_default
    return functools.partial(enable, compiler_fn, engine_dynamic)


register_compiled_autograd(_enable_for, state.engine_compiler_off)
register_reset_hook(_clear_cache)
