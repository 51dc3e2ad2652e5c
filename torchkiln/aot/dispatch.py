"""The pipeline for one set of inputs: fake inputs → view/mutation analysis →
(inference graph | joint graph → partition) → compile the forward, then the backward
(again on first use if that fails) → runtime wrapper.  Also: duplicate-argument dedup
and size guards.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import itertools
import json
from typing import Callable, Optional

import torch

from ..utils.counters import counters
from ..utils import trace
from ..utils.logging import get_artifact_logger
from . import autograd_cache
from .analysis import PLAIN, ViewAndMutationMeta, run_analysis
from .broadcast_tangents import broadcast_positions, with_broadcast_tangents
from .config import config
from .runtime import call_compiled, finish_call, function_apply, make_autograd_function, nothing_to_finish
# fakes, partitioners and tracing (ShapeEnv, sympy: ~1 s) are imported where a graph is
# traced, not at import: a runtime loaded from the AOT autograd cache needs none of them

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
    # per argument: the strides capture's guard checks it has (None: unchecked); see
    # _mark_guarded_strides
    guarded_strides: tuple = ()

    def __post_init__(self):
        self.bw_compiler = self.bw_compiler or self.fw_compiler
        self.inference_compiler = self.inference_compiler or self.fw_compiler
        if self.partition_fn is None:
            from .partitioners import default_partition, min_cut_rematerialization_partition

            self.partition_fn = (min_cut_rematerialization_partition if config.partitioner == "min_cut"
                                 else default_partition)


def _log_graph(title: str, gm: torch.fx.GraphModule, aot_id: int) -> None:
    if log.isEnabledFor(10):
        log.debug("====== %s graph %d ======\n%s", title, aot_id, gm.print_readable(print_output=False))
    if trace.enabled:
        with trace.stage("trace"):  # the trace's own cost, shown apart in the report
            trace.emit("aot_graph", {"graph": title, "aot_id": aot_id, "code": gm.print_readable(print_output=False)})


def _trace_partition(saved: list, aot_id: int) -> None:
    """The ``partition`` trace record: what the forward saves for the backward, and its bytes."""
    rows = []
    for n in saved:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            numel = val.numel()
            nbytes = int(numel) * val.element_size() if isinstance(numel, int) else None
            rows.append({"name": n.name, "shape": [str(d) for d in val.shape], "dtype": str(val.dtype), "bytes": nbytes})
        else:
            rows.append({"name": n.name, "shape": None, "dtype": type(val).__name__, "bytes": 0})
    trace.emit("partition", {"aot_id": aot_id, "saved": rows,
                             "saved_bytes": sum(r["bytes"] or 0 for r in rows)})


def _mark_guarded_strides(gm: torch.fx.GraphModule, aot_config: AOTConfig) -> None:
    """``meta["torchkiln_guarded_strides"]`` on the placeholders of ``gm`` (the inference
    graph or the training forward: one placeholder per argument, in order, each passed
    to the compiled graph as it is) whose argument capture's guard checks every stride
    of, where the placeholder's fake has those strides (docs/interfaces.md)."""
    flags = aot_config.guarded_strides
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if not any(flags) or len(placeholders) != len(flags):
        return
    for n, strides in zip(placeholders, flags):
        val = n.meta.get("val")
        if strides is not None and isinstance(val, torch.Tensor) and tuple(val.stride()) == strides:
            n.meta["torchkiln_guarded_strides"] = strides


def _placeholder_vals(gm):
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]


def _mutated_input_aliases_another(args: list, mutated: list) -> bool:
    """Whether a mutated input shares storage with another input (``f(x, x[0])``): the
    graph treats inputs as independent, so such a call runs eagerly instead.  One pass
    over the inputs (models with many BatchNorm buffers have many mutated inputs)."""
    ptrs = [a.untyped_storage().data_ptr() if isinstance(a, torch.Tensor) else 0 for a in args]
    counts = collections.Counter(p for p in ptrs if p)
    return any(counts[ptrs[i]] > 1 for i in mutated if ptrs[i])


