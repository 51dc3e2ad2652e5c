"""Code generation: ATen graph → fused C++/Triton kernels plus a Python wrapper.

The TorchInductor part of torchkiln; see docs/codegen.md.  Public: ``compile_fx``
(the "inductor" backend), ``compile_fx_inner`` (one ATen graph), ``config``,
``metrics``, ``FxGraphCache`` (``FxGraphCache.clear()``).
"""
from __future__ import annotations

from . import metrics
from .config import config
from .fx_graph_cache import FxGraphCache


def compile_fx(gm, example_inputs):
    """The "inductor" backend; see :func:`torchkiln.codegen.compile_fx.compile_fx`."""
    from .compile_fx import compile_fx as impl

    return impl(gm, example_inputs)


def compile_fx_inner(gm, example_inputs):
    """Compile one ATen graph; see :func:`torchkiln.codegen.compile_fx.compile_fx_inner`."""
    from .compile_fx import compile_fx_inner as impl

    return impl(gm, example_inputs)


__all__ = ["FxGraphCache", "compile_fx", "compile_fx_inner", "config", "metrics"]
