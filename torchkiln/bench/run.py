"""Measure one model in one mode, in the current process.

``measure_model(name, mode, options, phase)`` builds the model (seed 0), keeps a
pristine copy, and gives each variant -- eager, torchkiln, and with ``options.peer``
``torch.compile`` (inductor) -- its own deep copy, so every variant starts from
identical weights.  For each compiled variant the first call (inference: a
``no_grad`` forward; training: forward, loss and backward) is timed as the compile
time, and its result -- outputs, or the loss and every parameter's gradient -- is
compared with eager's (:mod:`.correctness`).  Then:

* ``phase="cold"``: ``warmup`` untimed and ``repeat`` timed steps per variant, the
  variants' steps interleaved, give the steady-state times (on CPU the minimum of the
  steps' times, CPU time of the calling thread at one thread; on a GPU the median of
  wall times: :func:`.measure.cpu_clock`);
* ``phase="warm"`` (a new process with the caches the cold one left): a few steps of
  one variant at a time give its peak memory (:mod:`.measure`).  With ``only`` (the
  suite's per-variant warm process) that variant's first call runs *before* eager's,
  and ``warm_start_s`` is the wall time from the process's spawn (``spawn_time``, set
  by the parent) to the end of that first step: interpreter start, imports, building
  the model, compile and the step -- what a user restarting a job waits for.

Training steps include ``zero_grad`` and an ``AdamW`` step, which run eagerly in every
variant.  Failures never escape: a variant that raises gets ``status="error"`` with
the exception's first line, and the other variants go on.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import statistics
import time
import traceback
import warnings
from typing import Any, Callable

import torch

from . import correctness, measure
from .models import Workload, build


@dataclasses.dataclass
class Options:
    backend: str = "inductor"
    device: str = "cpu"
    repeat: int = 20
    warmup: int = 3
    peer: bool = False
    threads: int = 1
    tol: float = 1e-4
    compiled_autograd: bool = False  # the torchkiln variant's training backward through compiled autograd
    profile: bool = False  # after timing, a per-variant breakdown of a step (bench/profile.py)
    compile_mode: str | None = None  # torchkiln's and the peer's ``mode`` (e.g. "reduce-overhead")


def torchkiln_compiler(backend: str, mode: str | None = None) -> Callable[[torch.nn.Module], Callable]:
    def compile_model(model):
        import torchkiln

        return torchkiln.compile(model, backend=backend, **({"mode": mode} if mode else {}))

    return compile_model


def backward_context(peer: bool, opts: Options) -> Callable:
    """What each training backward runs inside: with ``--compiled-autograd``, torchkiln's
    compiled autograd with the torchkiln variant's backend.  The peer keeps the eager
    engine: torch's compiled autograd cannot share a process with torchkiln's (the C++
    engine binds its formulas to the first compiler object; benchmarks/compiled_autograd_bench.py
    runs them in separate processes)."""
    if not opts.compiled_autograd or peer:
        return contextlib.nullcontext
    import torchkiln

    return functools.partial(torchkiln.compiled_autograd.enable,
                             torchkiln.compiled_autograd.compiler_fn_for_backend(opts.backend))


def peer_compiler(mode: str | None = None) -> Callable[[torch.nn.Module], Callable]:
    """``torch.compile`` with its default backend (inductor) and ``mode``: the peer."""
    return lambda model: torch.compile(model, backend="inductor", **({"mode": mode} if mode else {}))


def preload(backend: str, peer: bool) -> None:
    """Import the compilers' modules before anything is timed, so that compile times
    do not include one-time imports; a backend that fails to import fails later,
    in its own variant."""
    try:
        from torchkiln.backends import lookup_backend

        lookup_backend(backend)
        # what the first capture imports (as the peer's torch._dynamo below): the
        # bytecode interpreter and ShapeEnv's lazily imported validator, which imports
        # torch._dynamo (2-4 s that a cold-compile time would otherwise count for one side)
        import torchkiln.capture.symbolic_convert  # noqa: F401
        import torchkiln.capture.output_graph  # noqa: F401
        import torchkiln.capture.side_effects  # noqa: F401
        import torchkiln.capture.polyfills  # noqa: F401
        import torchkiln.capture.variables.torch_fns  # noqa: F401
        import torchkiln.capture.variables.generators  # noqa: F401
        import torchkiln.aot.compilers  # noqa: F401
        import torchkiln.aot.autograd_cache  # noqa: F401
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        ShapeEnv()
    except Exception:
        pass
    if peer:
        import torch._dynamo  # noqa: F401
        import torch._inductor.compile_fx  # noqa: F401


def torchkiln_graphs() -> tuple[int, int]:
    """(graphs compiled, graph breaks) so far, from ``torchkiln.counters``."""
    from torchkiln import counters

    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def peer_graphs() -> tuple[int, int]:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


class _Step:
    """One model copy driven through inference calls or training steps."""

    def __init__(self, model: torch.nn.Module, call: Callable, work: Workload, mode: str, device: str,
                 backward_ctx: Callable = contextlib.nullcontext) -> None:
        self.model, self.call, self.work, self.mode, self.device = model, call, work, mode, device
        self.backward_ctx = backward_ctx
        if mode == "training":
            model.train()
            self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        else:
            model.eval()

    def first(self):
        """The first call; returns what is compared: outputs, or (loss, *grads)."""
        if self.mode == "inference":
            with torch.no_grad():
                return self.call(*self.work.args, **self.work.kwargs)
        self.opt.zero_grad(set_to_none=True)
        loss = self.work.loss_fn(self.call(*self.work.args, **self.work.kwargs))
        with self.backward_ctx():
            loss.backward()
        grads = [p.grad if p.grad is not None else torch.empty(0) for p in self.model.parameters()]
        return (loss.detach(), *(g.detach().clone() for g in grads))

    def finish_first(self) -> None:
        if self.mode == "training":
            self.opt.step()

    def step(self) -> None:
        if self.mode == "inference":
            with torch.no_grad():
                self.call(*self.work.args, **self.work.kwargs)
            return
        self.opt.zero_grad(set_to_none=True)
        loss = self.work.loss_fn(self.call(*self.work.args, **self.work.kwargs))
        with self.backward_ctx():
            loss.backward()
        self.opt.step()


def _to_double(value):
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.double()
    if isinstance(value, (tuple, list)):
        return type(value)(_to_double(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_double(v) for k, v in value.items()}
    return value


def _fp64_reference(pristine: torch.nn.Module, work: Workload, mode: str, device: str) -> Callable[[], Any]:
    def run():
        model = copy.deepcopy(pristine).double()
        work64 = Workload(model, _to_double(work.args), _to_double(work.kwargs), work.loss_fn)
        return _Step(model, model, work64, mode, device).first()

    return run


def _perturb(value, ulps: int, gen: torch.Generator):
    """``value`` with each floating tensor multiplied by ``1 + ulps * eps * u``, ``u``
    uniform in [-1, 1] per element (drawn from ``gen`` on the CPU)."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        u = torch.rand(value.shape, generator=gen, dtype=torch.float64) * 2 - 1
        return value * (1 + ulps * torch.finfo(value.dtype).eps * u).to(value.device, value.dtype)
    if isinstance(value, (tuple, list)):
        return type(value)(_perturb(v, ulps, gen) for v in value)
    if isinstance(value, dict):
        return {k: _perturb(v, ulps, gen) for k, v in value.items()}
    return value