def create_aot_dispatcher(fn: Callable, fake_args: list, fake_mode, aot_config: AOTConfig,
                          cache_key: Optional[str] = None) -> Callable:
    """Compile ``fn`` (flat tensors/SymInts in, tuple/list out) for inputs like ``fake_args``.

    Returns ``runtime(*args) -> list`` of user outputs.  Raises whatever eager would
    raise while running ``fn`` (e.g. in-place on a leaf that requires grad).  A call
    whose mutated input aliases another input runs ``fn`` eagerly.  With ``cache_key``
    (``autograd_cache.try_key``) a saved pair is loaded instead of traced, and a new
    one is saved.
    """
    runtime = _load_runtime(cache_key, aot_config) if cache_key is not None else None
    if runtime is None:
        runtime = _create_runtime(fn, fake_args, fake_mode, aot_config, cache_key)
    mutated = [i for i, info in enumerate(runtime.meta.inputs) if info.mutated]
    if not mutated:
        return runtime

    def checked_runtime(*args):
        if _mutated_input_aliases_another(list(args), mutated):
            counters["aot_autograd"]["eager_for_aliased_mutated_input"] += 1
            return list(fn(*args))
        return runtime(*args)

    checked_runtime.meta = runtime.meta
    if hasattr(runtime, "cache_key"):  # capture's warm start reloads it (load_compiled guards on aliasing)
        checked_runtime.cache_key = runtime.cache_key
    return checked_runtime


def _load_runtime(cache_key: str, aot_config: AOTConfig) -> Optional[Callable]:
    """The runtime of a saved pair (AOT autograd cache hit), or None."""
    found = autograd_cache.load(cache_key, aot_config)
    if found is None:
        return None
    meta, graphs, facts = found
    if "inference" in graphs:
        runtime = _bump_versions(_inference_wrapper(graphs["inference"], meta, facts["returned"],
                                                    facts.get("detached", ())),
                                 [i for i in meta.mutated_inputs if i not in facts["returned"]])
    else:
        bw = graphs["bw"]
        # Backwards for stride-0 tangents need the compiled backward for them, which a hit
        # does not have: tangents are made contiguous instead (same values).  The backward
        # ATen graph (stored as JSON data) is what compiled autograd traces, as on a cold
        # compile; it is parsed when compiled autograd first asks for it, not here.
        data = facts.get("bw_graph")
        fn_cls = make_autograd_function(graphs["fw"], lambda broadcast=(): bw, meta, facts["num_saved_tensors"],
                                        facts["num_fw_outs"], forward_in_grad_mode=facts["forward_in_grad_mode"],
                                        load_bw_module=None if data is None else functools.cache(
                                            lambda: _load_bw_graph(data)), in_graph=facts.get("in_graph", ()))
        runtime = _bump_versions(_autograd_wrapper(fn_cls, meta, facts.get("in_graph", ())), facts.get("in_graph", ()))
    if facts.get("grad_inside"):
        runtime = _with_grad_mode_on(runtime, meta)
    runtime.meta = meta
    runtime.cache_key = cache_key  # where it came from (capture's warm start records it)
    return runtime


def _load_bw_graph(data: bytes) -> Optional[torch.fx.GraphModule]:
    """The backward ATen graph of an AOT autograd cache entry (JSON bytes), or None."""
    from . import graph_json

    try:
        return graph_json.graph_from_json(json.loads(data))
    except (ValueError, KeyError, AttributeError, TypeError) as e:  # data of another torch: no graph
        log.debug("AOT autograd cache: the stored backward graph does not load (%s)", e)
        return None


def _bw_graph_data(bw_gm: torch.fx.GraphModule):
    from . import graph_json

    try:
        return graph_json.graph_to_json(bw_gm)
    except ValueError as e:  # compiled autograd calls this backward instead of tracing it
        log.debug("AOT autograd cache: backward graph not stored (%s)", e)
        return None


