"""Entry point of capture for one frame: bytecode → FX graph(s) + guards + transformed code.

The frontend (``eval_frame``) calls :func:`convert_frame` on a cache miss and stores the
returned :class:`CacheEntry`; on later calls it runs ``entry.guard.check(f_locals)`` and,
when that passes, ``entry.fn(*args, **kwargs)``.  This mirrors TorchDynamo's
``convert_frame``: capture symbolically interprets the function's bytecode
(:mod:`.symbolic_convert`), compiles the captured graph with the backend, and returns
code that runs the graph, replays side effects and continues after graph breaks.
"""
from __future__ import annotations

import types
import warnings
from typing import Callable

from ..exc import BackendCompilerFailed, Unsupported
from ..shapes.policy import DynamicPolicy
from ..utils.nogc import nogc
from . import warm_start
from .frame import CacheEntry, bind_locals, skip_entry
from .verify import InvalidCode


def convert_frame(fn: types.FunctionType, args: tuple, kwargs: dict, *, backend: Callable, fullgraph: bool,
                  dynamic: DynamicPolicy, compile_wrapper: Callable) -> CacheEntry:
    """Capture one call of ``fn`` and return a guarded :class:`CacheEntry`.

    Raises :class:`torchkiln.exc.Unsupported` only when ``fullgraph`` is True (naming the
    reason and the user's ``file:line``); otherwise unsupported code becomes graph
    breaks, and an unexpected internal error runs the frame eagerly with one warning.
    When the frame does nothing with tensors, the entry just calls ``fn`` (torch's
    "skip frame") and no graph is counted.
    """
    f_locals = bind_locals(fn, args, kwargs)
    with nogc():  # reading, checking and installing a record: see warm_start.lookup
        entry, warm_key = warm_start.lookup(fn, f_locals, backend, fullgraph, dynamic, compile_wrapper)
    if entry is not None:  # installed from a frame record of an earlier process: no capture
        return entry
    # a backend's early start (its compile workers) overlaps capture; a warm start whose
    # frames all come from records never captures, so never starts them (16 workers
    # importing torch slowed the H100 warm start: 0.64 -> 0.80 of torch.compile's)
    warm = getattr(backend, "warm", None) or getattr(getattr(backend, "compiler_fn", None), "warm", None)
    if callable(warm):
        warm()
    # imported on the first capture: symbolic_convert pulls in the variable trackers,
    # ShapeEnv and sympy (~1 s), which a process whose frames come from records never needs
    from .symbolic_convert import capture_frame

    try:
        entry = capture_frame(fn, f_locals, backend=backend, fullgraph=fullgraph, dynamic=dynamic,
                              compile_wrapper=compile_wrapper)
        if warm_key is not None:
            warm_start.record(warm_key, entry)
        return entry
    except Unsupported:
        if fullgraph:
            raise
        return skip_entry(fn)
    except BackendCompilerFailed:  # raised only when config.suppress_errors is False
        raise
    except InvalidCode as e:
        if fullgraph:
            raise
        warnings.warn(f"torchkiln: code generated for {fn.__qualname__} failed verification ({e}); running it eagerly")
        return skip_entry(fn)
    except Exception as e:  # noqa: BLE001 - any internal failure must fall back safely
        if fullgraph:
            raise
        warnings.warn(f"torchkiln: capture of {fn.__qualname__} failed ({type(e).__name__}: {e}); running it eagerly")
        return skip_entry(fn)
