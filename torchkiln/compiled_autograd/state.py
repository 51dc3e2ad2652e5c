"""Process state of compiled autograd: whether the engine has our compiler, and whether
a captured graph is running (``reset()`` may not run then)."""
from __future__ import annotations

import contextlib

enabled_depth = 0
in_graph = False


@contextlib.contextmanager
def engine_compiler_off():
    """The engine's compiler unset (backwards inside run eagerly), then restored."""
    from .protocol import set_compiler

    prior = set_compiler(None, False)
    try:
        yield
    finally:
        set_compiler(*prior)
