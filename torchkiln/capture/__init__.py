"""Graph capture from Python bytecode (the TorchDynamo part of the system).

Public names (re-exported by ``torchkiln``): :func:`compile`, :class:`optimize`,
:func:`reset`, :func:`disable`, :func:`graph_break`, :func:`allow_in_graph`,
:func:`explain`, :func:`mark_dynamic`, :func:`mark_static`, :class:`OptimizedModule`.
"""
from __future__ import annotations

from ..shapes import mark_dynamic, mark_static
from .api import allow_in_graph, disable, graph_break
from .eval_frame import compile, optimize, register_reset_hook, reset
from .explain import ExplainOutput, explain
from .optimized_module import OptimizedModule

__all__ = [
    "compile", "optimize", "reset", "disable", "graph_break", "allow_in_graph", "explain", "ExplainOutput",
    "mark_dynamic", "mark_static", "OptimizedModule", "register_reset_hook",
]
