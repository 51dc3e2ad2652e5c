"""torchkiln: a compiler for PyTorch programs.

``model = torchkiln.compile(model)`` captures the program's tensor code from its
bytecode, differentiates it ahead of time and generates fused kernels.  The public
names and signatures mirror ``torch.compile`` and ``torch._dynamo``'s, so switching
is a change of import.  Nothing outside this module's ``__all__`` is public.
"""
from __future__ import annotations

from . import config as _config_module
from .backends import list_backends, register_backend
from .config import config
from .utils.counters import counters
from .capture import (
    OptimizedModule,
    allow_in_graph,
    compile,
    disable,
    explain,
    graph_break,
    mark_dynamic,
    mark_static,
    optimize,
    reset,
)
from . import compiled_autograd

from . import distributed as _distributed  # noqa: F401,E402  (registers DDP and collectives with capture)

__version__ = "0.1.0"


def cudagraph_mark_step_begin() -> None:
    """Mark the start of a new step for ``mode="reduce-overhead"`` (as
    ``torch.compiler.cudagraph_mark_step_begin``); see :mod:`torchkiln.codegen.cudagraphs`."""
    from .codegen.cudagraphs import cudagraph_mark_step_begin as mark

    mark()


__all__ = [
    "compile", "optimize", "reset", "disable", "graph_break", "allow_in_graph", "explain",
    "list_backends", "register_backend", "mark_dynamic", "mark_static", "OptimizedModule",
    "counters", "config", "compiled_autograd", "cudagraph_mark_step_begin",
]