def _create_runtime(fn: Callable, fake_args: list, fake_mode, aot_config: AOTConfig,
                    cache_key: Optional[str] = None) -> Callable:
    from .fakes import tracing_context

    any_requires_grad = any(isinstance(a, torch.Tensor) and a.requires_grad for a in fake_args)
    may_need_grad = torch.is_grad_enabled() and any_requires_grad
    # grad_inside: called with grad mode off, the function turns it on itself
    # (``with torch.enable_grad():``) and returns outputs that require grad
    grad_inside = False
    while True:
        with contextlib.ExitStack() as stack:
            stack.enter_context(tracing_context(fake_mode, joint=may_need_grad))  # the op choices of the trace
            if fake_mode.shape_env is not None:
                # Data-dependent sizes (nonzero, masked_select) get their symbols in the trace.
                stack.enter_context(fake_mode.shape_env.ignore_fresh_unbacked_symbols())
            with trace.stage("aot.analysis"):
                meta = run_analysis(fn, fake_args)
        if may_need_grad or not any_requires_grad or not meta.needs_autograd:
            break
        may_need_grad = grad_inside = True
    if log.isEnabledFor(10):
        log.debug("====== view/mutation analysis %d ======\n%s", aot_config.aot_id, meta.describe())
    make = _autograd_runtime if may_need_grad and meta.needs_autograd else _inference_runtime
    runtime = make(fn, meta, fake_args, fake_mode, aot_config)
    if grad_inside:
        runtime = _with_grad_mode_on(runtime, meta)
    runtime.meta = meta
    if cache_key is not None:
        parts = runtime.cache_parts
        if parts is not None and "bw" in parts:
            parts = {**parts, "bw_graph": _bw_graph_data(runtime.bw_module)}
        if parts is None:
            autograd_cache._bypass("the backward graph failed to compile ahead of time")
        elif autograd_cache.save(cache_key, meta, parts):
            runtime.cache_key = cache_key
    return runtime


def _inference_runtime(fn, meta: ViewAndMutationMeta, fake_args, fake_mode, aot_config: AOTConfig) -> Callable:
    """One graph, no autograd.Function (no input needs grad, or grad mode is off)."""
    from .tracing import trace_forward

    keep = aot_config.keep_inference_input_mutations
    with trace.stage("aot.trace_forward"):
        gm = trace_forward(fn, meta, fake_args, fake_mode, aot_config.decompositions, keep)
    _log_graph("inference", gm, aot_config.aot_id)
    returned = [i for i in meta.mutated_inputs
                if not (keep and not (meta.inputs[i].mutates_metadata or meta.inputs[i].mutates_storage))]
    detached = _plain_outputs_that_are_inputs(gm, meta, len(returned))
    _mark_guarded_strides(gm, aot_config)
    compiled = aot_config.inference_compiler(gm, _placeholder_vals(gm))
    runtime = _bump_versions(_inference_wrapper(compiled, meta, returned, detached),
                             [i for i in meta.mutated_inputs if i not in returned])
    runtime.cache_parts = {"inference": compiled, "returned": returned, "detached": detached}
    return runtime


def _with_grad_mode_on(runtime: Callable, meta: ViewAndMutationMeta) -> Callable:
    """``runtime`` called with grad mode on: for a graph entered with grad mode off whose
    outputs need grad all the same (it enables grad itself), so that the compiled
    autograd.Function records its node.  The caller's grad mode comes back afterwards,
    or the one the function leaves (``meta.grad_enabled_after``)."""
    def with_grad(*args):
        with torch.enable_grad():
            outs = runtime(*args)
        if meta.grad_enabled_after is not None:
            torch._C._set_grad_enabled(meta.grad_enabled_after)
        return outs

    with_grad.__dict__.update(runtime.__dict__)  # fw_module, bw_module, cache_parts
    if with_grad.__dict__.get("cache_parts") is not None:
        with_grad.cache_parts = {**with_grad.cache_parts, "grad_inside": True}
    return with_grad


