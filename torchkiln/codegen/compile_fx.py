"""Entry points: ``compile_fx`` (the "inductor" backend) and ``compile_fx_inner``.

``compile_fx_inner(gm, example_inputs)`` compiles one ATen graph (lowering →
scheduling → kernels → wrapper).  ``compile_fx(gm, example_inputs)`` is the backend
``torchkiln.compile`` calls with a torch-level graph: AOT autograd with the
decompositions of :mod:`.decompositions`, then ``compile_fx_inner`` for the forward
and the backward graph.  Mirrors ``torch._inductor.compile_fx``.  Any failure while
compiling falls back to running the graph eagerly, with one warning.
"""
from __future__ import annotations

import ast
import concurrent.futures
import logging
import threading
import warnings

import torch

from ..cache.keys import BypassCache
from ..exc import BackendCompilerFailed
from ..utils import progress, trace
from ..utils.strict import strict
from ..utils.counters import counters
from ..utils.logging import get_artifact_logger
from . import config, fx_graph_cache, metrics
from .generators import get_generator

output_code_log = get_artifact_logger("output_code")
cache_log = logging.getLogger("torchkiln.cache")
_warned: set = set()


class CompiledGraph:
    """The compiled callable: ``compiled(*args) -> tuple`` of the graph's outputs.

    ``source`` is the wrapper's Python source and ``kernel_source`` the kernels'.
    The kernels' build may still be running (C++ builds are asynchronous): then
    ``current_callable`` starts as a function that waits for the build, binds the
    wrapper, replaces itself with the wrapper's ``call`` and calls it, so later calls
    cost nothing extra.  A build that fails there warns once and the graph runs
    eagerly (``gm.forward``) from then on, as a failure at compile time does; a graph
    compiled under ``fullgraph=True`` raises :class:`BackendCompilerFailed` there instead
    (``codegen.config.debug``: the compiler's own error).
    ``cache_key`` is the graph's FX graph cache key (None: not cached); ``on_bound``
    runs once the kernels are built and bound (it saves the graph in the cache).
    """

    def __init__(self, gm, code, globals_: dict, pending, source: str, kernel_source: str,
                 kernels: list, launch_errors: tuple = (), cache_key: str | None = None,
                 on_bound=None) -> None:
        self.source = source
        self.kernel_source = kernel_source
        self.kernels = kernels
        self.cache_key = cache_key
        self._on_bound = on_bound
        self._gm, self._code, self._globals, self._pending = gm, code, globals_, pending
        self._debug = config.debug
        self._strict = strict()  # compiled under fullgraph=True: no eager fallback
        self._launch_errors = launch_errors
        self._finishing = threading.Lock()
        self.current_callable = self._bind() if pending.done() else self._finish_then_call

    @property
    def output_strides(self) -> tuple:
        """The strides each output is returned with (a tuple of ints per tensor output,
        None where symbolic or not a tensor), as the wrapper allocates them: channels-last
        activations a forward graph saves for its backward keep that layout
        (aot/dispatch.py compiles the backward for them).  Read from the wrapper's source,
        so a graph loaded from the FX graph cache has them too."""
        for line in reversed(self.source.splitlines()):
            if line.startswith("output_strides = "):
                return ast.literal_eval(line[len("output_strides = "):])
        return None

    def _bind(self):
        self._globals.update(self._pending.result())
        exec(self._code, self._globals)
        if self._on_bound is not None:
            on_bound, self._on_bound = self._on_bound, None
            on_bound(self._pending)
        call = self._globals["call"]
        if not self._launch_errors:
            return call
        gm, errors, debug = self._gm, self._launch_errors, self._debug

        def guarded(*args):
            # a kernel that fails to compile at its launch (Triton): eager from then on.
            # No kernel of such a graph writes a graph input (see _launch_errors), so
            # the kernels that ran before leave nothing behind.
            try:
                return call(*args)
            except errors as e:
                if debug:
                    raise
                if self._strict:
                    raise BackendCompilerFailed("inductor", e) from e
                self.current_callable = _fall_back(gm, e)
                return self.current_callable(*args)

        return guarded

    def _finish_then_call(self, *args):
        with self._finishing:
            if self.current_callable == self._finish_then_call:
                try:
                    with trace.stage("codegen.build_wait"):  # what is left of the kernels' build
                        self.current_callable = self._bind()
                except Exception as e:
                    if self._debug:
                        raise
                    if self._strict:  # stays unbound: the next call raises again
                        raise BackendCompilerFailed("inductor", e) from e
                    self.current_callable = _fall_back(self._gm, e)
                self._gm = self._code = self._globals = self._pending = None
        return self.current_callable(*args)

    def __call__(self, *args):
        return self.current_callable(*args)


