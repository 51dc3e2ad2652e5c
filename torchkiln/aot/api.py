"""Public entry points: ``aot_function``, ``aot_module``, ``aot_module_simplified``,
``aot_export_joint_simple`` (names and signatures of torch.compile's AOTAutograd).
The pipeline behind them is in ``dispatch.py``.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.utils._pytree as pytree

from . import autograd_cache
from .analysis import run_analysis
from .config import config
from .dispatch import AOTConfig, _load_runtime, _mutated_input_aliases_another, aot_dispatch_flat
# fakes, tracing and ShapeEnv (sympy: ~1 s) are imported where a graph is traced:
# ``load_compiled`` (a warm start) needs none of them

def aot_function(fn: Callable, fw_compiler: Callable, bw_compiler: Optional[Callable] = None,
                 partition_fn: Optional[Callable] = None, decompositions: Optional[dict] = None,
                 num_params_buffers: int = 0, keep_inference_input_mutations: bool = False,
                 inference_compiler: Optional[Callable] = None, dynamic: bool = False) -> Callable:
    """Compile ``fn`` ahead of time for forward and backward (mirrors ``functorch.compile.aot_function``).

    ``fn`` takes and returns pytrees of tensors (other leaves are constants baked into
    the graph).  Compiles on the first call and again when the inputs' shapes, strides,
    dtypes, requires_grad, constants or the grad mode change; with ``dynamic=True``
    sizes are symbolic and a new compile happens only when a size guard recorded while
    tracing (e.g. a branch on ``x.shape[0] > 5``) fails.
    """
    aot_config = AOTConfig(fw_compiler, bw_compiler, partition_fn, decompositions, num_params_buffers,
                           keep_inference_input_mutations, inference_compiler, dynamic)
    cache: dict = {}

    def returned(*args, **kwargs):
        flat, spec = pytree.tree_flatten((args, kwargs))
        tensor_idx = [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)]
        key = (spec, torch.is_grad_enabled(), tuple(
            (tuple(a.shape) if not dynamic else a.dim(), a.stride() if not dynamic else None, a.dtype,
             a.device, a.requires_grad) if isinstance(a, torch.Tensor) else ("const", a) for a in flat))
        entries = cache.setdefault(key, [])
        tensors = [flat[i] for i in tensor_idx]
        entry = next((e for e in entries if e[0].guards_hold(tensors)), None)
        if entry is None:
            out_spec = []

            def flat_fn(*tensors):
                full = list(flat)
                for i, t in zip(tensor_idx, tensors):
                    full[i] = t
                a, kw = pytree.tree_unflatten(full, spec)
                out = fn(*a, **kw)
                leaves, ospec = pytree.tree_flatten(out)
                for leaf in leaves:
                    if not isinstance(leaf, (torch.Tensor, torch.SymInt, int, float, bool, type(None))):
                        raise TypeError(f"aot_function: output leaf of type {type(leaf).__name__} is neither a "
                                        "tensor nor a scalar; register it as a pytree node")
                out_spec[:] = [ospec]
                return leaves

            runtime = aot_dispatch_flat(flat_fn, tensors, aot_config)
            entry = (runtime, out_spec[0])
            entries.append(entry)
        runtime, ospec = entry
        return pytree.tree_unflatten(runtime(*tensors), ospec)

    returned.aot_config = aot_config
    return returned


class _AOTModule(torch.nn.Module):
    def __init__(self, mod: torch.nn.Module, compiled: Callable):
        super().__init__()
        self.orig_module = mod
        self._compiled = compiled

    def forward(self, *args, **kwargs):
        named = dict(self.orig_module.named_parameters(remove_duplicate=False))
        named.update(dict(self.orig_module.named_buffers(remove_duplicate=False)))
        return self._compiled(named, *args, **kwargs)


def aot_module(mod: torch.nn.Module, *args, **kwargs) -> torch.nn.Module:
    """``aot_function`` over ``mod``'s forward with parameters and buffers lifted to inputs.

    Returns a module whose forward calls the compiled function; arguments after ``mod``
    are those of :func:`aot_function`.
    """

    def functional_call(named, *a, **kw):
        return torch.func.functional_call(mod, named, a, kw)

    n = len(list(mod.parameters())) + len(list(mod.buffers()))
    kwargs.setdefault("num_params_buffers", n)
    return _AOTModule(mod, aot_function(functional_call, *args, **kwargs))


def aot_module_simplified(gm: torch.nn.Module, example_inputs: list, fw_compiler: Callable,
                          bw_compiler: Optional[Callable] = None, partition_fn: Optional[Callable] = None,
                          decompositions: Optional[dict] = None, keep_inference_input_mutations: bool = False,
                          inference_compiler: Optional[Callable] = None) -> Callable:
    """Compile a captured graph for ``example_inputs`` (the backend entry point).

    ``gm`` takes flat tensors/SymInts (parameters lifted as placeholders, as capture
    does; parameters left as attributes are lifted here) and returns a tuple or list; placeholders' ``meta["example_value"]`` fakes, when present, give the
    fake mode and symbolic sizes.  Returns ``forward(*args)`` returning a tuple of
    ``gm``'s outputs.  Compiles once; capture's guards decide when to call it again.
    """
    from torch.fx.experimental.symbolic_shapes import PropagateUnbackedSymInts

    from .fakes import _active_fake_mode, shape_env_of
    from .torch_level_refusals import torch_level_refusal

    if isinstance(gm, torch.fx.GraphModule) and torch_level_refusal(gm) is not None:
        return gm.forward  # torch's decomposition would answer where eager raises (or answers otherwise)
    aot_config = AOTConfig(fw_compiler, bw_compiler, partition_fn, decompositions, 0,
                           keep_inference_input_mutations, inference_compiler, False)
    # Parameters and buffers still held as attributes (not lifted by capture) become
    # leading inputs, so that gradients reach them and their current values are used.
    named = dict(gm.named_parameters(remove_duplicate=False))
    named.update(gm.named_buffers(remove_duplicate=False))
    names = list(named)
    evs = None
    if isinstance(gm, torch.fx.GraphModule):
        evs = [n.meta.get("example_value", n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]
        if len(evs) != len(example_inputs):
            evs = None
    evs = [None] * len(names) + evs if evs is not None else None
    if evs is not None:  # the strides capture's guard checks (docs/interfaces.md)
        aot_config.guarded_strides = tuple([None] * len(names) + [
            n.meta.get("torchkiln_guarded_strides") for n in gm.graph.nodes if n.op == "placeholder"])

    capture_env = None  # the ShapeEnv of capture's data-dependent symbols, if any
    if isinstance(gm, torch.fx.GraphModule):
        for n in gm.graph.nodes:
            if "unbacked_bindings" in n.meta:
                capture_env = shape_env_of(n.meta.get("example_value"))
                break

    def flat_fn(*args):
        if names:
            out = torch.func.functional_call(gm, dict(zip(names, args[:len(names)])), tuple(args[len(names):]))
        elif capture_env is not None and getattr(_active_fake_mode(), "shape_env", None) is capture_env:
            # data-dependent sizes (u0 = x.item() ...): each trace's new symbols are renamed
            # to capture's, so the analysis, the joint graph and its tangents agree on them
            out = PropagateUnbackedSymInts(gm).run(*args)
        else:
            out = gm(*args)
        return out if isinstance(out, (list, tuple)) else (out,)

    flat_args = list(named.values()) + list(example_inputs)
    cache_key = None
    if config.enable_autograd_cache:
        if names:
            autograd_cache._bypass("parameters held as module attributes")
        elif capture_env is not None:
            autograd_cache._bypass("data-dependent sizes (unbacked symbols)")
        else:
            cache_key = autograd_cache.try_key(gm, example_inputs, aot_config)
    runtime = aot_dispatch_flat(flat_fn, flat_args, aot_config, evs, cache_key)
    if runtime.meta.grad_enabled_after is not None:
        # A captured graph ends in the grad mode it starts in (docs/interfaces.md); one that
        # does not was handed over in another grad mode than the one it runs in.
        with torch.set_grad_enabled(runtime.meta.grad_enabled_after):
            runtime = aot_dispatch_flat(flat_fn, flat_args, aot_config, evs)

    def forward(*args):
        if names:
            current = dict(gm.named_parameters(remove_duplicate=False))
            current.update(gm.named_buffers(remove_duplicate=False))
            args = tuple(current[n] for n in names) + args
        return tuple(runtime(*args))

    forward.zero_grad = getattr(gm, "zero_grad", None)
    forward.named_parameters = getattr(gm, "named_parameters", None)
    # the AOT autograd cache entry this runtime is (None: not cached, or a runtime the
    # entry alone cannot rebuild); capture's warm start reloads it with load_compiled
    forward.aot_cache_key = getattr(runtime, "cache_key", None) if not names else None
    return forward


def load_compiled(cache_key: str, *, fw_compiler: Callable, bw_compiler: Optional[Callable] = None,
                  inference_compiler: Optional[Callable] = None) -> Optional[Callable]:
    """What ``aot_module_simplified`` returned when it compiled (or loaded) the AOT
    autograd cache entry ``cache_key``, rebuilt from that entry alone: no graph, no
    tracing.  None (a miss, counted) when the entry or one of its FX graphs is gone or
    it is gone.  When the graph mutates inputs, ``forward.unsafe_call(args)`` says whether
    a mutated input shares storage with another one (``f(x, x[0])``), which the graph
    cannot run (``aot_dispatch_flat`` runs such a call eagerly, from the graph this
    runtime does not have): the caller must guard on it; ``forward`` raises instead of
    computing a wrong result when it is not."""
    aot_config = AOTConfig(fw_compiler, bw_compiler, _loaded_runtimes_do_not_partition, None, 0, False,
                           inference_compiler, False)
    runtime = _load_runtime(cache_key, aot_config)
    if runtime is None:
        return None
    mutated = [i for i, info in enumerate(runtime.meta.inputs) if info.mutated]

    def unsafe_call(args) -> bool:
        return bool(mutated) and _mutated_input_aliases_another(list(args), mutated)

    def forward(*args):
        if mutated and unsafe_call(args):
            raise RuntimeError("a mutated graph input shares storage with another input; the caller of "
                               "load_compiled must guard on forward.unsafe_call")
        return tuple(runtime(*args))

    forward.unsafe_call = unsafe_call if mutated else None
    forward.aot_cache_key = cache_key
    return forward


def _loaded_runtimes_do_not_partition(*args, **kwargs):
    """``load_compiled``'s partitioner: a runtime rebuilt from the cache has no joint graph
    (and the default one would import the partitioner's modules: sympy, ~1 s)."""
    raise AssertionError("a runtime loaded from the AOT autograd cache does not partition")


def aot_export_joint_simple(func: Callable, args: list, *, trace_joint: bool,
                            decompositions: Optional[dict] = None) -> torch.fx.GraphModule:
    """The functional ATen graph of ``func`` (forward only, or joint ``(primals, tangents)``)
    without a runtime wrapper.  Raises ``RuntimeError`` if ``func`` mutates an input or
    returns an alias of an input, which a bare graph could not express.
    """
    from .fakes import make_fake_inputs, tracing_context
    from .tracing import trace_forward, trace_joint as _trace_joint

    fake_mode, fake_args = make_fake_inputs(list(args))

    def flat_fn(*a):
        out = func(*a)
        return out if isinstance(out, (list, tuple)) else (out,)

    with tracing_context(fake_mode):
        meta = run_analysis(flat_fn, fake_args)
    if meta.mutated_inputs:
        raise RuntimeError("aot_export_joint_simple does not support input mutations")
    meta = meta.without_intermediate_bases()
    if any(o.kind != "plain" for o in meta.outputs):
        raise RuntimeError("aot_export_joint_simple does not support outputs that alias inputs or each other")
    if trace_joint:
        return _trace_joint(flat_fn, meta, fake_args, fake_mode, decompositions)
    return trace_forward(flat_fn, meta, fake_args, fake_mode, decompositions)