def _bump_versions(runtime: Callable, in_graph) -> Callable:
    """``runtime`` that also bumps the version counter of the inputs the compiled graph
    wrote itself (an in-graph ``copy_`` compiles to a store into the input's memory,
    which autograd does not see): as after eager's in-place op, a tensor saved for a
    backward and then written this way makes that backward raise instead of reading the
    new value."""
    if not in_graph:
        return runtime
    increment = torch._C._increment_version

    def bumped(*args):
        outs = runtime(*args)
        increment([args[i] for i in in_graph])
        return outs

    return bumped


def _plain_outputs_that_are_inputs(gm: torch.fx.GraphModule, meta: ViewAndMutationMeta, n_returned: int) -> list:
    """User outputs (their positions) that the analysis found to be fresh tensors but the
    traced graph returns as an input: ``x.detach()`` / ``x.alias()`` of an input, which
    the trace reduces to the input itself.  Eager returns a new tensor object sharing
    the input's memory, so the runtime returns ``.detach()`` of the input (an
    ``x.requires_grad_()`` or ``t_()`` on it must not reach the input)."""
    outs = list(gm.graph.output_node().args[0])[n_returned:]
    return [k for k, info in enumerate(meta.outputs)
            if info.kind == PLAIN and info.is_tensor and k < len(outs)
            and isinstance(outs[k], torch.fx.Node) and outs[k].op == "placeholder"]


def _inference_wrapper(compiled, meta: ViewAndMutationMeta, returned: list, detached=()) -> Callable:
    if detached:
        inner = _inference_wrapper(compiled, meta, returned)

        def detaching_runtime(*args):
            outs = list(inner(*args))
            for k in detached:
                outs[k] = outs[k].detach()
            return outs

        return detaching_runtime
    if nothing_to_finish(meta, returned):  # the user outputs are the graph's first outputs
        n_out = len(meta.outputs)

        def inference_runtime(*args):
            if not torch.is_grad_enabled():  # (a compiled backward, an inference loop): no switch
                return call_compiled(compiled, args)[:n_out]
            with torch.no_grad():
                return call_compiled(compiled, args)[:n_out]

        return inference_runtime

    def inference_runtime(*args):
        if torch.is_grad_enabled():
            with torch.no_grad():
                outs = call_compiled(compiled, args)
        else:
            outs = call_compiled(compiled, args)
        return finish_call(list(args), outs, meta, returned)

    return inference_runtime