def _device_of(graph: GraphLowering) -> torch.device:
    devices = {b.device for b in graph.buffers.values() if b.layout is not None}
    if not devices:
        return torch.device("cpu")
    if len(devices) > 1:
        cpu_scalars = {d for d in devices if d.type == "cpu"}
        devices = devices - cpu_scalars or devices
        if len(devices) > 1:
            raise UnsupportedGraph(f"graph spans several devices: {devices}")
    return next(iter(devices))


class UnsupportedGraph(NotImplementedError):
    """Codegen declines a graph it has no kernels for: the graph runs as its ATen ops
    (one warning).  A 'no', not a failed build, so ``fullgraph=True`` does not raise."""


def _kernel_device(graph, kernels, device: torch.device) -> torch.device:
    """The one device every generated kernel's buffers live on (``device`` when there are
    no kernels).  A CUDA graph may build CPU buffers (``torch.ones(u0)`` beside CUDA
    inputs read only by extern ops): its kernels are then C++ ones.  Kernels that would
    touch buffers of two devices are declined (:class:`UnsupportedGraph`): a Triton kernel
    handed a CPU buffer fails at launch, a C++ kernel handed a CUDA pointer reads device
    memory."""
    found = {}
    for k in kernels:
        for arg in k.buffers:
            dev = getattr(graph.buffers.get(arg.name), "device", None)
            if dev is not None:
                found.setdefault(torch.device(dev).type, (torch.device(dev), k.name, arg.name))
    if len(found) > 1:
        (d0, k0, b0), (d1, k1, b1) = list(found.values())[:2]
        raise UnsupportedGraph(f"kernels touch buffers on {d0} ({k0}: {b0}) and {d1} ({k1}: {b1}) "
                               "(kernels for several devices in one graph are not generated)")
    return next(iter(found.values()))[0] if found else device


def _needed_outside_kernels(graph, entries) -> set:
    from .nodes import Buffer, ExternKernel, ReinterpretView

    needed = set()

    def walk(a):
        if isinstance(a, (Buffer, ReinterpretView)):
            needed.add(a.name)
        elif isinstance(a, (list, tuple)):
            for b in a:
                walk(b)

    for e in entries:
        if isinstance(e, ExternKernel):
            walk(e.args)
            walk(list(e.kwargs.values()))
    walk(graph.outputs)
    return needed


