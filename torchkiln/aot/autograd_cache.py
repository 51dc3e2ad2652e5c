"""The AOT autograd cache: a compiled forward/backward pair saved by the content of
the captured graph, so that a hit skips tracing, functionalization and partitioning.

Key (:func:`autograd_cache_key`): the canonical torch-level graph and its input
metadata (``cache/keys.py``), grad mode, autocast state, the ``AOTConfig`` (compiler
functions, partitioner and decompositions by name; not ``aot_id``), every
``aot.config`` setting, the graph compiler's own key parts (its config and toolchain)
and the versions.  Entry: the FX graph cache keys of the forward and backward (or the
inference graph) and the runtime metadata (input mutations, output aliases and their
static layouts, intermediate bases, saved-tensor counts), as JSON.  On a hit the
graphs are loaded through the compiler's ``graph_cache`` protocol
(``torchkiln/cache/__init__.py``); if either is gone (``FxGraphCache.clear()``), it
is a miss.  Mirrors ``torch._functorch._aot_autograd.autograd_cache``; counters
``counters["aot_autograd"]["autograd_cache_miss" | "_hit" | "_saved" | "_bypass"]``.

The backward is compiled together with the forward here (docs/aot.md), so an entry is
saved at compile time, once both exist; torch saves it at the first ``.backward()``.
Symbolic sizes: the key holds the symbols as named in the graph plus the shape
environment's facts about them as data (its guards so far, the symbols' value
ranges, replacements): everything tracing and lowering may have relied on.  The guards
that compiling added (``Eq(s0, 8)``, ``2*s1 <= s0``...) are saved as expressions over
those symbols; a hit first checks each against the current sizes (a false one is a
miss) and then adds it to the current shape environment, so the frame's guards are
the same as after a compile.  Unbacked symbols and compiles that add deferred runtime
asserts bypass.  Not cached (bypass) otherwise: compilers without a graph cache,
graphs the key cannot describe, a backward whose compile failed.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import sys

import torch

from ..cache import entry as cache_entry
from ..cache import get_store, keys
from ..cache.keys import BypassCache
from ..utils import trace
from ..utils.counters import counters
from .analysis import InputInfo, OutputInfo, ViewAndMutationMeta
from .config import config

log = logging.getLogger("torchkiln.cache")
NAMESPACE = "aotautograd"


class BypassAOTAutogradCache(BypassCache):
    """This graph cannot be cached by the AOT autograd cache (the message says why)."""


class AOTAutogradCache:
    """``AOTAutogradCache.clear()`` drops every saved forward/backward pair."""

    @staticmethod
    def clear() -> None:
        get_store().clear(NAMESPACE)


def _graph_cache(fn):
    return getattr(fn, "graph_cache", None)


def _aot_config_description(aot_config) -> dict:
    decomps = aot_config.decompositions or {}
    return {
        "fw_compiler": keys.callable_name(aot_config.fw_compiler),
        "bw_compiler": keys.callable_name(aot_config.bw_compiler),
        "inference_compiler": keys.callable_name(aot_config.inference_compiler),
        "partition_fn": keys.callable_name(aot_config.partition_fn),
        "decompositions": _decompositions_digest(decomps),
        "num_params_buffers": aot_config.num_params_buffers,
        "keep_inference_input_mutations": aot_config.keep_inference_input_mutations,
        "dynamic": aot_config.dynamic,
    }


_decomp_digests: dict = {}


def _decompositions_digest(decomps: dict) -> str:
    """Digest of a decomposition table (op → function), memoized per table object; a
    table that names itself (``cache_digest``, e.g. codegen's lazy one) is not read."""
    named = getattr(decomps, "cache_digest", None)
    if isinstance(named, str):
        return named
    cached = _decomp_digests.get(id(decomps))
    if cached is not None and cached[0] is decomps and cached[1] == len(decomps):
        return cached[2]
    d = keys.digest(sorted([str(op), keys.code_name(fn)] for op, fn in decomps.items()))
    _decomp_digests[id(decomps)] = (decomps, len(decomps), d)
    return d


def _autocast_state() -> list:
    state = []
    for dev in ("cpu", "cuda"):
        try:
            state.append([dev, torch.is_autocast_enabled(dev), str(torch.get_autocast_dtype(dev))])
        except (RuntimeError, TypeError):  # a device type this build lacks
            state.append([dev, None, None])
    return state


# key -> (shape env, its guard count, its deferred assert count) when the key was made;
# read by save() (the guards the compile added) and load() (where to add them back)
_pending_shapes: dict = {}


def _placeholder_fakes(gm, example_inputs) -> list:
    """The placeholders' fake values (capture's ``example_value``: symbolic sizes where
    the graph is dynamic), or ``[]`` when the graph has none for every input."""
    if not isinstance(gm, torch.fx.GraphModule):
        return []
    fakes = [n.meta.get("example_value", n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]
    if len(fakes) != len(example_inputs) or any(f is None for f in fakes):
        return []
    return fakes


def _symints(example_inputs):
    for a in example_inputs:
        if isinstance(a, torch.Tensor):
            yield from (v for v in (*a.shape, *a.stride(), a.storage_offset()) if isinstance(v, torch.SymInt))
        elif isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            yield a


def _shape_env(example_inputs):
    return next((v.node.shape_env for v in _symints(example_inputs)), None)


def _num_deferred_asserts(env) -> int:
    return sum(len(v) for v in getattr(env, "deferred_runtime_asserts", {}).values())


def _shape_facts(env, example_inputs) -> dict:
    """The shape environment as data: what compiling these inputs may rely on."""
    symbols = set()
    for v in _symints(example_inputs):
        symbols |= v.node.expr.free_symbols
    if any(not str(sym).startswith("s") for sym in symbols):
        raise BypassAOTAutogradCache("unbacked or non-size symbols in the inputs")
    if _num_deferred_asserts(env):
        raise BypassAOTAutogradCache("deferred runtime asserts on sizes")
    ranges = getattr(env, "var_to_range", {})
    return {"guards": [str(g.expr) for g in env.guards],
            "ranges": sorted([str(sym), str(ranges.get(sym))] for sym in symbols),
            "replacements": sorted([str(k), str(v)] for k, v in env.replacements.items())}


def _hints(env) -> dict:
    """Symbol → its value in this process (``backed_var_to_val`` from torch 2.13 on)."""
    hints = getattr(env, "backed_var_to_val", None)
    return hints if hints is not None else env.var_to_val


def _guard_text(expr) -> str:
    """A guard as text that :func:`_parse_guard` reads back exactly (``srepr``: torch's
    sympy functions such as FloorDiv by name); raises BypassCache when it would not."""
    import sympy

    text = sympy.srepr(expr)
    try:
        ok = _parse_guard(text) == expr
    except (ValueError, TypeError, SyntaxError):
        ok = False
    if not ok:
        raise BypassAOTAutogradCache(f"a size guard that does not read back: {expr}")
    return text


def _parse_guard(text: str):
    import sympy
    import torch.utils._sympy.functions as sympy_fns

    import ast

    names = {"true": sympy.true, "false": sympy.false}
    for module in (sympy, sympy_fns):  # torch's functions (Mod, FloorDiv...) win over sympy's namesakes
        names.update({n: v for n, v in vars(module).items() if not n.startswith("_") and isinstance(v, type)})
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):  # constructor calls of named sympy classes and literals only
        if isinstance(node, ast.Name) and node.id not in names:
            raise ValueError(f"unknown name {node.id!r} in a size guard")
        if not isinstance(node, (ast.Expression, ast.Call, ast.Name, ast.Constant, ast.keyword, ast.Load,
                                 ast.Tuple, ast.UnaryOp, ast.USub)):
            raise ValueError(f"unexpected {type(node).__name__} in a size guard")
    return eval(compile(tree, "<size guard>", "eval"), {"__builtins__": {}}, names)  # noqa: S307 - checked above


def _replay_guards(texts: list, env) -> bool:
    """Check the saved guards against the current sizes; if all hold, add them to
    ``env`` (as compiling would have) and return True."""
    import sympy

    hints = _hints(env)
    exprs = [_parse_guard(t) for t in texts]
    for expr in exprs:
        if expr.free_symbols - set(hints) or expr.xreplace(hints) is not sympy.true:
            return False
    for expr in exprs:
        env.evaluate_expr(expr)
    return True


def autograd_cache_key(gm: torch.fx.GraphModule, example_inputs, config_, shape_facts: dict | None = None) -> str:
    """The AOT autograd cache key of ``gm`` for ``example_inputs`` under ``config_`` (an
    ``AOTConfig``); stable across processes.  Raises :class:`BypassAOTAutogradCache`
    for a graph or config it cannot describe (mirrors torch's ``autograd_cache_key``)."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and str(getattr(n.target, "__module__", "")).startswith("torchkiln.compiled_autograd"):
            raise BypassAOTAutogradCache("a compiled autograd region")
    try:
        compiler_parts = []
        for fn in (config_.fw_compiler, config_.bw_compiler, config_.inference_compiler):
            gc = _graph_cache(fn)
            parts = getattr(gc, "key_parts", None)
            compiler_parts.append(parts() if parts is not None else None)
        desc = {
            "graph": keys.graph_description(gm),
            "inputs": keys.inputs_description(example_inputs),
            "grad_enabled": torch.is_grad_enabled(),
            "autocast": _autocast_state(),
            "aot_config": _aot_config_description(config_),
            "aot_global_config": keys.config_description(config),
            "compilers": compiler_parts,
            "versions": keys.versions(),
        }
        if shape_facts is not None:
            desc["shape_env"] = shape_facts
    except BypassAOTAutogradCache:
        raise
    except BypassCache as e:
        raise BypassAOTAutogradCache(str(e)) from e
    return "aot" + keys.digest(desc)[:48]


def _bypass(reason: str) -> None:
    counters["aot_autograd"]["autograd_cache_bypass"] += 1
    log.info("AOT autograd cache bypass: %s", reason)
    if trace.enabled:
        trace.emit("cache", {"stage": "aot_autograd", "event": "bypass", "reason": reason})


def try_key(gm, example_inputs, aot_config) -> str | None:
    """The key, or None (and a counted bypass) when this compile cannot use the cache."""
    compilers = (aot_config.fw_compiler, aot_config.bw_compiler, aot_config.inference_compiler)
    if any(_graph_cache(fn) is None or not _graph_cache(fn).enabled() for fn in compilers):
        _bypass("the graph compiler has no enabled FX graph cache")
        return None
    ca_state = sys.modules.get("torchkiln.compiled_autograd.state")  # a later stage: looked up, not imported
    if ca_state is not None and ca_state.in_graph:
        _bypass("a compiled autograd graph")  # as torch: compiled autograd regions are not cached
        return None
    try:
        fakes = _placeholder_fakes(gm, example_inputs)
        env = _shape_env(fakes)
        if env is None:
            return autograd_cache_key(gm, example_inputs, aot_config)
        key = autograd_cache_key(gm, fakes, aot_config, _shape_facts(env, fakes))
        if len(_pending_shapes) > 64:  # keys whose compile failed: forget the oldest
            del _pending_shapes[next(iter(_pending_shapes))]
        _pending_shapes[key] = (env, len(env.guards), _num_deferred_asserts(env))
        return key
    except BypassCache as e:
        _bypass(str(e))
    except Exception as e:  # describing the graph must never break compiling it
        _bypass(f"{type(e).__name__}: {e}")
    return None


# ---- runtime metadata as plain data
def _fake_desc(f, layout_used: bool = True):
    """``[sizes, strides, offset, dtype]``; a symbolic layout only where the runtime
    does not read it (``layout_used=False``: then ``[None, None, None, dtype]``)."""
    if not isinstance(f, torch.Tensor):
        return None
    parts = [list(f.shape), list(f.stride()), f.storage_offset()]
    if any(not isinstance(s, int) for s in parts[0] + parts[1] + [parts[2]]):
        if layout_used:
            raise BypassAOTAutogradCache("symbolic sizes in an aliased output or a mutated input")
        parts = [None, None, None]
    return parts + [str(f.dtype).removeprefix("torch.")]


def _fake_load(d):
    if d is None:
        return None
    size, stride, offset, dtype = d
    if size is None:  # symbolic: only the dtype is read (runtime.finish_call needs no layout)
        return torch.empty(0, dtype=getattr(torch, dtype), device="meta")
    return torch.empty(0, dtype=getattr(torch, dtype), device="meta").as_strided(size, stride, offset)


def meta_to_json(meta: ViewAndMutationMeta) -> dict:
    """The runtime metadata as JSON.  Layouts are kept where ``runtime.finish_call``
    reads them (mutated inputs, outputs regenerated as views); elsewhere a symbolic
    one is dropped.  Raises BypassAOTAutogradCache for what has no plain-data form."""
    outputs = []
    for o in meta.outputs:
        if o.view_metas is not None:  # functionalization's C++ ViewMeta objects: no plain-data form
            raise BypassAOTAutogradCache("an output view is replayed from its base through view metas")
        d = dataclasses.asdict(dataclasses.replace(o, fake=None))
        d["fake"] = _fake_desc(o.fake, o.kind != "plain") if o.is_tensor else None
        outputs.append(d)
    n_mut = len(meta.mutated_inputs)
    n_out = len(meta.outputs)
    fw_fakes = [_fake_desc(f, i < n_mut or (i < n_mut + n_out and meta.outputs[i - n_mut].kind != "plain")
                           or i >= n_mut + n_out)
                for i, f in enumerate(meta.fw_out_fakes)]
    return {"inputs": [dataclasses.asdict(i) for i in meta.inputs], "outputs": outputs,
            "num_intermediate_bases": meta.num_intermediate_bases,
            "intermediate_bases_require_grad": list(meta.intermediate_bases_require_grad),
            "grad_enabled_after": meta.grad_enabled_after,
            "fw_out_fakes": fw_fakes}


def meta_from_json(d: dict) -> ViewAndMutationMeta:
    outputs = [OutputInfo(**{**o, "fake": _fake_load(o["fake"])}) for o in d["outputs"]]
    return ViewAndMutationMeta(inputs=[InputInfo(**i) for i in d["inputs"]], outputs=outputs,
                               num_intermediate_bases=d["num_intermediate_bases"],
                               intermediate_bases_require_grad=d["intermediate_bases_require_grad"],
                               grad_enabled_after=d["grad_enabled_after"],
                               fw_out_fakes=[_fake_load(f) for f in d["fw_out_fakes"]])


def save(key: str, meta: ViewAndMutationMeta, parts: dict) -> bool:
    """Save an entry; ``parts`` names the compiled graphs (``"fw"``, ``"bw"`` or
    ``"inference"``: callables carrying ``cache_key``) and plain runtime facts.
    Returns whether it was saved (False: a counted bypass)."""
    try:
        graphs = {}
        for name in ("fw", "bw", "inference"):
            if name in parts:
                k = getattr(parts[name], "cache_key", None)
                if k is None:
                    raise BypassAOTAutogradCache(f"the {name} graph was not saved in the FX graph cache")
                graphs[name] = k
        facts = {k: v for k, v in parts.items() if k not in ("fw", "bw", "inference", "bw_graph")}
        body = {"graphs": graphs, "meta": meta_to_json(meta), "facts": facts}
        blobs = {}
        if parts.get("bw_graph") is not None:  # a blob: a hit parses it only if compiled autograd traces it
            blobs["bw_graph"] = json.dumps(parts["bw_graph"], separators=(",", ":")).encode()
        pending = _pending_shapes.pop(key, None)
        if pending is not None:
            env, n_guards, n_asserts = pending
            if _num_deferred_asserts(env) != n_asserts:
                raise BypassAOTAutogradCache("compiling added deferred runtime asserts on sizes")
            body["shape_guards"] = [_guard_text(g.expr) for g in env.guards[n_guards:]]
        payload = cache_entry.pack(body, blobs)
    except BypassCache as e:
        _bypass(str(e))
        return False
    get_store().put(NAMESPACE, key, payload)
    counters["aot_autograd"]["autograd_cache_saved"] += 1
    return True


class _GuardsDoNotHold(Exception):
    pass


def load(key: str, aot_config):
    """``(meta, graphs, facts)`` of the entry under ``key`` with every graph loaded
    (``graphs``: name → compiled callable), or None; counts the hit or miss.
    ``facts["bw_graph"]``: the backward ATen graph as JSON bytes (parsed by the caller
    when it needs the graph: :func:`load_bw_graph`), or None."""
    payload = get_store().get(NAMESPACE, key)
    found = None
    if payload is not None:
        try:
            entry, blobs = cache_entry.unpack(payload)
            meta = meta_from_json(entry["meta"])
            pending = _pending_shapes.get(key)
            if entry.get("shape_guards") and (pending is None or not _replay_guards(entry["shape_guards"], pending[0])):
                raise _GuardsDoNotHold()
            compilers = {"fw": aot_config.fw_compiler, "bw": aot_config.bw_compiler,
                         "inference": aot_config.inference_compiler}
            graphs = {}
            for name, fx_key in entry["graphs"].items():
                graphs[name] = _graph_cache(compilers[name]).load(fx_key)
                if graphs[name] is None:
                    break
            else:
                found = (meta, graphs, {**entry["facts"], "bw_graph": blobs.get("bw_graph")})
                _pending_shapes.pop(key, None)
        except _GuardsDoNotHold:  # compiled for other sizes: a plain miss
            pass
        except Exception as e:  # a damaged or stale entry is a miss
            counters["cache"]["unloadable"] += 1
            log.warning("torchkiln AOT autograd cache: entry %s could not be loaded (%s: %s)", key, type(e).__name__, e)
    counters["aot_autograd"]["autograd_cache_hit" if found else "autograd_cache_miss"] += 1
    if trace.enabled:
        trace.emit("cache", {"stage": "aot_autograd", "event": "hit" if found else "miss", "key": key,
                             "reason": "" if found else ("not in the cache" if payload is None else "entry or its graphs unloadable")})
    return found
