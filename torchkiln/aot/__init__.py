"""AOT autograd: forward and backward ATen graphs, functionalized and partitioned,
behind a runtime wrapper (the AOTAutograd part of torch.compile).

Public names mirror those of PyTorch's own AOT autograd (``functorch.compile``).
"""
from __future__ import annotations

import importlib

from .autograd_cache import AOTAutogradCache, BypassAOTAutogradCache, autograd_cache_key
from .compilers import make_boxed_compiler, make_boxed_func, nop
from .config import config

# imported on first use (PEP 562): tracing and partitioning load ShapeEnv and sympy
# (~1 s), which a process that loads its graphs from the caches never needs
_LAZY = {"AOTConfig": ".api", "aot_export_joint_simple": ".api", "aot_function": ".api", "aot_module": ".api",
         "aot_module_simplified": ".api", "default_partition": ".partitioners",
         "min_cut_rematerialization_partition": ".partitioners"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value

__all__ = [
    "AOTConfig", "aot_function", "aot_module", "aot_module_simplified", "aot_export_joint_simple",
    "default_partition", "min_cut_rematerialization_partition", "nop", "make_boxed_func",
    "make_boxed_compiler", "config", "AOTAutogradCache", "BypassAOTAutogradCache", "autograd_cache_key",
]
