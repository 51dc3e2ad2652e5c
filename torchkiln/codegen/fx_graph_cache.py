"""The FX graph cache: a compiled ATen graph saved by the content of the graph.

Key (see ``cache/keys.py``): the canonical graph (node names, stack traces, paths and
line numbers left out), the placeholders' metadata (sizes or size symbols, strides,
dtypes, device types), every ``codegen.config`` setting, the versions of torchkiln
(its source hash), torch, Triton and Python, the C++ compiler and its flags (with
``-march=native`` the host CPU), and the device capability.  Value: the wrapper's
source, the plain constants it refers to (op overloads by name, dtypes, devices,
tensor constants via ``torch.save``/``torch.load(weights_only=True)``), and the
kernels' build products: the C++ library, or the Triton module source.  A hit execs
the wrapper and loads the library: no lowering, scheduling or ``g++``.

Mirrors ``torch._inductor.codecache.FxGraphCache``; counters
``counters["inductor"]["fxgraph_cache_hit" | "fxgraph_cache_miss" | "fxgraph_cache_bypass"]``.
A graph the key cannot describe, or whose wrapper refers to an object that is not
plain data, bypasses the cache (its reason logged on ``torchkiln.cache``).  An entry
that cannot be loaded (damaged library, missing op) is a miss: the graph is compiled.
"""
from __future__ import annotations

import ast
import concurrent.futures
import functools
import importlib
import io
import logging
import math
import threading
import weakref

import torch

from ..cache import entry as cache_entry
from ..cache import get_store, keys
from ..utils.counters import counters
from . import config
from .generators import generator_name
from .wrapper_runtime import base_globals

log = logging.getLogger("torchkiln.cache")
NAMESPACE = "fxgraph"
BASE_GLOBALS = frozenset(base_globals())  # every wrapper has them: never described, never saved
_CALLABLE_MODULES = ("torch", "torchkiln", "operator", "math", "builtins")


_live: "weakref.WeakValueDictionary[str, object]" = weakref.WeakValueDictionary()


class FxGraphCache:
    """``FxGraphCache.clear()`` drops every saved graph (memory and local directory)."""

    @staticmethod
    def clear() -> None:
        _live.clear()
        with _unsaved_lock:
            _unsaved.clear()
            _written.clear()
        get_store().clear(NAMESPACE)


# Graphs whose entry is not written yet (their build is in flight), held strongly: a
# backward compiled with its forward is not referenced once its frame is dropped
# (torchkiln.reset()), and an AOT cache hit must still find it.
_unsaved: dict = {}
_written: set = set()
_unsaved_lock = threading.Lock()


def remember(key: str, compiled) -> None:
    """Graphs compiled in this process stay findable by key while they are alive, and
    until their entry is written (when their build finishes) even if not."""
    _live[key] = compiled
    with _unsaved_lock:
        if key not in _written:
            _unsaved[key] = compiled


def settled(key: str) -> None:
    """The graph's entry is written, or will not be (failed build or save): stop
    holding it."""
    with _unsaved_lock:
        _written.add(key)
        _unsaved.pop(key, None)


def live(key: str):
    return _live.get(key) or _unsaved.get(key)


def _devices(example_inputs) -> list:
    devs = {a.device for a in example_inputs if isinstance(a, torch.Tensor)} or {torch.device("cpu")}
    return sorted(devs, key=str)


@functools.lru_cache(None)
def _cpp_toolchain(cxx: str, flags: tuple, native: bool) -> list:
    from .cpp.build import _compiler_id, _host_cpu

    return [_compiler_id(cxx), list(flags), _host_cpu() if native else None]


def _toolchain(device: torch.device):
    name = generator_name(device)
    if name == "cpp":
        from .cpp.build import flags

        return [name, _cpp_toolchain(config.cpp_cxx, tuple(flags()), bool(config.cpp_march_native))]
    return [name, keys.device_capability(device)]


def cache_key(gm: torch.fx.GraphModule, example_inputs) -> str:
    """The key of ``gm`` compiled for ``example_inputs``; raises ``BypassCache``."""
    desc = {
        "graph": keys.graph_description(gm),
        # how many outputs keep eager's strides (the rest are saved for a backward: graph.py)
        "user_visible_outputs": gm.graph.output_node().meta.get("user_visible_outputs"),
        "inputs": keys.inputs_description(example_inputs),
        "shapes": keys.shape_facts(example_inputs),  # a symbolic graph's size facts
        "config": keys.config_description(config),
        "versions": keys.versions(),
        "toolchains": [_toolchain(d) for d in _devices(example_inputs)],
    }
    return "fx" + keys.digest(desc)[:48]


