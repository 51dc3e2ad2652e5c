"""AOT autograd settings (mirrors ``torch._functorch.config`` where a name exists there).

``enable_autograd_cache``: save and reuse compiled forward/backward pairs (aot/autograd_cache.py;
on unless ``TORCHKILN_AUTOGRAD_CACHE=0``; needs ``codegen.config.fx_graph_cache``).
``debug_assert``: check at run time that the duplicate-argument pattern seen at compile
time still holds (capture guards ``L['a'] is L['b']``; this is the belt to those braces).
``partitioner``: "min_cut" (recompute cheap pointwise ops in the backward) or "default"
(save everything the backward needs); used when the caller gives no ``partition_fn``.
"""
from __future__ import annotations

import os

from ..config import Config

config = Config(
    "torchkiln.aot.config",
    enable_autograd_cache=os.environ.get("TORCHKILN_AUTOGRAD_CACHE", "1") != "0",
    debug_assert=False,
    partitioner="min_cut",
)