def _perturbed_reference(pristine: torch.nn.Module, work: Workload, mode: str,
                         device: str) -> Callable[[int, int], Any]:
    """``run(ulps, seed)``: eager's first call with the inputs, parameters and floating
    buffers perturbed by ``ulps`` (correctness.compare's noise floor)."""
    def run(ulps: int, seed: int):
        gen = torch.Generator().manual_seed(seed)
        model = copy.deepcopy(pristine)
        with torch.no_grad():
            for t in [*model.parameters(), *model.buffers()]:
                t.copy_(_perturb(t, ulps, gen))
        noisy = Workload(model, _perturb(work.args, ulps, gen), _perturb(work.kwargs, ulps, gen), work.loss_fn)
        with torch.random.fork_rng(devices=[]):
            return _Step(model, model, noisy, mode, device).first()

    return run


def _torchkiln_warnings(caught) -> str:
    for w in caught:
        if "torchkiln" in str(w.filename) or "torchkiln" in str(w.message).lower():
            return str(w.message).strip().splitlines()[0]
    return ""


def _first_call(prefix: str, pristine, work, mode, opts: Options, compile_fn, graphs_fn, ref, references, phase,
                spawn_time: float | None = None):
    """Compile a fresh copy with ``compile_fn``, time its first call and check it.

    ``ref`` is eager's result, or a callable computing it after the first call (then
    the RNG state the compiled call started from is restored for it); ``references`` is
    (float64 reference, perturbed float32 reference), as correctness.compare takes them.  Returns ``(row
    fields, step)``; ``step`` is None when the variant failed.
    """
    row: dict[str, Any] = {}
    model = copy.deepcopy(pristine)
    try:
        graphs_before = graphs_fn()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step = _Step(model, compile_fn(model), work, mode, opts.device, backward_context(prefix == "peer_", opts))
            rng = torch.random.get_rng_state()
            out, seconds = measure.timed(step.first, opts.device)
            if spawn_time is not None:
                row[f"{prefix}warm_start_s"] = time.time() - spawn_time
                row[f"{prefix}warm_start_cpu_s"] = time.process_time()  # this process's CPU since it started
        graphs_after = graphs_fn()
        row[f"{prefix}compile_{phase}_s"] = seconds
        if callable(ref):
            torch.random.set_rng_state(rng)
            ref = ref()
        row[f"{prefix}graphs"] = graphs_after[0] - graphs_before[0]
        row[f"{prefix}graph_breaks"] = graphs_after[1] - graphs_before[1]
        if phase == "warm" and not prefix:  # frames installed from records, without capture
            from torchkiln import counters

            row["warm_start_hits"] = counters["warm_start"]["hit"]
        note = _torchkiln_warnings(caught)
        if note:
            row[f"{prefix}note"] = note
        verdict = correctness.compare(ref, out, references[0], opts.tol, references[1])
        row[f"{prefix}max_abs_err"] = verdict.max_abs_err
        if verdict.noise_ratio is not None:  # checked against float64 (see correctness.py)
            row[f"{prefix}err_vs_noise"], row[f"{prefix}noise_ulps"] = verdict.noise_ratio, verdict.ulps
        row[f"{prefix}status"] = "ok" if verdict.ok else "mismatch"
        if not verdict.ok:
            row[f"{prefix}error"] = f"{phase}: {verdict.detail}, max abs error {verdict.max_abs_err:.3g}"
        step.finish_first()
        return row, step
    except Exception as exc:  # one failing variant never stops the suite
        row[f"{prefix}status"] = "error"
        row[f"{prefix}error"] = f"{phase}: {first_line(exc)}"
        row[f"{prefix}traceback"] = traceback.format_exc(limit=-8)
        return row, None


