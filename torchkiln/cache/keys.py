"""Cache keys: canonical descriptions of FX graphs, inputs, configs and versions.

A key is the SHA-256 of a canonical JSON description, so it is the same across
processes, working directories and machines: FX node names, stack traces, file paths
and line numbers are left out (nodes are numbered in graph order), callables are named
by module and qualified name, tensors by sizes (or size symbols), strides, storage
offset, dtype, device (with its index) and requires_grad.  Anything the description cannot name
stably (a lambda, a function defined inside another, an arbitrary Python object)
raises :class:`BypassCache`: that graph is compiled without the cache, which is
always safe.  ``torch._inductor.codecache``/``autograd_cache`` key the same inputs.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import sys
import time
import types

import torch
import torch.fx


class BypassCache(Exception):
    """This graph cannot be cached (the message says why); compile it without the cache."""


def digest(obj) -> str:
    """SHA-256 (hex) of ``obj``'s canonical JSON."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@functools.lru_cache(None)
def torchkiln_source_hash() -> str:
    """Hash of every ``.py`` file of the installed torchkiln: any change to the compiler
    invalidates every entry it wrote (as torch hashes inductor's own source).

    Read from the local cache directory when no file changed since it was computed
    (:func:`source_fingerprint`: ~1 ms of ``stat`` instead of ~6 ms reading ~150 files,
    on every process start); any change, or no usable cache directory, hashes again."""
    return source_hash(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def source_hash(root: str) -> str:
    """SHA-256 of every ``.py`` file under ``root`` (names and contents), memoized in the
    local store under :func:`source_fingerprint`."""
    files = _source_files(root)
    try:
        memo, key = _source_hash_memo(root, files)
    except Exception:  # noqa: BLE001 - the memo is an optimisation only
        memo = key = None
    if memo is not None:
        try:
            value = memo.get(SOURCE_HASH_NAMESPACE, key)
            if value is not None and len(value) == 64 and all(c in b"0123456789abcdef" for c in value):
                return value.decode()
        except Exception:  # noqa: BLE001
            pass
    start = time.time()
    h = hashlib.sha256()
    newest = 0
    for rel, path in files:
        h.update(rel.encode() + b"\0")
        with open(path, "rb") as f:
            newest = max(newest, os.fstat(f.fileno()).st_ctime)
            h.update(f.read())
    value = h.hexdigest()
    if memo is not None and newest < start - RACY_S:  # as git's racily clean files
        try:
            memo.put(SOURCE_HASH_NAMESPACE, key, value.encode())
        except Exception:  # noqa: BLE001
            pass
    return value


SOURCE_HASH_NAMESPACE = "source_hash"
# a file written within this many seconds before the hash is not memoized: a later write
# in the same clock tick (file times are coarse) could leave size, times and inode equal
RACY_S = 2.0


def _source_files(root: str) -> list[tuple[str, str]]:
    """``(path relative to root, path)`` of every ``.py`` file under ``root``, sorted by
    directory then name (``relpath`` once per directory: per file it was most of the cost)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        rel_dir = os.path.relpath(dirpath, root)
        prefix = "" if rel_dir == "." else rel_dir + os.sep
        out += [(prefix + name, os.path.join(dirpath, name)) for name in sorted(filenames) if name.endswith(".py")]
    return out


def source_fingerprint(root: str, files: list[tuple[str, str]]) -> str:
    """Digest of ``root`` and of each file's name, size, mtime, ctime and inode: a file
    written since (edited, checked out, reinstalled) changes its ctime, which no tool sets
    back, and a tree copied elsewhere has other ctimes and another root."""
    h = hashlib.sha256(os.path.realpath(root).encode() + b"\0")
    for rel, path in files:
        st = os.stat(path)
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\n".encode())
    return h.hexdigest()


def _source_hash_memo(root: str, files: list[tuple[str, str]]):
    """``(store, key)``: the local store (never the remote one: the fingerprint describes
    this machine's files) and this tree's key in it."""
    from .store import get_store

    return get_store().local, "torchkiln-" + source_fingerprint(root, files)[:48]


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(None)
def _static_versions() -> dict:
    return {"torchkiln": torchkiln_source_hash(), "triton": _dist_version("triton"),
            "python": sys.version.split()[0], "machine": platform.machine()}


def versions() -> dict:
    """torchkiln (source hash), torch, Triton and Python versions (torch's is read on each
    call, so a test can patch ``torch.__version__``)."""
    return {**_static_versions(), "torch": str(torch.__version__)}


@functools.lru_cache(None)
def _cuda_capability(index: int) -> list:
    return [*torch.cuda.get_device_capability(index), torch.cuda.get_device_name(index)]


def device_capability(device: torch.device) -> list:
    """What the generated code depends on for ``device``: the CUDA compute capability and
    name (not the index: any GPU of the same kind runs the same binaries)."""
    if device.type == "cuda":
        return _cuda_capability(device.index if device.index is not None else torch.cuda.current_device())
    return [device.type]


# ---- values
def _sym(s) -> str:
    return f"sym:{s.node.expr}" if hasattr(s, "node") else repr(s)


def _size(x):
    return [int(s) if isinstance(s, int) else _sym(s) for s in x]


def tensor_meta(t: torch.Tensor) -> dict:
    """Sizes (or symbols), strides, offset, dtype, device with its index (a wrapper allocates
    on its graph's device: a graph compiled for cuda:0 must not be loaded for cuda:1),
    requires_grad, layout."""
    if t.layout != torch.strided or t.is_sparse or t.is_quantized or t.is_nested:
        raise BypassCache(f"tensor with layout {t.layout}")
    if type(t) not in (torch.Tensor, torch.nn.Parameter) and not _is_fake(t):
        raise BypassCache(f"tensor subclass {type(t).__name__}")
    return {"t": "tensor", "size": _size(t.size()), "stride": _size(t.stride()),
            "offset": t.storage_offset() if isinstance(t.storage_offset(), int) else _sym(t.storage_offset()),
            "dtype": str(t.dtype), "device": str(t.device), "requires_grad": bool(t.requires_grad),
            "param": isinstance(t, torch.nn.Parameter)}


def _is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def callable_name(fn) -> str:
    """``module.qualname`` of a function, builtin, op overload or class; raises
    :class:`BypassCache` for what has no stable name (lambdas, local functions)."""
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)):
        return f"op:{fn}"
    if isinstance(fn, str):
        return fn
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if isinstance(fn, types.MethodWrapperType) and not isinstance(fn.__self__, (type, types.ModuleType)):
        raise BypassCache(f"cannot name a method bound to an object: {fn!r}")
    objclass = getattr(fn, "__objclass__", None)
    if isinstance(objclass, type) and getattr(fn, "__name__", None):  # method/slot descriptors
        return f"{callable_name(objclass)}.{fn.__name__}"
    if isinstance(fn, types.MethodType):
        owner = fn.__self__
        owner_name = callable_name(owner if isinstance(owner, type) else type(owner))
        return f"{owner_name}.{fn.__name__}"
    if module is None and isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        owner = getattr(fn, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            # A builtin method bound to a class (torch >= 2.15's ``Function.apply``) is
            # named by that class, not by its metaclass: two Functions' ``apply`` differ.
            return f"{callable_name(owner if isinstance(owner, type) else type(owner))}.{fn.__name__}"
        module = getattr(owner, "__name__", "builtins")
    if isinstance(fn, functools.partial):
        return f"partial({callable_name(fn.func)}, {digest(value(list(fn.args)))}, {digest(value(fn.keywords))})"
    if not qualname or module is None:
        raise BypassCache(f"cannot name callable {fn!r}")
    if "<lambda>" in qualname or "<locals>" in qualname:
        name = getattr(fn, "__name__", None)
        if (module.split(".")[0] == "torch" and isinstance(name, str) and name.isidentifier()
                and getattr(sys.modules.get(module), name, None) is fn):
            # torch's own closures published under a module name (``F.max_pool2d`` is
            # ``boolean_dispatch.<locals>.fn``): what they close over is torch's source,
            # which the key's torch version covers
            return f"{module}.{name}"
        raise BypassCache(f"callable {module}.{qualname} has no stable name (a lambda or a local function)")
    return f"{module}.{qualname}"


def code_name(fn) -> str:
    """Like :func:`callable_name`, but a local function or lambda is named by its
    qualified name plus a hash of its bytecode and constants (for decomposition tables,
    whose entries are often closures made per op; the op is part of the key too)."""
    if isinstance(fn, functools.partial):
        return f"partial({code_name(fn.func)}, {digest(value(list(fn.args)))}, {digest(value(fn.keywords))})"
    try:
        return callable_name(fn)
    except BypassCache:
        code = getattr(fn, "__code__", None)
        if code is None:
            raise
        consts = [c for c in code.co_consts if isinstance(c, (int, float, str, bytes, bool, type(None)))]
        body = hashlib.sha256(code.co_code + repr(consts).encode()).hexdigest()[:16]
        return f"{fn.__module__}.{fn.__qualname__}#{body}"


def value(v, node_index: dict | None = None):
    """A JSON description of an FX argument or constant; raises :class:`BypassCache`."""
    if isinstance(v, torch.fx.Node):
        if node_index is None or v not in node_index:
            raise BypassCache("reference to a node outside the graph")
        return {"t": "node", "i": node_index[v]}
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return {"t": "int", "v": v}
    if isinstance(v, float):
        return {"t": "float", "v": repr(v)} if not math.isfinite(v) else {"t": "float", "v": v.hex()}
    if isinstance(v, complex):
        return {"t": "complex", "v": repr(v)}
    if isinstance(v, (list, tuple)):
        return {"t": type(v).__name__, "v": [value(a, node_index) for a in v]}
    if isinstance(v, dict):
        return {"t": "dict", "v": [[value(k, node_index), value(a, node_index)] for k, a in v.items()]}
    if isinstance(v, slice):
        return {"t": "slice", "v": [value(v.start, node_index), value(v.stop, node_index), value(v.step, node_index)]}
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return {"t": type(v).__name__, "v": str(v)}
    if isinstance(v, torch.Tensor):
        meta = tensor_meta(v)
        if not _is_fake(v) and v.device.type != "meta":
            meta["data"] = hashlib.sha256(v.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
                                          .numpy().tobytes()).hexdigest()
        return meta
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return {"t": "sym", "v": _sym(v)}
    if type(v) is type(Ellipsis):
        return "..."
    if callable(v):
        return {"t": "callable", "v": callable_name(v)}
    raise BypassCache(f"cannot describe a {type(v).__name__} in the graph")


def graph_description(gm: torch.fx.GraphModule) -> list:
    """The graph as a list of nodes, names/stack traces/line numbers left out.

    Placeholders are described by their ``meta["val"]``/``meta["example_value"]``, and
    the strides the caller's guard checks (``meta["torchkiln_guarded_strides"]``, where
    set: the compiled code then leaves their check out); ``get_attr`` nodes by the
    attribute's value (a tensor's metadata and data hash).
    """
    index: dict = {}
    nodes = []
    for i, n in enumerate(gm.graph.nodes):
        index[n] = i
        if n.op == "placeholder":
            ev = n.meta.get("val", n.meta.get("example_value"))
            nodes.append(["placeholder", value(ev) if ev is not None else None])
            if n.meta.get("torchkiln_guarded_strides") is not None:
                nodes[-1].append(list(n.meta["torchkiln_guarded_strides"]))
        elif n.op == "get_attr":
            attr = gm
            for part in str(n.target).split("."):
                attr = getattr(attr, part)
            if isinstance(attr, torch.fx.GraphModule):
                nodes.append(["get_attr", graph_description(attr)])
            else:
                nodes.append(["get_attr", value(attr)])
        elif n.op == "call_module":
            raise BypassCache("graph calls a submodule")
        else:
            target = n.target if n.op == "call_method" else callable_name(n.target)
            nodes.append([n.op, target, value(list(n.args), index), value(dict(n.kwargs), index)])
    return nodes


def inputs_description(example_inputs) -> list:
    """Metadata of each input (never a real tensor's data)."""
    return [tensor_meta(a) if isinstance(a, torch.Tensor) else value(a) for a in example_inputs]


def shape_facts(example_inputs) -> dict | None:
    """What the shape environment of symbolic inputs knows (its guards so far, the
    symbols' value ranges, replacements), as data; None when no input size is symbolic.
    Tracing decides sizes from these facts (``s0 // 3`` is 1 while ``3 <= s0 <= 5``):
    a graph compiled under other facts may have been specialized differently, so a key
    of a symbolic graph holds them."""
    syms = []
    for a in example_inputs:
        if isinstance(a, torch.Tensor):
            syms += [v for v in (*a.shape, *a.stride(), a.storage_offset()) if isinstance(v, torch.SymInt)]
        elif isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            syms.append(a)
    if not syms:
        return None
    env = syms[0].node.shape_env
    symbols = set().union(*(v.node.expr.free_symbols for v in syms))
    ranges = getattr(env, "var_to_range", {})
    return {"guards": [str(g.expr) for g in env.guards],
            "ranges": sorted([str(sym), str(ranges.get(sym))] for sym in symbols),
            "replacements": sorted([str(k), str(v)] for k, v in env.replacements.items())}


def config_description(cfg) -> dict:
    """Every setting of a :class:`torchkiln.config.Config`, described."""
    return {k: _config_value(v) for k, v in sorted(cfg.to_dict().items())}


def _config_value(v):
    try:
        return value(v)
    except BypassCache:
        return repr(v)
