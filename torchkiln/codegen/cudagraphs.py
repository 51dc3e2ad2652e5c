"""CUDA graphs for ``mode="reduce-overhead"``: record a compiled graph once, replay it.

:class:`CUDAGraphRunner` wraps one compiled graph (forward, backward or inference).
Per input signature (tensor shapes, int values) it runs the graph normally on the first
call (a warm-up: kernels compile and bind, libraries initialize), records it into a
``torch.cuda.CUDAGraph`` on the second call and replays that recording from then on:

* **Static inputs**: parameters, and tensors whose address was the same on the warm-up
  and the recording call, are read in place (a replay checks their address; a moved one
  re-records).  Every other tensor input is copied into a placeholder the graph reads.
* **One memory pool per compiled graph** (``torch.cuda.graph_pool_handle``) shared by its
  recordings (per recording for training graphs, whose outputs outlive the next
  replay of another recording); a new input signature records again (up to
  :data:`MAX_RECORDINGS`).
* **Outputs**: an inference graph returns its static output tensors, overwritten by
  the next replay, as torch.compile's (clone what you keep).  A training graph (forward
  or backward) returns new tensors over the static outputs' memory: autograd saves a
  forward's outputs until the backward, and a backward's gradients become ``.grad``.
  Before each replay the runner checks that nothing outside it still uses that memory
  (the storages' use counts are back to what the runner itself holds: the outputs of
  the last replay, the tensors saved for the backward, ``.grad``s from it are gone);
  if something does (two forwards before a backward, gradients accumulated across
  steps, an output kept by the user), this call runs as compiled, not recorded, and
  ``counters["inductor"]["cudagraph_live_outputs"]`` counts it.  TorchInductor's
  cudagraph trees check the same liveness.  ``codegen.config.cudagraphs_training``
  (default on) records training graphs at all.
* **Warm-up**: a signature records on its second call; a training graph's on its third
  when a tensor input that is not a parameter moved between the first two (a
  backward's saved tensors come from the forward's warm-up first, from its recording
  after), so that inputs stable from then on are read in place.
* **Fallback**: a graph that cannot be recorded runs as compiled, with the reason
  logged once (``TORCHKILN_LOGS=perf_hints``) and counted in
  ``counters["inductor"]["cudagraph_skips"]``: tensors off the GPU, ops that
  synchronize with the host, mutated inputs that are not static, too many input
  signatures, or an error while recording.

Mirrors ``torch._inductor.cudagraph_trees`` without its trees: each compiled graph owns
its recordings and pool (see :func:`cudagraph_mark_step_begin`).
"""
from __future__ import annotations

import torch

from ..utils.counters import counters
from ..utils.logging import get_artifact_logger

perf_hints = get_artifact_logger("perf_hints")

MAX_RECORDINGS = 8
# ops that synchronize with the host or return data-dependent shapes (not recordable)
_SYNC_OPS = {"aten._local_scalar_dense", "aten.nonzero", "aten.item", "aten.masked_select", "aten.unique",
             "aten._unique2", "aten.equal", "aten.is_nonzero", "aten._assert_async", "aten.repeat_interleave"}

_generation = [0]
DEVICE = "cuda"  # the device whose tensors are recorded (tests simulate recording on "cpu")


def _new_graph():
    return torch.cuda.CUDAGraph()


def _capture(graph, pool, fn):
    """Record ``fn()`` into ``graph`` (allocations from ``pool``); returns its result."""
    with torch.cuda.graph(graph, pool=pool):
        return fn()


def _new_pool():
    return torch.cuda.graph_pool_handle()


def cudagraph_mark_step_begin() -> None:
    """Mark the start of a new step (``torch.compiler.cudagraph_mark_step_begin``).

    torchkiln checks before each replay of a training graph that its earlier outputs are
    no longer used, and an inference graph's outputs are overwritten by its next replay
    in any case, so this only counts steps; it exists so code written for torch.compile
    runs."""
    _generation[0] += 1


