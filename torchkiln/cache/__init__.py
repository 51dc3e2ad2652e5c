"""Persistent compile caches: the store, cache keys and the entry format.

Shared by the stages; imports none of them (the FX graph cache glue lives in
``codegen/fx_graph_cache.py``, the AOT autograd cache glue in ``aot/autograd_cache.py``).

* :func:`get_store` — memory → local directory → Redis, see :mod:`.store`.
* :mod:`.keys` — canonical graph/input/config/version descriptions; :class:`BypassCache`.
* :mod:`.entry` — versioned, checksummed entries; ``pack``/``unpack`` of plain payloads.

Namespaces in the store: ``fxgraph`` (compiled ATen graphs), ``aotautograd``
(forward/backward pairs with their runtime metadata).

The compiler-cache protocol between AOT autograd and a graph compiler (so that aot
need not import codegen): a compiler function may carry ``fn.graph_cache``, an object
with ``enabled() -> bool`` and ``load(key) -> callable | None`` (the compiled graph
saved under ``key``, or None if it is not, or no longer, in the cache); the callables
it returns have ``cache_key`` (``None`` when that graph bypassed the cache).

The protocol between capture's warm start and a backend (``capture/warm_start.py``):
a backend may carry ``backend.frame_cache`` with ``enabled()``, ``key_parts() -> dict``
(its config, part of every frame key) and ``load(aot_key) -> callable | None`` (what
the backend returned for a graph whose AOT autograd entry is ``aot_key``); the
callables the backend returns carry ``aot_cache_key`` (None: not reloadable).
"""
from __future__ import annotations

from .entry import CorruptEntry, pack, unpack
from .keys import BypassCache
from .store import cache_root, clear_memory, get_store

__all__ = ["BypassCache", "CorruptEntry", "cache_root", "clear_memory", "get_store", "pack", "unpack"]
