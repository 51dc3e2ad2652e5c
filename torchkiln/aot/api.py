"""Public entry points: ``aot_function``, ``aot_module``, ``aot_module_simplified``,
``aot_export_joint_simple`` (names and signatures of torch.compile's AOTAutograd).

The pipeline for one set of inputs (``create_aot_dispatcher``):
fake inputs → view/mutation analysis → (inference graph | joint graph → partition)
→ compile forward now, backward on first use → runtime wrapper.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Optional

import torch
import torch.utils._pytree as pytree

from ..utils.counters import counters
from ..utils.logging import get_artifact_logger
from .analysis import run_analysis
from .compilers import nop
from .config import config
from .fakes import make_fake_inputs, tracing_context
from .partitioners import default_partition, min_cut_rematerialization_partition
from .runtime import call_compiled, finish_call, make_autograd_function
from .tracing import trace_forward, trace_joint as _trace_joint

log = get_artifact_logger("aot_graphs")
_ids = itertools.count()


@dataclasses.dataclass
class AOTConfig:
    """Everything that decides how a function is compiled (mirrors torch's ``AOTConfig``)."""

    fw_compiler: Callable
    bw_compiler: Optional[Callable] = None
    partition_fn: Optional[Callable] = None
    decompositions: Optional[dict] = None
    num_params_buffers: int = 0
    keep_inference_input_mutations: bool = False
    inference_compiler: Optional[Callable] = None
    dynamic: bool = False
    aot_id: int = dataclasses.field(default_factory=lambda: next(_ids))

    def __post_init__(self):
        self.bw_compiler = self.bw_compiler or self.fw_compiler
        self.inference_compiler = self.inference_compiler or self.fw_compiler
        if self.partition_fn is None:
            self.partition_fn = (min_cut_rematerialization_partition if config.partitioner == "min_cut"
                                 else default_partition)


def _log_graph(title: str, gm: torch.fx.GraphModule, aot_id: int) -> None:
    if log.isEnabledFor(10):
        log.debug("====== %s graph %d ======\n%s", title, aot_id, gm.print_readable(print_output=False))


def _placeholder_vals(gm):
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]


def _mutated_input_aliases_another(args: list, mutated: list) -> bool:
    """Whether a mutated input shares storage with another input (``f(x, x[0])``): the
    graph treats inputs as independent, so such a call runs eagerly instead."""
    tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    for i in mutated:
        ptr = args[i].untyped_storage().data_ptr()
        if any(j != i and a.untyped_storage().data_ptr() == ptr for j, a in tensors):
            return True
    return False


def create_aot_dispatcher(fn: Callable, fake_args: list, fake_mode, aot_config: AOTConfig) -> Callable:
    """Compile ``fn`` (flat tensors/SymInts in, tuple/list out) for inputs like ``fake_args``.

    Returns ``runtime(*args) -> list`` of user outputs.  Raises whatever eager would
    raise while running ``fn`` (e.g. in-place on a leaf that requires grad).  A call
    whose mutated input aliases another input runs ``fn`` eagerly.
    """
    runtime = _create_runtime(fn, fake_args, fake_mode, aot_config)
    mutated = [i for i, info in enumerate(runtime.meta.inputs) if info.mutated]
    if not mutated:
        return runtime

    def checked_runtime(*args):
        if _mutated_input_aliases_another(list(args), mutated):
            counters["aot_autograd"]["eager_for_aliased_mutated_input"] += 1
            return list(fn(*args))
        return runtime(*args)

    return checked_runtime


def _create_runtime(fn: Callable, fake_args: list, fake_mode, aot_config: AOTConfig) -> Callable:
    with tracing_context(fake_mode):
        meta = run_analysis(fn, fake_args)
    needs_autograd = torch.is_grad_enabled() and meta.needs_autograd and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in fake_args)
    if log.isEnabledFor(10):
        log.debug("====== view/mutation analysis %d ======\n%s", aot_config.aot_id, meta.describe())
    if not needs_autograd:
        keep = aot_config.keep_inference_input_mutations
        gm = trace_forward(fn, meta, fake_args, fake_mode, aot_config.decompositions, keep)
        _log_graph("inference", gm, aot_config.aot_id)
        compiled = aot_config.inference_compiler(gm, _placeholder_vals(gm))
        returned = [i for i in meta.mutated_inputs
                    if not (keep and not (meta.inputs[i].mutates_metadata or meta.inputs[i].mutates_storage))]

        def inference_runtime(*args):
            with torch.no_grad():
                outs = call_compiled(compiled, args)
            return finish_call(list(args), outs, meta, returned)

        inference_runtime.meta = meta
        return inference_runtime

    joint = _trace_joint(fn, meta, fake_args, fake_mode, aot_config.decompositions)
    _log_graph("joint", joint, aot_config.aot_id)
    num_fw_outs = len(meta.fw_out_fakes)
    fw_gm, bw_gm = aot_config.partition_fn(joint, None, num_fwd_outputs=num_fw_outs)
    _log_graph("forward", fw_gm, aot_config.aot_id)
    _log_graph("backward", bw_gm, aot_config.aot_id)
    bw_inputs = [n for n in bw_gm.graph.nodes if n.op == "placeholder"]
    num_tangents = sum(1 for n in bw_inputs if n.name.startswith("tangents"))
    saved = bw_inputs[:len(bw_inputs) - num_tangents]
    num_saved_syms = sum(1 for n in saved if not isinstance(n.meta.get("val"), torch.Tensor))
    num_saved_tensors = len(saved) - num_saved_syms
    with torch.no_grad():
        fw_compiled = aot_config.fw_compiler(fw_gm, _placeholder_vals(fw_gm))
    bw_compiled = []

    def get_bw():
        if not bw_compiled:
            with torch.no_grad():
                bw_compiled.append(aot_config.bw_compiler(bw_gm, _placeholder_vals(bw_gm)))
        return bw_compiled[0]

    fn_cls = make_autograd_function(fw_compiled, get_bw, meta, num_saved_tensors, num_saved_syms, num_fw_outs)
    returned = list(meta.mutated_inputs)

    def autograd_runtime(*args):
        outs = list(fn_cls.apply(*args))
        return finish_call(list(args), outs, meta, returned)

    autograd_runtime.meta = meta
    autograd_runtime.fw_module = fw_gm
    autograd_runtime.bw_module = bw_gm
    return autograd_runtime