def graph_skip_reason(gm: torch.fx.GraphModule, example_inputs) -> str | None:
    """Why ``gm`` cannot be recorded whatever its inputs, or None."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type != DEVICE:
            return f"an input on {x.device.type}"
    for n in gm.graph.nodes:
        if n.op == "call_function":
            name = str(getattr(n.target, "_overloadpacket", n.target))
            if name in _SYNC_OPS:
                return f"{name} synchronizes with the host"
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor) and val.device.type != DEVICE:
            return f"a {val.device.type} tensor in the graph ({n.name})"
    return None


def _mutated_inputs(gm: torch.fx.GraphModule) -> set:
    """Indices of placeholders the graph writes (``copy_`` or an in-place op into one)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(placeholders)}
    out = set()
    for n in gm.graph.nodes:
        if n.op != "call_function" or not n.args:
            continue
        schema = getattr(n.target, "_schema", None)
        mutates = schema is not None and schema.arguments and schema.arguments[0].alias_info is not None \
            and schema.arguments[0].alias_info.is_write
        if mutates and n.args[0] in index:
            out.add(index[n.args[0]])
    return out


def _storage_id(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _use_count(storage_id: int) -> int:
    return torch._C._storage_Use_Count(storage_id)


class _Recording:
    __slots__ = ("graph", "static", "ptrs", "by_index", "copies", "outputs", "watch")

    def __init__(self, graph, static, ptrs, copies, outputs) -> None:
        self.graph, self.static, self.ptrs, self.copies, self.outputs = graph, static, ptrs, copies, outputs
        self.watch: dict = {}  # storage of an output or a placeholder -> its use count held by the runner

    def watch_outputs(self, args) -> None:
        """Remember the use counts of the output and placeholder storages a replay
        overwrites (not those of static inputs: a replay writes them only as the graph
        does), while the runner holds the only references."""
        static = {_storage_id(args[i]) for i in self.static}
        for t in list(self.outputs) + [dst for _, dst in self.copies]:
            if isinstance(t, torch.Tensor) and _storage_id(t) not in static:
                self.watch[_storage_id(t)] = 0
        for sid in self.watch:
            self.watch[sid] = _use_count(sid)

    def in_use(self) -> bool:
        """Whether a tensor outside the runner still uses memory the next replay writes."""
        return any(_use_count(sid) > n for sid, n in self.watch.items())


class CUDAGraphRunner:
    """``runner(*args) -> tuple``: ``compiled`` recorded and replayed (module docstring).

    ``compiled`` takes the graph's inputs positionally and returns a tuple; ``gm`` and
    ``example_inputs`` are the graph it was compiled from (for the static checks);
    ``training``: a forward or backward graph, whose outputs are new tensors over the
    static outputs' memory, replayed only when that memory is no longer in use.
    """

    def __init__(self, compiled, gm, example_inputs, training: bool) -> None:
        self.compiled = compiled
        self.cache_key = getattr(compiled, "cache_key", None)
        self.training = training
        self.mutated = _mutated_inputs(gm)
        self.skip_reason = None
        self.pool = None
        self.warm: dict = {}  # input signature -> input addresses of its last warm-up call
        self.warmups: dict = {}  # input signature -> warm-up calls so far
        self.live_fallbacks = 0
        self.recordings: dict = {}
        self.records = 0
        reason = graph_skip_reason(gm, example_inputs)
        if reason is not None:
            self._skip(reason)

    def _skip(self, reason: str) -> None:
        self.skip_reason = reason
        self.recordings.clear()
        counters["inductor"]["cudagraph_skips"] += 1
        perf_hints.info("skipping cudagraphs: %s", reason)

    def __call__(self, *args):
        if self.skip_reason is not None:
            return self.compiled(*args)
        sig = tuple(a.shape if isinstance(a, torch.Tensor) else a for a in args)
        rec = self.recordings.get(sig)
        if rec is not None:
            if self.training and rec.in_use():  # an earlier replay's outputs are still used
                self.live_fallbacks += 1
                counters["inductor"]["cudagraph_live_outputs"] += 1
                if self.live_fallbacks == 1:
                    perf_hints.info("cudagraphs: outputs of an earlier replay are still in use; running the graph "
                                    "without its recording while they are")
                return self.compiled(*args)
            if not _static_inputs_in_place(args, rec.by_index, rec.static):
                for i, ptr in zip(rec.static, rec.ptrs):
                    if args[i].data_ptr() != ptr:  # a static input moved: record again without it
                        return self._record(sig, args, [j for j in rec.static if j != i])
            for i, dst in rec.copies:
                dst.copy_(args[i])
            rec.graph.replay()
            return self._outputs(rec)
        before = self.warm.get(sig)
        if before is None:
            if any(isinstance(a, torch.Tensor) and a.device.type != DEVICE for a in args):
                self._skip("an input off the GPU")
            else:  # warm-up: compiles and binds kernels, initializes libraries
                self.warm[sig] = _addresses(args)
                self.warmups[sig] = 1
            return self.compiled(*args)
        static = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)
                  and (isinstance(a, torch.nn.Parameter) or a.data_ptr() == before[i])]
        moved = sum(isinstance(a, torch.Tensor) for a in args) - len(static)
        if self.training and moved and self.warmups[sig] < 2:  # one more warm-up: inputs stable from now on are static
            self.warm[sig] = _addresses(args)
            self.warmups[sig] += 1
            return self.compiled(*args)
        return self._record(sig, args, static)

    def _outputs(self, rec: _Recording):
        if self.training:  # new tensors over the static memory: their use counts show liveness
            return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in rec.outputs)
        return rec.outputs

    def _record(self, sig, args, static: list):
        self.recordings.pop(sig, None)
        self.records += 1
        if self.records > 2 * MAX_RECORDINGS or len(self.recordings) >= MAX_RECORDINGS:
            self._skip(f"more than {MAX_RECORDINGS} input signatures or recordings")
            return self.compiled(*args)
        copied = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in static]
        if self.mutated.intersection(copied):
            self._skip("the graph mutates an input that is not static")
            return self.compiled(*args)
        if self.pool is None or self.training:
            # a training recording's outputs live until the backward: no other recording
            # may reuse its memory, so each has its own pool
            self.pool = _new_pool()
        inputs = list(args)
        copies = []
        for i in copied:
            a = args[i]
            dst = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
            dst.copy_(a)
            inputs[i] = dst
            copies.append((i, dst))
        graph = _new_graph()
        try:
            outputs = _capture(graph, self.pool, lambda: self.compiled(*inputs))
        except Exception as e:  # an op that cannot be captured: run as compiled from now on
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            self._skip(f"recording failed: {type(e).__name__}: {str(e)[:200]}")
            return self.compiled(*args)
        rec = _Recording(graph, static, [args[i].data_ptr() for i in static], copies, tuple(outputs))
        rec.by_index = [None] * len(args)
        for i, ptr in zip(static, rec.ptrs):
            rec.by_index[i] = ptr
        _check_ptrs_equal(args, rec.by_index, static)
        del outputs
        if self.training:
            rec.watch_outputs(args)
        self.recordings[sig] = rec
        graph.replay()
        return self._outputs(rec)


