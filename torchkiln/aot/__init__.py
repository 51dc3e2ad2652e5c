"""AOT autograd: forward and backward ATen graphs, functionalized and partitioned,
behind a runtime wrapper (the AOTAutograd part of torch.compile).

Public names mirror those of PyTorch's own AOT autograd (``functorch.compile``).
"""
from __future__ import annotations

from .autograd_cache import AOTAutogradCache, BypassAOTAutogradCache, autograd_cache_key
from .api import AOTConfig, aot_export_joint_simple, aot_function, aot_module, aot_module_simplified
from .compilers import make_boxed_compiler, make_boxed_func, nop
from .config import config
from .partitioners import default_partition, min_cut_rematerialization_partition

__all__ = [
    "AOTConfig", "aot_function", "aot_module", "aot_module_simplified", "aot_export_joint_simple",
    "default_partition", "min_cut_rematerialization_partition", "nop", "make_boxed_func",
    "make_boxed_compiler", "config", "AOTAutogradCache", "BypassAOTAutogradCache", "autograd_cache_key",
]