def _dedupe(args: list):
    """(kept indices, source index per argument) for tensors passed more than once."""
    keep, source = [], []
    for i, a in enumerate(args):
        first = next((j for j in keep if isinstance(a, torch.Tensor) and args[j] is a), None)
        if first is None:
            keep.append(i)
            source.append(len(keep) - 1)
        else:
            source.append(keep.index(first))
    return keep, source


def aot_dispatch_flat(fn: Callable, args: list, aot_config: AOTConfig, example_values: Optional[list] = None):
    """Dedupe duplicated tensor arguments, fakeify, and compile; returns ``runtime(*args)``."""
    keep, source = _dedupe(args)
    if len(keep) != len(args):
        counters["aot_autograd"]["dupe_args"] += 1

        def deduped_fn(*unique):
            return fn(*[unique[s] for s in source])

        inner_fn = deduped_fn
    else:
        inner_fn = fn
    unique_args = [args[i] for i in keep]
    evs = [example_values[i] for i in keep] if example_values is not None else None
    fake_mode, fake_args = make_fake_inputs(unique_args, evs, aot_config.dynamic)
    runtime = create_aot_dispatcher(inner_fn, fake_args, fake_mode, aot_config)
    guard_code = None
    if aot_config.dynamic and fake_mode.shape_env is not None:
        guard_code = fake_mode.shape_env.produce_guards_expression(fake_args, ignore_static=False)
    shape_env = fake_mode.shape_env

    def guards_hold(call_args) -> bool:
        """The size guards recorded while tracing with symbolic sizes hold for ``call_args``."""
        return guard_code is None or shape_env.evaluate_guards_expression(guard_code, [call_args[i] for i in keep])

    if len(keep) == len(args) and not config.debug_assert:
        runtime.guards_hold = guards_hold
        return runtime

    def dedup_runtime(*call_args):
        if config.debug_assert:
            for i, s in enumerate(source):
                if i != keep[s] and call_args[i] is not call_args[keep[s]]:
                    raise AssertionError(f"argument {i} was the same tensor as argument {keep[s]} at compile time")
            for a, b in itertools.combinations(keep, 2):
                if isinstance(call_args[a], torch.Tensor) and call_args[a] is call_args[b]:
                    raise AssertionError(f"arguments {a} and {b} are the same tensor now but were not at compile time")
        return runtime(*[call_args[i] for i in keep])

    dedup_runtime.guards_hold = guards_hold
    return dedup_runtime


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

    def flat_fn(*args):
        if names:
            out = torch.func.functional_call(gm, dict(zip(names, args[:len(names)])), tuple(args[len(names):]))
        else:
            out = gm(*args)
        return out if isinstance(out, (list, tuple)) else (out,)

    runtime = aot_dispatch_flat(flat_fn, list(named.values()) + list(example_inputs), aot_config, evs)

    def forward(*args):
        if names:
            current = dict(gm.named_parameters(remove_duplicate=False))
            current.update(gm.named_buffers(remove_duplicate=False))
            args = tuple(current[n] for n in names) + args
        return tuple(runtime(*args))

    forward.zero_grad = getattr(gm, "zero_grad", None)
    forward.named_parameters = getattr(gm, "named_parameters", None)
    return forward


def aot_export_joint_simple(func: Callable, args: list, *, trace_joint: bool,
                            decompositions: Optional[dict] = None) -> torch.fx.GraphModule:
    """The functional ATen graph of ``func`` (forward only, or joint ``(primals, tangents)``)
    without a runtime wrapper.  Raises ``RuntimeError`` if ``func`` mutates an input or
    returns an alias of an input, which a bare graph could not express.
    """
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


__all__ = ["AOTConfig", "aot_function", "aot_module", "aot_module_simplified", "aot_export_joint_simple",
           "create_aot_dispatcher", "nop"]