# ---- wrapper globals as plain data
def describe_global(v):
    """A JSON description of one wrapper global; raises ``BypassCache``."""
    if isinstance(v, torch._ops.OpOverload):
        return ["op", v.namespace, v._opname, v._overloadname]
    if isinstance(v, torch.dtype):
        return ["dtype", str(v).removeprefix("torch.")]
    if isinstance(v, torch.device):
        return ["device", str(v)]
    if isinstance(v, (torch.memory_format, torch.layout)):
        return ["torch_attr", str(v).removeprefix("torch.")]
    if isinstance(v, float) and not math.isfinite(v):
        return ["float", repr(v)]
    if isinstance(v, torch.Tensor):
        return ["tensor"]
    if callable(v):
        module, qualname = getattr(v, "__module__", None), getattr(v, "__qualname__", None)
        if module and qualname and module.split(".")[0] in _CALLABLE_MODULES and "<" not in qualname:
            if _resolve(module, qualname) is v:
                return ["callable", module, qualname]
        raise keys.BypassCache(f"wrapper refers to the Python callable {v!r}")
    try:
        if type(ast.literal_eval(repr(v))) is type(v) and ast.literal_eval(repr(v)) == v:
            return ["literal", repr(v)]
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    raise keys.BypassCache(f"wrapper refers to a {type(v).__name__}")


def _resolve(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _load_global(desc, blob: bytes | None):
    kind = desc[0]
    if kind == "op":
        return getattr(getattr(getattr(torch.ops, desc[1]), desc[2]), desc[3])
    if kind == "dtype" or kind == "torch_attr":
        return getattr(torch, desc[1])
    if kind == "device":
        return torch.device(desc[1])
    if kind == "float":
        return float(desc[1])
    if kind == "tensor":
        return torch.load(io.BytesIO(blob), weights_only=True)
    if kind == "callable":
        if desc[1].split(".")[0] not in _CALLABLE_MODULES:
            raise cache_entry.CorruptEntry(f"callable from module {desc[1]}")
        return _resolve(desc[1], desc[2])
    if kind == "literal":
        return ast.literal_eval(desc[1])
    raise cache_entry.CorruptEntry(f"unknown global kind {kind!r}")


def describe_globals(globals_: dict) -> tuple[dict, dict]:
    """(descriptions, tensor blobs) of the wrapper's non-base globals; raises ``BypassCache``."""
    described, blobs = {}, {}
    for name, v in globals_.items():
        if name in BASE_GLOBALS:
            continue
        described[name] = describe_global(v)
        if described[name][0] == "tensor":
            buf = io.BytesIO()
            torch.save(v.detach(), buf)
            blobs[f"global:{name}"] = buf.getvalue()
    return described, blobs


# ---- save and load
def save(key: str, device: torch.device, source: str, kernel_source: str, described: dict, global_blobs: dict,
         artifacts) -> None:
    """Store a compiled graph whose kernels are built (``artifacts`` = the generator's
    ``(meta, blobs)``)."""
    kernel_meta, kernel_blobs = artifacts
    meta = {"wrapper": source, "kernel_source": kernel_source, "globals": described,
            "generator": generator_name(device), "kernels": kernel_meta}
    blobs = dict(global_blobs)
    blobs.update({f"kernel:{k}": v for k, v in kernel_blobs.items()})
    get_store().put(NAMESPACE, key, cache_entry.pack(meta, blobs))


_LOADERS = {"cpp": "torchkiln.codegen.cpp", "triton": "torchkiln.codegen.triton.loader"}  # no generator imported


def load(key: str):
    """The compiled graph saved under ``key``, or None.  Raises nothing."""
    payload = get_store().get(NAMESPACE, key)
    if payload is None:
        return None
    try:
        return _rebuild(key, *cache_entry.unpack(payload))
    except Exception as e:  # a damaged or stale entry is a miss, never a failure
        counters["cache"]["unloadable"] += 1
        log.warning("torchkiln FX graph cache: entry %s could not be loaded (%s: %s); compiling again",
                    key, type(e).__name__, e)
        return None


def _rebuild(key: str, meta: dict, blobs: dict):
    from .compile_fx import CompiledGraph

    loader = importlib.import_module(_LOADERS[meta["generator"]]).load_cached_kernels
    kernel_blobs = {k.removeprefix("kernel:"): v for k, v in blobs.items() if k.startswith("kernel:")}
    kernel_objects = loader(meta["kernels"], kernel_blobs)
    globals_ = base_globals()
    for name, desc in meta["globals"].items():
        globals_[name] = _load_global(desc, blobs.get(f"global:{name}"))
    done = concurrent.futures.Future()
    done.set_result(kernel_objects)
    code = compile(meta["wrapper"], f"<torchkiln wrapper {key[:16]}>", "exec")
    compiled = CompiledGraph(None, code, globals_, done, meta["wrapper"], meta["kernel_source"], [])
    compiled.cache_key = key
    return compiled


class _GraphCacheProtocol:
    """``compile_fx_inner.graph_cache``: how AOT autograd's cache finds saved graphs
    (the protocol is described in ``torchkiln/cache/__init__.py``)."""

    @staticmethod
    def enabled() -> bool:
        return bool(config.fx_graph_cache)

    @staticmethod
    def key_parts() -> dict:
        """What a caller's key must add for graphs this compiler builds: its config."""
        return {"codegen_config": keys.config_description(config)}

    @staticmethod
    def load(key: str):
        compiled = live(key) or load(key)
        if compiled is not None:
            counters["inductor"]["fxgraph_cache_hit"] += 1
        return compiled


graph_cache = _GraphCacheProtocol()
