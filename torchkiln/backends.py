"""Registry of named backends (mirrors ``torch._dynamo.list_backends``).

A backend is ``backend(gm: torch.fx.GraphModule, example_inputs: list) -> callable``:
``gm`` is the torch-level graph capture produced, ``example_inputs`` the real values of
its placeholders from the call that triggered the compile; the returned callable takes
the same positional arguments as ``gm`` and returns what ``gm`` returns (a tuple).

Backends of later stages are registered by dotted path and imported on first use, so
that capture never imports aot or codegen.
"""
from __future__ import annotations

import importlib
from typing import Callable

_backends: dict[str, Callable] = {}
_lazy: dict[str, str] = {
    "aot_eager": "torchkiln.aot.backend:aot_eager",
    "inductor": "torchkiln.codegen.compile_fx:compile_fx",
    "kiln": "torchkiln.codegen.compile_fx:compile_fx",
}


def eager(gm, example_inputs):
    """Run the captured FX graph as it is (``backend="eager"``)."""
    return gm.forward


def register_backend(fn: Callable | None = None, name: str | None = None):
    """Register ``fn`` under ``name`` (default: its ``__name__``); usable as a decorator."""
    if fn is None:
        return lambda f: register_backend(f, name)
    _backends[name or fn.__name__] = fn
    return fn


register_backend(eager, "eager")


def lookup_backend(backend) -> Callable:
    """Resolve a backend name or callable; raises ``InvalidBackend`` for unknown names."""
    if callable(backend):
        return backend
    if not isinstance(backend, str):
        raise InvalidBackend(f"backend must be a name or a callable, not {backend!r}")
    if backend in _backends:
        return _backends[backend]
    if backend in _lazy:
        module, _, attr = _lazy[backend].partition(":")
        fn = getattr(importlib.import_module(module), attr)
        _backends[backend] = fn
        return fn
    raise InvalidBackend(f"Invalid backend: {backend!r}, see `torchkiln.list_backends()` for available backends.")


def list_backends(exclude_tags=("debug", "experimental")) -> list[str]:
    """Names of the registered backends, sorted."""
    return sorted(set(_backends) | set(_lazy))


class InvalidBackend(RuntimeError):
    """An unknown backend name was given to ``compile``/``optimize``."""