def _autograd_runtime(fn, meta: ViewAndMutationMeta, fake_args, fake_mode, aot_config: AOTConfig) -> Callable:
    """Joint graph → partition → forward and backward compiled now (the backward again
    on first use if that failed)."""
    from .tracing import trace_joint

    with trace.stage("aot.trace_joint"):
        joint = trace_joint(fn, meta, fake_args, fake_mode, aot_config.decompositions)
    _log_graph("joint", joint, aot_config.aot_id)
    num_fw_outs = len(meta.fw_out_fakes)
    with trace.stage("aot.partition"):
        fw_gm, bw_gm = aot_config.partition_fn(joint, None, num_fwd_outputs=num_fw_outs)
    _log_graph("forward", fw_gm, aot_config.aot_id)
    _log_graph("backward", bw_gm, aot_config.aot_id)
    bw_inputs = [n for n in bw_gm.graph.nodes if n.op == "placeholder"]
    saved = [n for n in bw_inputs if not n.name.startswith("tangents")]
    num_saved_syms = sum(1 for n in saved if not isinstance(n.meta.get("val"), torch.Tensor))
    if trace.enabled:
        _trace_partition(saved, aot_config.aot_id)
    in_graph = _in_graph_mutations(fw_gm, meta, fake_args) if aot_config.keep_inference_input_mutations else []
    if in_graph:
        _write_mutations_in_graph(fw_gm, meta, in_graph)
        num_fw_outs -= len(in_graph)
        counters["aot_autograd"]["mutations_in_graph"] += len(in_graph)
    fw_gm.graph.output_node().meta["user_visible_outputs"] = num_fw_outs
    if all(n.name.startswith("primals") for n in fw_gm.graph.nodes if n.op == "placeholder"):
        _mark_guarded_strides(fw_gm, aot_config)
    with torch.no_grad():
        fw_compiled = aot_config.fw_compiler(fw_gm, _placeholder_vals(fw_gm))
    _restride_saved(fw_gm, bw_gm, getattr(fw_compiled, "output_strides", None), num_fw_outs)
    bw_compiled = {}

    def get_bw(broadcast: tuple = ()):
        """The compiled backward.  ``broadcast``: positions of tangents that arrive as an
        expanded scalar (``out.sum().backward()``: every stride 0); the backward is then
        compiled once more for that layout, so its kernels read the scalar instead of a
        full-size copy of it."""
        if broadcast not in bw_compiled:
            gm = with_broadcast_tangents(bw_gm, broadcast) if broadcast else bw_gm
            with torch.no_grad():
                bw_compiled[broadcast] = aot_config.bw_compiler(gm, _placeholder_vals(gm))
        return bw_compiled[broadcast]

    try:  # now, so that its build overlaps the forward's; on failure, again on first use
        bw_now = get_bw()
    except Exception:
        bw_now = None
        counters["aot_autograd"]["backward_compile_deferred"] += 1
        log.debug("compiling backward graph %d ahead of time failed; compiling it on first use",
                  aot_config.aot_id, exc_info=True)

    grad_mode_kernels = any(n.target is torch.ops.aten.mkldnn_rnn_layer.default for n in fw_gm.graph.nodes)
    fn_cls = make_autograd_function(fw_compiled, get_bw, meta, len(saved) - num_saved_syms, num_fw_outs,
                                    forward_in_grad_mode=grad_mode_kernels,
                                    broadcast_ok=broadcast_positions(bw_gm), bw_module=bw_gm, in_graph=in_graph)
    runtime = _bump_versions(_autograd_wrapper(fn_cls, meta, in_graph), in_graph)
    runtime.fw_module = fw_gm
    runtime.bw_module = bw_gm
    runtime.cache_parts = None if bw_now is None else {
        "fw": fw_compiled, "bw": bw_now, "num_saved_tensors": len(saved) - num_saved_syms,
        "num_fw_outs": num_fw_outs, "forward_in_grad_mode": grad_mode_kernels, "in_graph": in_graph}
    return runtime


def _in_graph_mutations(fw_gm: torch.fx.GraphModule, meta: ViewAndMutationMeta, fake_args: list) -> list:
    """The mutated inputs whose new value the compiled forward writes itself (an
    ``aten.copy_`` at the end of the forward graph) instead of returning it for the
    epilogue's ``copy_``: data-only mutations of inputs that do not require grad and
    whose new value needs none (batch norm's running statistics), as torch.compile's
    ``MUTATED_IN_GRAPH`` for training graphs.  Left to the epilogue: an input the
    forward also returns or saves for the backward (itself or a view of it: the
    backward would read the new value) and an input with broadcast (stride-0) dims."""
    n_mut = len(meta.mutated_inputs)
    placeholders = [n for n in fw_gm.graph.nodes if n.op == "placeholder"]
    outs = list(fw_gm.graph.output_node().args[0])
    returned = _returned_aliases(outs[n_mut:])
    kept = []
    for k, i in enumerate(meta.mutated_inputs):
        info, fake = meta.inputs[i], fake_args[i]
        if (info.mutates_metadata or info.mutates_storage or not info.mutates_data or info.requires_grad
                or info.mutation_needs_grad or not isinstance(fake, torch.Tensor) or fake.layout != torch.strided
                or i >= len(placeholders) or placeholders[i] in returned or not isinstance(outs[k], torch.fx.Node)
                or any(st == 0 and sz != 1 for sz, st in zip(fake.shape, fake.stride()))):
            continue
        kept.append(i)
    return kept


def _returned_aliases(outs: list) -> set:
    """Graph nodes that ``outs`` are or view (through view ops and getitem)."""
    found, stack = set(), [o for o in outs if isinstance(o, torch.fx.Node)]
    while stack:
        n = stack.pop()
        if n in found:
            continue
        found.add(n)
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.args \
                and isinstance(n.args[0], torch.fx.Node) and (n.target.is_view or n.target is torch.ops.aten.alias.default):
            stack.append(n.args[0])
    return found