def compile_fx_inner(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """Compile one ATen-level graph (nodes carry ``meta["val"]``) into a callable.

    The callable takes the placeholders' real values positionally and returns a tuple
    of the graph's outputs.  Never raises for an unsupported graph: it warns once and
    returns ``gm.forward`` (eager ATen) instead.  Returns before the kernels' C++ build
    finishes; a build error surfaces as that warning at the first call, which then runs
    eagerly.  ``codegen.config.debug`` (read here) raises instead, at the first call;
    so does a graph compiled under ``fullgraph=True`` (:func:`torchkiln.utils.strict.strict`),
    with :class:`torchkiln.exc.BackendCompilerFailed`.
    """
    key = None
    if config.fx_graph_cache and any("unbacked_bindings" in n.meta for n in gm.graph.nodes):
        # its runtime asserts come from the ShapeEnv (torch._check), not from the graph text
        _bypass("data-dependent sizes (unbacked symbols)")
    elif config.fx_graph_cache:
        key = _cache_key(gm, example_inputs)
        if key is not None:
            cached = fx_graph_cache.live(key) or fx_graph_cache.load(key)
            if cached is not None:
                counters["inductor"]["fxgraph_cache_hit"] += 1
                if trace.enabled:
                    trace.emit("cache", {"stage": "fx_graph", "event": "hit", "key": key})
                return cached
    try:
        compiled = _compile(gm, example_inputs, key)
    except Exception as e:  # any failure: a correct (eager) result, never a wrong one
        if key is not None:
            counters["inductor"]["fxgraph_cache_miss"] += 1
        if (config.debug or strict()) and not isinstance(e, UnsupportedGraph):
            raise
        return _fall_back(gm, e)
    metrics.graphs_compiled += 1
    return compiled


compile_fx_inner.graph_cache = fx_graph_cache.graph_cache


def _bypass(reason: str) -> None:
    counters["inductor"]["fxgraph_cache_bypass"] += 1
    cache_log.info("FX graph cache bypass: %s", reason)
    if trace.enabled:
        trace.emit("cache", {"stage": "fx_graph", "event": "bypass", "reason": reason})


def _cache_key(gm, example_inputs) -> str | None:
    try:
        return fx_graph_cache.cache_key(gm, example_inputs)
    except BypassCache as e:
        _bypass(str(e))
    except Exception as e:  # describing the graph must never break compiling it
        _bypass(f"{type(e).__name__}: {e}")
    return None


def _saver(key: str, device, source: str, generator, globals_: dict):
    """``on_bound`` of a cache miss: store the graph once its kernels are built; None
    (and a counted bypass) when the wrapper refers to something that is not plain data."""
    try:
        described, blobs = fx_graph_cache.describe_globals(globals_)
    except BypassCache as e:
        _bypass(str(e))
        return None
    counters["inductor"]["fxgraph_cache_miss"] += 1
    if trace.enabled:
        trace.emit("cache", {"stage": "fx_graph", "event": "miss", "key": key, "reason": "not in the cache"})
    once = threading.Lock()
    done = []

    def save(pending):
        """Idempotent: run by the build's done callback and again at binding, so an
        entry is complete before the graph's first call returns."""
        with once:
            if not done:
                done.append(True)
                try:
                    _save(pending)
                finally:
                    fx_graph_cache.settled(key)

    def _save(pending):
        try:
            pending.result()
        except Exception:  # a failed build is not cached (the graph falls back to eager)
            return
        try:
            artifacts = getattr(pending, "cache_artifacts", None) or getattr(generator, "cache_artifacts", None)
            parts = artifacts() if artifacts is not None else ({}, {})
            fx_graph_cache.save(key, device, source, generator.source(), described, blobs, parts)
        except Exception as e:  # saving is best effort
            counters["cache"]["save_error"] += 1
            cache_log.warning("torchkiln FX graph cache: could not save %s (%s: %s)", key, type(e).__name__, e)

    return save


def _fall_back(gm, error: Exception):
    """``gm`` run eagerly (its ATen ops), with one warning per distinct error naming the
    graph's ops and the error (for a failed C++ or Triton build, the compiler's message)."""
    metrics.eager_fallbacks += 1
    text = f"{type(error).__name__}: {error}"
    key = text[:200]
    if key not in _warned:
        _warned.add(key)
        ops = sorted({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        named = ", ".join(ops[:12]) + (f" and {len(ops) - 12} more" if len(ops) > 12 else "")
        warnings.warn(f"torchkiln codegen fell back to eager for a graph (ops: {named or 'none'}): "
                      f"{text[:1500]}")
    return _eager(gm)


def _eager(gm):
    def run(*args):
        out = gm(*args)
        return out if isinstance(out, (tuple, list)) else (out,)

    return run


def _compile(gm, example_inputs, key: str | None = None) -> CompiledGraph:
    # lowering, scheduling and wrapper codegen are imported by the first compile, not by
    # ``import``: a warm process loads its graphs from the caches without them (sympy, ~1 s)
    from .graph import GraphLowering
    from .nodes import Buffer, ExternKernel
    from .scheduler import Scheduler, finalize
    from .trace_records import trace_graph
    from .wrapper import WrapperCodegen

    with trace.stage("codegen.lowering"):
        graph = GraphLowering(gm, example_inputs).run()
    with graph, trace.stage("codegen.scheduling"):  # inner functions run again while scheduling
        scheduler = Scheduler(graph).run()
        device = _device_of(graph)
        needed = _needed_outside_kernels(graph, scheduler.entries)
        entries = finalize(scheduler.entries, set(needed), graph, device)
        kernel_device = _kernel_device(graph, [e for e in entries if not isinstance(e, Buffer)], device)
        if kernel_device.type != device.type:
            device = kernel_device
            entries = finalize(scheduler.entries, set(needed), graph, device)
    kernels = [e for e in entries if not isinstance(e, Buffer)]
    generator = get_generator(device)
    generator.plan_launches(entries)
    with trace.stage("codegen.kernels"):
        pending = _start_compile(generator, kernels)
    progress.add_kernels(len(kernels), pending.done)
    with trace.stage("codegen.wrapper"):
        source, globals_ = WrapperCodegen(graph, entries, generator, {}).generate()
    if trace.enabled:
        trace_graph(graph, entries, kernels, generator, source)
    code = compile(source, f"<torchkiln wrapper {id(gm):x}>", "exec")
    metrics.generated_kernel_count += len(kernels)
    metrics.extern_kernel_count += sum(1 for e in entries if isinstance(e, ExternKernel))
    kernel_source = generator.source()
    if output_code_log.isEnabledFor(10):
        output_code_log.debug("wrapper:\n%s\nkernels:\n%s", source, kernel_source)
    save = _saver(key, device, source, generator, globals_) if key is not None else None
    if save is not None and hasattr(pending, "add_done_callback"):
        # saved as soon as the build finishes, even if the graph is never called
        # (a backward compiled with its forward is not called until .backward())
        pending.add_done_callback(lambda *_: save(pending))
    compiled = CompiledGraph(gm, code, globals_, pending, source, kernel_source, kernels,
                             _launch_errors(graph, generator), cache_key=key if save is not None else None,
                             on_bound=save)
    if save is not None:
        fx_graph_cache.remember(key, compiled)
    return compiled


def _launch_errors(graph, generator) -> tuple:
    """The generator's launch-time compile errors that may fall back to eager: none when
    a kernel writes a graph input (a partial run could not be undone, so it raises)."""
    from .nodes import InputBuffer, MutationBuffer

    writes_input = any(isinstance(b, MutationBuffer) and isinstance(b.target, InputBuffer)
                       for b in graph.buffers.values())
    return () if writes_input else generator.launch_errors


def _start_compile(generator, kernels):
    """The generator's pending kernel objects (``done()``/``result()``): its
    ``start_compile`` when it builds asynchronously, else compiled now."""
    start = getattr(generator, "start_compile", None)
    if start is not None:
        return start(kernels)
    done = concurrent.futures.Future()
    done.set_result(generator.compile_kernels(kernels))
    return done


def _frozen_compiler(gm, example_inputs):
    """With ``config.freezing`` and grad mode off: a compiler for the inference graph
    that binds the module's state as constants (codegen/freezing.py); else None."""
    if not config.freezing or torch.is_grad_enabled():
        return None
    from . import freezing

    state = [*dict(gm.named_parameters(remove_duplicate=False)).values(),
             *dict(gm.named_buffers(remove_duplicate=False)).values()]
    constants = dict(enumerate(state))
    for i in freezing.frozen_flat_inputs(gm, example_inputs):
        constants[len(state) + i] = example_inputs[i]
    if not constants:
        return None

    def compile_frozen(aten_gm, example_vals):
        frozen = freezing.freeze(aten_gm, constants)
        if frozen is None:
            return compile_fx_inner(aten_gm, example_vals)
        with config.patch(fx_graph_cache=False):  # the constants are not in the key
            return compile_fx_inner(frozen, example_vals)

    return compile_frozen


def compile_fx(gm: torch.fx.GraphModule, example_inputs, mode: str | None = None, options: dict | None = None):
    """The "inductor" backend: AOT autograd + ``compile_fx_inner`` for forward and backward.

    Takes a torch-level graph from capture and its real example inputs; returns a
    callable with the same signature as ``gm``.  Falls back to ``gm.forward`` with a
    warning if AOT autograd itself fails.  ``mode``: None/"default"; "reduce-overhead"
    records the compiled graphs into CUDA graphs (:mod:`.cudagraphs`); "max-autotune"
    and "max-autotune-no-cudagraphs" compile as the default for now (as do ``options``,
    which are accepted and ignored but for ``triton.cudagraphs``).  Raises ValueError for
    another mode, as torch.compile does.
    """
    from ..aot import aot_module_simplified
    from .decompositions import decompositions

    if mode not in (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        raise ValueError(f"Unknown mode {mode!r}; expected default, reduce-overhead, max-autotune or "
                         "max-autotune-no-cudagraphs")
    cudagraphs = mode in ("reduce-overhead", "max-autotune") if not options or "triton.cudagraphs" not in options \
        else bool(options["triton.cudagraphs"])
    _warm_compile_pool(example_inputs)
    try:
        frozen = _frozen_compiler(gm, example_inputs)
        compilers = {"fw_compiler": compile_fx_inner, "bw_compiler": compile_fx_inner, "inference_compiler": frozen}
        if cudagraphs:
            from .cudagraphs import CUDAGraphCompiler

            compilers = {"fw_compiler": CUDAGraphCompiler(compile_fx_inner, training=True),
                         "bw_compiler": CUDAGraphCompiler(compile_fx_inner, training=True),
                         "inference_compiler": CUDAGraphCompiler(frozen or compile_fx_inner, training=False)}
        # input mutations that need no grad (batch-norm running statistics) are stores of
        # the compiled graphs, not copies after them (as torch.compile's inductor backend)
        compiled = aot_module_simplified(gm, example_inputs, decompositions=decompositions(),
                                         keep_inference_input_mutations=True, **compilers)
        if (frozen is not None or cudagraphs) and hasattr(compiled, "aot_cache_key"):  # frame_cache.load rebuilds the default compilers only
            compiled.aot_cache_key = None
        return compiled
    except Exception as e:
        if config.debug or strict():
            raise
        warnings.warn(f"torchkiln inductor backend fell back to eager: {type(e).__name__}: {e}")
        return gm.forward


def _warm_compile_pool(example_inputs) -> None:
    """Start the Triton compile workers when the graph runs on a GPU, before AOT autograd
    and lowering (their imports overlap ours; TorchInductor's backend does the same)."""
    if any(isinstance(x, torch.Tensor) and x.is_cuda for x in example_inputs):
        _start_compile_pool()


def warm() -> None:
    """Capture calls this when it starts capturing a frame for this backend (not when a
    frame record of a warm start is installed): in a process that already uses CUDA the
    compile workers start then, so they are ready by the time capture hands over the
    first graph (capture of a 6-layer GPT takes seconds)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        _start_compile_pool()


def _start_compile_pool() -> None:
    import importlib.util
    import os

    if os.environ.get("TRITON_INTERPRET") == "1":
        return
    if importlib.util.find_spec("triton") is not None:
        from .triton import compile_pool  # stdlib only: the workers start before sympy & co. import

        compile_pool.use_triton_cache_dir()  # the workers inherit it
        compile_pool.warm()


class _FrameCacheProtocol:
    """``compile_fx.frame_cache``: how capture's warm start (capture/warm_start.py) keys
    and reloads what this backend compiled, without the captured graph (the protocol
    is described in ``torchkiln/cache/__init__.py``)."""

    @staticmethod
    def enabled() -> bool:
        from ..aot import config as aot_config

        return bool(config.fx_graph_cache and aot_config.enable_autograd_cache and not config.freezing)

    @staticmethod
    def key_parts() -> dict:
        from ..aot import config as aot_config
        from ..cache import keys

        return {"backend": "inductor", "codegen_config": keys.config_description(config),
                "aot_config": keys.config_description(aot_config)}

    @staticmethod
    def load(aot_key: str):
        from ..aot.api import load_compiled

        return load_compiled(aot_key, fw_compiler=compile_fx_inner, bw_compiler=compile_fx_inner)


compile_fx.frame_cache = _FrameCacheProtocol()
compile_fx.warm = warm
