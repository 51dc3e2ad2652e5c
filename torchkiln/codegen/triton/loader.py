"""Loading generated Triton modules: what an FX graph cache hit needs, and nothing of
the kernel generator (``kernel.py`` imports sympy and the IR: ~1 s of a GPU warm start).

``load_module(source)`` writes a generated module to ``$TORCHKILN_CACHE_DIR/triton/<sha256>.py``
(``@triton.jit`` reads source files through ``inspect``) and imports it, its kernels
bound to torchkiln's store (``cache/triton_store.py``); ``load_cached_kernels`` is the
FX graph cache's loader for entries of ``TritonGenerator`` (``generator.py``).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys

from ...cache import triton_store
from ...utils.paths import cache_dir
from . import compile_pool
from . import runtime as _rt


def module_path(source: str) -> str:
    """Where ``source`` is written: ``$TORCHKILN_CACHE_DIR/triton/<sha256>.py``."""
    return os.path.join(cache_dir("triton"), hashlib.sha256(source.encode()).hexdigest()[:32] + ".py")


def load_module(source: str):
    """Write ``source`` to the cache (by content hash) and import it."""
    path = module_path(source)
    name = "torchkiln_triton_" + os.path.basename(path)[:-3]
    if name in sys.modules:
        return sys.modules[name]
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    triton_store.bind_module(module)  # compiled binaries live in torchkiln's store (cache/triton_store.py)
    sys.modules[name] = module
    return module


def load_cached_kernels(meta: dict, blobs: dict) -> dict:
    """The launchers of an FX graph cache entry made by ``TritonGenerator.cache_artifacts``
    (the module is imported from its cached source; nothing is rendered)."""
    if not meta["launchers"]:
        return {}
    source = blobs["source"].decode()
    if "\nINTERPRET = False\n" in source:
        compile_pool.use_triton_cache_dir()
    return objects(load_module(source), meta["launchers"])


def objects(module, launchers: list) -> dict:
    """The wrapper's globals for a module's launchers (and the CUDA context reader)."""
    out = {name: getattr(module, name) for name in launchers}
    out["_kiln_cuda_context"] = _rt.cuda_context
    return out