def _time_interleaved(steps: dict[str, _Step], row: dict, opts: Options) -> None:
    """Steady-state medians; the variants' steps alternate, so drift in machine load
    (other processes on a shared machine) affects every variant alike."""
    live = dict(steps)
    samples: dict[str, list[float]] = {prefix: [] for prefix in live}

    def attempt(prefix, fn):
        try:
            return fn()
        except Exception as exc:
            row[f"{prefix}status"] = "error"
            row[f"{prefix}error"] = f"steady state: {first_line(exc)}"
            row[f"{prefix}traceback"] = traceback.format_exc(limit=-8)
            del live[prefix]

    for prefix, step in list(live.items()):
        attempt(prefix, lambda: [step.step() for _ in range(opts.warmup)])
    cpu_clock = measure.cpu_clock(opts.device, opts.threads)
    for _ in range(max(1, opts.repeat)):
        for prefix, step in list(live.items()):
            seconds = attempt(prefix, lambda: measure.timed(step.step, opts.device, cpu_clock)[1])
            if seconds is not None:
                samples[prefix].append(seconds)
    for prefix in live:
        # on CPU the fastest step (thread CPU time at one thread): what the code costs,
        # not how often the other processes of a shared machine preempted it
        pick = min if cpu_clock is not None else statistics.median
        row[f"{prefix}ms"] = 1e3 * pick(samples[prefix])
        if len(samples[prefix]) >= 2:  # the spread, to judge the noise of the machine
            q1, _, q3 = statistics.quantiles(samples[prefix], n=4)
            row[f"{prefix}ms_iqr"] = 1e3 * (q3 - q1)


def _profile(steps: dict[str, _Step], row: dict) -> None:
    """``row["profile"]``: {variant: {category: ms per step}} (bench/profile.py)."""
    from . import profile

    names = {"eager_": "eager", "": "kiln", "peer_": "peer"}
    row["profile"] = {}
    for prefix, step in steps.items():
        try:
            row["profile"][names[prefix]] = profile.breakdown(step.step)
        except Exception as exc:
            row["profile"][names[prefix]] = {"error": first_line(exc)}


def _peak_memory(prefix: str, step: _Step, row: dict, opts: Options) -> None:
    """Peak memory of a few steps of one variant, the only one alive."""
    try:
        with measure.PeakMemory(opts.device) as mem:
            for _ in range(max(2, opts.warmup)):
                step.step()
        row[f"{prefix}peak_mb"], row["mem_kind"] = mem.mb, mem.kind
    except Exception as exc:
        row[f"{prefix}status"] = "error"
        row[f"{prefix}error"] = f"memory: {first_line(exc)}"