def _write_mutations_in_graph(fw_gm: torch.fx.GraphModule, meta: ViewAndMutationMeta, kept: list) -> None:
    """``fw_gm`` ends with ``aten.copy_(input, new value)`` for each input in ``kept``
    and no longer returns those new values (its outputs shift left)."""
    graph = fw_gm.graph
    out_node = graph.output_node()
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    outs = list(out_node.args[0])
    drop = set()
    with graph.inserting_before(out_node):
        for k, i in enumerate(meta.mutated_inputs):
            if i in kept:
                copy = graph.call_function(torch.ops.aten.copy_.default, (placeholders[i], outs[k]))
                copy.meta["val"] = placeholders[i].meta.get("val")
                drop.add(k)
    out_node.args = (tuple(o for k, o in enumerate(outs) if k not in drop),)
    fw_gm.recompile()


def _restride_saved(fw_gm, bw_gm, strides, num_fw_outs: int) -> None:
    """The backward's saved-tensor placeholders given the strides the compiled forward
    returns them with (``strides``, one per forward output, None where unknown), as
    torch's AOT autograd does with Inductor's forward output strides: a channels-last
    activation is then read as it is, not copied to eager's strides on each side.  A
    forward that returns other strides at run time (an eager fallback) costs the
    backward a copy (its wrapper restrides inputs), never a wrong read."""
    if not strides:
        return
    fw_outs = fw_gm.graph.output_node().args[0]
    saved = {n.name: i for i, n in enumerate(fw_outs) if isinstance(n, torch.fx.Node) and i >= num_fw_outs}
    for ph in bw_gm.graph.nodes:
        if ph.op != "placeholder" or ph.name not in saved or saved[ph.name] >= len(strides):
            continue
        val, stride = ph.meta.get("val"), strides[saved[ph.name]]
        if not isinstance(val, torch.Tensor) or stride is None or len(stride) != val.dim() or tuple(val.stride()) == stride:
            continue
        if any(isinstance(s, torch.SymInt) for s in val.shape):
            continue
        with val.fake_mode if getattr(val, "fake_mode", None) is not None else contextlib.nullcontext():
            ph.meta["val"] = torch.empty_strided(val.shape, stride, dtype=val.dtype, device=val.device)
        ph.meta["traced_val"] = val  # what the users' fake values were computed from


def _autograd_wrapper(fn_cls, meta: ViewAndMutationMeta, in_graph=()) -> Callable:
    returned = [i for i in meta.mutated_inputs if i not in in_graph]
    apply = function_apply(fn_cls)
    if nothing_to_finish(meta, returned):
        n_out = len(meta.outputs)

        def autograd_runtime(*args):
            return list(apply(*args)[:n_out])

        return autograd_runtime

    def autograd_runtime(*args):
        outs = list(apply(*args))
        return finish_call(list(args), outs, meta, returned)

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


def aot_dispatch_flat(fn: Callable, args: list, aot_config: AOTConfig, example_values: Optional[list] = None,
                      cache_key: Optional[str] = None):
    """Dedupe duplicated tensor arguments, fakeify, and compile; returns ``runtime(*args)``.
    ``cache_key``: the AOT autograd cache key of the call (None: not cached)."""
    from .fakes import make_fake_inputs

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
    if aot_config.guarded_strides and len(keep) != len(args):
        aot_config = dataclasses.replace(aot_config, guarded_strides=tuple(aot_config.guarded_strides[i] for i in keep))
    fake_mode, fake_args = make_fake_inputs(unique_args, evs, aot_config.dynamic)
    if cache_key is not None and len(keep) != len(args):
        cache_key = cache_key + "-dedup-" + "-".join(map(str, source))
    runtime = create_aot_dispatcher(inner_fn, fake_args, fake_mode, aot_config, cache_key)
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
    dedup_runtime.meta = runtime.meta
    return dedup_runtime


