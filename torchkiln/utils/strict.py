"""Whether the graph being compiled may fall back to eager (``fullgraph=True`` says no).

Capture compiles a graph inside ``strict_compile(fullgraph)``; the code generator asks
``strict()`` (with ``codegen.config.debug``) before turning a failed kernel build (a g++
or Triton error) into an eager fallback, and raises instead, as torch.compile's
``fullgraph=True`` never silently runs a graph eagerly.  Thread-local: compiles in
other threads are unaffected.
"""
from __future__ import annotations

import contextlib
import threading

_state = threading.local()


@contextlib.contextmanager
def strict_compile(on: bool):
    """Within the block, ``strict()`` is ``on`` (nesting restores the outer value)."""
    before = getattr(_state, "on", False)
    _state.on = bool(on)
    try:
        yield
    finally:
        _state.on = before


def strict() -> bool:
    """True while a ``fullgraph=True`` graph is being compiled in this thread."""
    return getattr(_state, "on", False)