def measure_model(name: str, mode: str, opts: Options, phase: str = "cold",
                  compile_fn: Callable | None = None, only: str | None = None,
                  spawn_time: float | None = None) -> dict:
    """One row of the table: eager, torchkiln (``compile_fn`` overrides it) and the peer.

    ``mode`` is ``"inference"`` or ``"training"``.  ``phase="cold"``: compile time of
    the first call, correctness and steady-state times (variants alive together,
    timed interleaved).  ``phase="warm"``: compile time and correctness of the first
    call, then peak memory, one variant at a time; ``only`` (``""`` torchkiln,
    ``"peer_"``) measures that variant alone, its first call first (``warm_start_s``).
    """
    row: dict[str, Any] = {"model": name, "mode": mode, "backend": opts.backend, "device": opts.device,
                           "threads": opts.threads, "status": "error"}
    variants = [("", compile_fn or torchkiln_compiler(opts.backend, opts.compile_mode), torchkiln_graphs)]
    if opts.profile:  # generated kernels timed (torchkiln's wrapper) or marked (the peer's)
        from torchkiln.codegen import config as codegen_config

        codegen_config.kernel_profile = True
        if opts.peer:
            import torch._inductor.config as peer_config

            peer_config.cpp.enable_kernel_profile = True
    if opts.peer:
        variants.append(("peer_", peer_compiler(opts.compile_mode), peer_graphs))
    if only is not None:
        return _measure_warm_start(row, name, mode, opts, [v for v in variants if v[0] == only], spawn_time)
    with measure.threads(opts.threads):
        try:
            work = build(name, opts.device)
            pristine = copy.deepcopy(work.model)
            eager = _Step(work.model, work.model, work, mode, opts.device)
            ref = eager.first()
            eager.finish_first()
        except Exception as exc:
            row["error"] = f"eager: {first_line(exc)}"
            row["traceback"] = traceback.format_exc(limit=-8)
            return row
        references = (_fp64_reference(pristine, work, mode, opts.device),
                      _perturbed_reference(pristine, work, mode, opts.device))
        preload(opts.backend, opts.peer)
        steps = {"eager_": eager}
        if phase == "warm":
            _peak_memory("eager_", eager, row, opts)
            del steps["eager_"], eager
        work.model = None
        for prefix, compile_fn_, graphs_fn in variants:
            fields, step = _first_call(prefix, pristine, work, mode, opts, compile_fn_, graphs_fn, ref, references, phase)
            row.update(fields)
            if step is not None and phase == "warm":
                _peak_memory(prefix, step, row, opts)
            elif step is not None:
                steps[prefix] = step
            del step
        if phase == "cold":
            _time_interleaved(steps, row, opts)
            if opts.profile:
                _profile(steps, row)
    for prefix in ("", "peer_"):
        if f"{prefix}ms" in row and "eager_ms" in row:
            row[f"{prefix}speedup"] = row["eager_ms"] / row[f"{prefix}ms"]
    return row


def _measure_warm_start(row: dict, name: str, mode: str, opts: Options, variants: list,
                        spawn_time: float | None) -> dict:
    """One variant in a new process: its first call before anything else (no preload,
    no eager step first), then eager's result for the check, then peak memory."""
    with measure.threads(opts.threads):
        try:
            work = build(name, opts.device)
            pristine = copy.deepcopy(work.model)
        except Exception as exc:
            row["error"] = f"eager: {first_line(exc)}"
            return row
        references = (_fp64_reference(pristine, work, mode, opts.device),
                      _perturbed_reference(pristine, work, mode, opts.device))

        def eager_ref():
            model = copy.deepcopy(pristine)
            return _Step(model, model, work, mode, opts.device).first()

        for prefix, compile_fn_, graphs_fn in variants:
            fields, step = _first_call(prefix, pristine, work, mode, opts, compile_fn_, graphs_fn, eager_ref, references,
                                       "warm", spawn_time)
            row.update(fields)
            if step is not None:
                _peak_memory(prefix, step, row, opts)
            del step
        if not variants[0][0]:  # eager's peak once, in torchkiln's process, alone
            model = copy.deepcopy(pristine)
            _peak_memory("eager_", _Step(model, model, work, mode, opts.device), row, opts)
    if variants and variants[0][0] == "peer_":
        del row["status"]  # this process did not run torchkiln: merge() keeps the cold status
    return row


def merge(cold: dict, warm: dict) -> dict:
    """One row from a cold and a warm measurement: the warm one adds warm compile
    times and peak memory, and turns an ``ok`` into its own mismatch or error."""
    row = dict(cold)
    for key, value in warm.items():
        if key.endswith(("compile_warm_s", "warm_start_s", "peak_mb")) or key in ("mem_kind", "warm_start_hits"):
            row[key] = value
    for prefix in ("", "peer_"):
        if row.get(f"{prefix}status") == "ok" and warm.get(f"{prefix}status") not in (None, "ok"):
            row[f"{prefix}status"] = warm[f"{prefix}status"]
            row[f"{prefix}error"] = warm.get(f"{prefix}error", "")
    return row
