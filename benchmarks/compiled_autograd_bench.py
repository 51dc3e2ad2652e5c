"""Compiled autograd: training-step time, eager vs torchkiln without / with compiled
autograd vs torch.compile without / with its compiled autograd, and the per-backward overhead of
the engine's cache lookup.

    python benchmarks/compiled_autograd_bench.py [--models hooked_mlp,mlp,cnn,nanogpt] [--repeat 30]

``hooked_mlp`` is the suite's MLP with a gradient-clipping hook on every parameter
(``p.register_hook(lambda g: g.clamp(-1e-3, 1e-3))``); ``hooked_small`` 8 Linear(64)
layers (16 hooked parameters, batch 16), where the per-step Python work of eager's
hooks and engine matters: eager runs one Python hook per parameter per step; compiled
autograd has them inlined into the compiled backward graph.  ``hooked_wide``: the same
with Linear(256), batch 64, where the GEMMs are ~70% of the step.  ``hooked_gpt``: a
small GPT-2-style model (token and position embeddings, 2 pre-LayerNorm blocks of causal
self-attention and a GELU MLP, tied LM head; n_embd 64, 2 heads, batch 4 x 32 tokens,
cross-entropy loss), the same clipping hook on each of its 28 parameters.

torch's and torchkiln's compiled autograd share the C++ engine, which binds its backward
formulas to whichever compiler object asks first in a process, so the two run in separate
worker processes; each worker times its own eager steps interleaved with its compiled
ones (1 thread), and the table reports ratios to that eager (speedup = eager ms / ms).
Times are the calling thread's CPU time (``time.thread_time``; one intra-op thread, so
all compute is on it): wall time on the shared machine swung 3x between runs with load.
Lookup overhead: a 2-layer Linear(8) model's backward with compiled autograd whose
compiler_fn returns the graph as is, minus the eager engine's backward, per call.

``--gemm-floor``: eager's step against the ATen GEMM calls of that step replayed alone
(the same shapes and strides; then also with one in-place pass of the clipping hook over
every gradient): the time any compiler calling the same BLAS pays per step, so
``eager / GEMMs`` bounds the speedup over eager (below 1.3 on a row: its 1.3x target is
out of reach there).

``--instructions``: instead of times, instructions retired per step (eager / torchkiln /
torchkiln + CA, valgrind's callgrind; needs ``valgrind`` and its headers): deterministic,
so a change of a few percent shows on a loaded machine where times swing 2x.
``--instructions --parts`` adds where the torchkiln + CA step's instructions go (K per
step): zero_grad, forward (compiled forward and loss), backward (``loss.backward()``:
the engine's key walk and lifting, then ca_call), ca_call (``CompiledBackward``),
ca_run (the compiled graph: capture's guard and the generated code), ca_accumulate
(the ``.grad`` stores).  Under
valgrind (no AVX-512) ATen runs its AVX2 kernels and the generated C++ is built without
``-march=native``: compare instruction counts with each other, not with times.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch


# hidden size, batch: hooked_small is per-step Python work (engine, hooks, wrappers); at
# hooked_wide its 24 GEMMs are ~70% of eager's step (2.2 of 3.1 ms, thread time)
_STACKS = {"hooked_small": (64, 16), "hooked_wide": (256, 64)}


def build(name: str):
    from torchkiln.bench.models import Workload, build as build_model

    if name in _STACKS:  # 8 x (Linear(hidden), ReLU): 16 parameters, each hooked
        hidden, batch = _STACKS[name]
        torch.manual_seed(0)
        layers = []
        for _ in range(8):
            layers += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
        x, target = torch.randn(batch, hidden), torch.randn(batch, hidden)
        work = Workload(torch.nn.Sequential(*layers), (x,), {}, lambda out: torch.nn.functional.mse_loss(out, target))
    elif name == "hooked_gpt":  # GPT-2-style: embeddings, 2 blocks (LayerNorm, attention, GELU MLP), tied head
        from torchkiln.bench.models.gpt import GPT, GPTConfig

        torch.manual_seed(0)
        config = GPTConfig(block_size=32, vocab_size=256, n_layer=2, n_head=2, n_embd=64)
        tokens, target = torch.randint(0, 256, (4, 32)), torch.randint(0, 256, (4, 32))
        work = Workload(GPT(config), (tokens,), {},
                        lambda out: torch.nn.functional.cross_entropy(out.flatten(0, 1), target.flatten()))
    else:
        work = build_model("mlp" if name == "hooked_mlp" else name, "cpu")
    if name.startswith("hooked"):
        for p in work.model.parameters():
            p.register_hook(lambda g: g.clamp(-1e-3, 1e-3))
    return work


def step_fn(work, model, call, ctx):
    def step():
        model.zero_grad(set_to_none=True)
        loss = work.loss_fn(call(*work.args, **work.kwargs))
        with ctx():
            loss.backward()
    return step


def interleaved(steps: dict, warmup: int, repeat: int) -> dict:
    for fn in steps.values():
        for _ in range(warmup):
            fn()
    samples = {k: [] for k in steps}
    for _ in range(repeat):
        for k, fn in steps.items():
            t = time.thread_time()
            fn()
            samples[k].append(time.thread_time() - t)
    return {k: 1e3 * statistics.median(v) for k, v in samples.items()}


def worker(kind: str, name: str, warmup: int, repeat: int) -> dict:
    import contextlib
    import functools

    torch.set_num_threads(1)
    work = build(name)  # each variant builds its own copy (same seed, same weights, own hooks)
    variants = {"eager": step_fn(work, work.model, work.model, contextlib.nullcontext)}
    if kind == "kiln":
        import torchkiln

        w1 = build(name)
        variants["kiln"] = step_fn(w1, w1.model, torchkiln.compile(w1.model), contextlib.nullcontext)
        w2 = build(name)
        ca = functools.partial(torchkiln.compiled_autograd.enable,
                               torchkiln.compiled_autograd.compiler_fn_for_backend("inductor"))
        variants["kiln_ca"] = step_fn(w2, w2.model, torchkiln.compile(w2.model), ca)
    else:
        w0 = build(name)
        variants["torch"] = step_fn(w0, w0.model, torch.compile(w0.model), contextlib.nullcontext)
        w = build(name)
        ca = functools.partial(torch._dynamo.compiled_autograd._enable,
                               lambda gm: torch.compile(gm, backend="inductor"))
        variants["torch_ca"] = step_fn(w, w.model, torch.compile(w.model), ca)
    return interleaved(variants, warmup, repeat)


def lookup_overhead(kind: str, repeat: int) -> float:
    """µs per backward that compiled autograd adds to the eager engine (graph run as is)."""
    import contextlib
    import functools

    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    x = torch.randn(4, 8)
    if kind == "kiln":
        import torchkiln

        ca = functools.partial(torchkiln.compiled_autograd.enable, lambda gm: gm)
    else:
        ca = functools.partial(torch._dynamo.compiled_autograd._enable, lambda gm: gm)
    def make(ctx):
        def step():
            loss = model(x).sum()
            with ctx():
                loss.backward()
        return step

    steps = {"eager": make(contextlib.nullcontext), "ca": make(ca)}
    ms = interleaved(steps, 20, repeat * 20)
    return 1e3 * (ms["ca"] - ms["eager"])


_GEMMS = ("mm", "addmm", "bmm", "baddbmm", "linear", "matmul", "_linear_pointwise")


def gemm_floor(name: str, repeat: int) -> dict:
    """Eager's training step vs the GEMMs of that step alone (1 thread, thread time).

    The ATen GEMM calls of one eager step (``mm``/``addmm``/``bmm``/``baddbmm``, with
    their operands' sizes and strides, recorded by a ``TorchDispatchMode``) are replayed
    on their own, interleaved with eager steps: their time is a floor that a compiler
    calling the same BLAS must pay on every step; the best speedup over eager any such
    compiler reaches is ``eager / floor``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.set_num_threads(1)
    work = build(name)
    calls = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__ in _GEMMS:  # a clone keeps a dense operand's strides
                calls.append((func, [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args],
                              dict(kwargs or {})))
            return out

    import contextlib
    step = step_fn(work, work.model, work.model, contextlib.nullcontext)
    step()
    with Record():
        step()

    grads = [p.grad.clone() for p in work.model.parameters()]

    def gemms():
        for func, args, kwargs in calls:
            func(*args, **kwargs)

    def gemms_and_hooks():  # + one pass of the clipping hook over every gradient, in place
        gemms()
        for g in grads:
            g.clamp_(-1e-3, 1e-3)

    ms = interleaved({"eager": step, "gemms": gemms, "gemms_hooks": gemms_and_hooks}, 3, repeat)
    return {**ms, "count": len(calls)}


_CALLGRIND_HELPER = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(const char* name) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(name); }
void cg_on(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_off(void) { CALLGRIND_STOP_INSTRUMENTATION; }
"""

# --instructions --parts: the torchkiln + CA step's regions, each counted alone over the
# same steps (instrumentation on only inside it): label -> (owner, attribute) patched
_PARTS = {"backward": None,  # loss.backward(): the engine's key walk and lifting + ca_call
          "ca_call": ("runtime.CompiledBackward", "__call__"),  # the wrapper the engine calls
          "ca_run": ("runtime.CompiledBackward", "_run"),  # the compiled graph: its guard + generated code
          "ca_accumulate": ("runtime.CompiledBackward", "_accumulate")}  # the .grad stores


def _parts(cg, w, compiled, ca, steps: int) -> None:
    """One dump per region of ``_PARTS`` plus ``forward`` (the compiled forward and the loss)
    and ``zero_grad``, named ``part:<label>``."""
    from torchkiln.compiled_autograd import runtime

    on = [None]

    def region(label, fn):
        def counted(*args, **kwargs):
            if on[0] != label:
                return fn(*args, **kwargs)
            cg.cg_on()
            try:
                return fn(*args, **kwargs)
            finally:
                cg.cg_off()
        return counted

    for label, where in _PARTS.items():
        if where is not None:
            owner = runtime.CompiledBackward
            setattr(owner, where[1], region(label, getattr(owner, where[1])))
    zero = region("zero_grad", lambda: w.model.zero_grad(set_to_none=True))
    forward = region("forward", lambda: w.loss_fn(compiled(*w.args, **w.kwargs)))

    def run_backward(loss):
        with ca():
            loss.backward()

    backward = region("backward", run_backward)
    for label in ("zero_grad", "forward", *_PARTS):
        on[0] = label
        cg.cg_start()
        cg.cg_off()
        for _ in range(steps):
            zero()
            backward(forward())
        cg.cg_stop(f"part:{label}".encode())


def instructions_worker(name: str, steps: int, helper: str, parts: bool = False) -> None:
    """Runs under callgrind: each variant's ``steps`` steps between the helper's
    start/stop client requests (one dump per variant); ``parts``: then the regions of the
    torchkiln + CA step (:func:`_parts`)."""
    import contextlib
    import ctypes
    import functools

    import torchkiln
    import torchkiln.codegen

    torchkiln.codegen.config.cpp_march_native = False  # valgrind has no AVX-512
    torch.set_num_threads(1)
    cg = ctypes.CDLL(helper)
    cg.cg_stop.argtypes = [ctypes.c_char_p]
    w0, w1, w2 = build(name), build(name), build(name)
    ca = functools.partial(torchkiln.compiled_autograd.enable,
                           torchkiln.compiled_autograd.compiler_fn_for_backend("inductor"))
    variants = {"eager": step_fn(w0, w0.model, w0.model, contextlib.nullcontext),
                "kiln": step_fn(w1, w1.model, torchkiln.compile(w1.model), contextlib.nullcontext),
                "kiln_ca": step_fn(w2, w2.model, compiled := torchkiln.compile(w2.model), ca)}
    for fn in variants.values():
        for _ in range(3):
            fn()
    for label, fn in variants.items():
        cg.cg_start()
        for _ in range(steps):
            fn()
        cg.cg_stop(label.encode())
    if parts:
        _parts(cg, w2, compiled, ca, steps)


def instructions(names: list[str], steps: int, parts: bool = False) -> None:
    """Instructions per step under callgrind, per model (see the module docstring);
    ``parts``: then where the torchkiln + CA step's go (K per step, :func:`_parts`)."""
    out = tempfile.mkdtemp(prefix="ca_bench_cg_")
    try:
        helper = os.path.join(out, "cg.so")
        src = os.path.join(out, "cg.c")
        with open(src, "w") as f:
            f.write(_CALLGRIND_HELPER)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", src, "-o", helper], check=True)
        print(f"{'model':12} {'eager Mi':>9} {'kiln Mi':>8} {'kiln+CA Mi':>10}   (instructions per step; speedup vs eager)")
        for name in names:
            env = dict(os.environ, TORCHKILN_CACHE_DIR=os.path.join(out, f"cache_{name}"), OMP_NUM_THREADS="1",
                       ATEN_CPU_CAPABILITY="avx2", MKL_ENABLE_INSTRUCTIONS="AVX2")
            prefix = os.path.join(out, f"cg_{name}")
            subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={prefix}.%p",
                            sys.executable, __file__, "--instructions-worker", name, str(steps), helper,
                            *(["--parts"] if parts else [])],
                           env=env, capture_output=True, check=True)
            totals = {}
            for fname in os.listdir(out):
                if not fname.startswith(f"cg_{name}.") or fname.count(".") < 2:
                    continue
                label = total = None
                with open(os.path.join(out, fname)) as f:
                    for line in f:
                        if line.startswith("desc: Trigger: Client Request: "):
                            label = line.split(": ")[-1].strip()
                        elif line.startswith("totals:"):
                            total = int(line.split()[1])
                if label and total:
                    totals[label] = total / steps / 1e6
            e, k, c = totals["eager"], totals["kiln"], totals["kiln_ca"]
            print(f"{name:12} {e:9.3f} {k:8.3f} {c:10.3f}   (kiln {e / k:.2f}x, kiln+CA {e / c:.2f}x)")
            if parts:
                print("    kiln+CA K/step: " + ", ".join(f"{label[5:]} {1e3 * v:.0f}" for label, v in totals.items()
                                                        if label.startswith("part:")))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="hooked_small,hooked_wide,hooked_mlp,hooked_gpt,mlp,cnn,nanogpt")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--worker", nargs=2, metavar=("KIND", "MODEL"))
    ap.add_argument("--instructions", action="store_true", help="instructions per step under callgrind")
    ap.add_argument("--gemm-floor", action="store_true",
                    help="eager's step vs its GEMM calls alone: the best speedup a compiler calling the same BLAS reaches")
    ap.add_argument("--parts", action="store_true",
                    help="with --instructions: also the torchkiln + CA step's regions (zero_grad, forward, backward, "
                         "ca_call = CompiledBackward, ca_run = its graph with the guard, ca_accumulate)")
    ap.add_argument("--instructions-worker", nargs=3, metavar=("MODEL", "STEPS", "HELPER"))
    args = ap.parse_args()
    if args.gemm_floor:
        print(f"{'model':12} {'eager ms':>9} {'GEMMs ms':>9} {'GEMMs/eager':>12} {'max speedup':>12} "
              f"{'+hooks ms':>10} {'max speedup':>12}   (1 thread)")
        for name in args.models.split(","):
            r = gemm_floor(name, args.repeat)
            print(f"{name:12} {r['eager']:9.2f} {r['gemms']:9.2f} {r['gemms'] / r['eager']:12.2f} "
                  f"{r['eager'] / r['gemms']:11.2f}x {r['gemms_hooks']:10.2f} {r['eager'] / r['gemms_hooks']:11.2f}x"
                  f"   ({r['count']} GEMM calls per step)")
        return
    if args.instructions_worker:
        name, steps, helper = args.instructions_worker
        instructions_worker(name, int(steps), helper, args.parts)
        return
    if args.instructions:  # ~50x slower than native: the default is hooked_small (~2 min on a quiet machine)
        default = ap.get_default("models")
        instructions(["hooked_small"] if args.models == default else args.models.split(","), 10, args.parts)
        return
    if args.worker:
        kind, name = args.worker
        out = {"lookup_us": lookup_overhead(kind, args.repeat)} if name == "_lookup" else \
            worker(kind, name, args.warmup, args.repeat)
        print("RESULT " + json.dumps(out))
        return

    def run(kind, name):
        # A fresh cache directory per worker: every run measures the same thing (cold compiles).
        env = dict(os.environ, TORCHKILN_CACHE_DIR=tempfile.mkdtemp(prefix="ca_bench_"))
        proc = subprocess.run([sys.executable, __file__, "--worker", kind, name, "--repeat", str(args.repeat),
                               "--warmup", str(args.warmup)], capture_output=True, text=True, env=env)
        shutil.rmtree(env["TORCHKILN_CACHE_DIR"], ignore_errors=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            raise RuntimeError(f"{kind} {name}: {proc.stderr.strip().splitlines()[-1:]}")
        return json.loads(lines[-1][7:])

    print(f"{'model':12} {'eager ms':>9} {'kiln':>7} {'kiln+CA':>8} {'torch':>7} {'torch+CA':>9}   (speedup vs eager)")
    for name in args.models.split(","):
        try:
            k, t = run("kiln", name), run("torch", name)
        except RuntimeError as e:
            print(f"{name:12} error: {e}")
            continue
        print(f"{name:12} {k['eager']:9.2f} {k['eager'] / k['kiln']:6.2f}x {k['eager'] / k['kiln_ca']:7.2f}x "
              f"{t['eager'] / t['torch']:6.2f}x {t['eager'] / t['torch_ca']:8.2f}x   "
              f"(torch worker's eager {t['eager']:.2f} ms)")
    k, t = run("kiln", "_lookup"), run("torch", "_lookup")
    print(f"per-backward overhead over the eager engine (graph run uncompiled): torchkiln {k['lookup_us']:.0f} us, "
          f"torch {t['lookup_us']:.0f} us")


if __name__ == "__main__":
    main()