def _static_inputs_in_place(args, by_index, indices) -> bool:
    """Whether ``args[i].data_ptr() == by_index[i]`` for each ``i`` in ``indices``: one C++
    call where torch has it (what cudagraph trees check on each replay; the ~100
    parameters of a ResNet cost ~15 us a replay in Python), else a Python loop."""
    if _ptrs_equal[0] is not None:
        return _ptrs_equal[0](list(args), by_index, indices)
    return all(args[i].data_ptr() == by_index[i] for i in indices)


def _check_ptrs_equal(args, by_index, indices) -> None:
    """Use torch's C++ check only once it answered a recording's own inputs right."""
    if _ptrs_equal[0] is None:
        return
    try:
        ok = _ptrs_equal[0](list(args), by_index, indices) is True
    except Exception:
        ok = False
    if not ok:
        _ptrs_equal[0] = None


_ptrs_equal = [getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)]


def _addresses(args) -> list:
    return [a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args]


class CUDAGraphCompiler:
    """A graph compiler for AOT autograd (``fw_compiler`` etc.) that wraps what ``inner``
    compiles in a :class:`CUDAGraphRunner`.  It has no ``graph_cache``, so AOT
    autograd's cache is bypassed (a loaded graph would lack the FX graph the runner
    checks); ``inner``'s FX graph cache still serves the compiles."""

    def __init__(self, inner, training: bool) -> None:
        self.inner = inner
        self.training = training

    def __call__(self, gm, example_inputs, **kwargs):
        from . import config

        compiled = self.inner(gm, example_inputs, **kwargs)
        if self.training and not config.cudagraphs_training:
            counters["inductor"]["cudagraph_skips"] += 1
            perf_hints.info("skipping cudagraphs: a training graph (codegen.config.cudagraphs_training is off)")
            return compiled
        return CUDAGraphRunner(compiled, gm, example_inputs, self.training)
