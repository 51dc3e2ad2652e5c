"""Where a cold compile goes: one suite model's first call, torchkiln or torch.compile,
each in a fresh process with empty caches.

    python3 benchmarks/compile_profile.py MODEL MODE [kiln|peer|both]   (DEV=cpu: a smoke run)

A child process per variant (empty TORCHKILN/TORCHINDUCTOR/TRITON cache directories)
builds MODEL on the device, runs one eager step (CUDA context, cuBLAS), then times the
compiled variant's first step.  For torchkiln it prints where that time went: the trace
stages (capture, aot.*, codegen.*, build_wait: what was left of the kernels' build when
the first call needed them), the compile pool (jobs, seconds the workers spent compiling
and building Triton's C launchers, the slowest job), the kernels' bindings in the parent
(loading each binary and launcher from the cache), and the generated kernels (fused
kernels and distinct jit functions after deduplication).
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import time

DEV = os.environ.get("DEV", "cuda")


def child(name: str, mode: str, variant: str) -> dict:
    import copy

    import torch

    from torchkiln.bench.models import build
    from torchkiln.bench.run import _Step, peer_compiler, preload, torchkiln_compiler

    work = build(name, DEV)
    pristine = copy.deepcopy(work.model)
    eager = _Step(work.model, work.model, work, mode, DEV)
    eager.first()
    eager.finish_first()
    preload("inductor", variant == "peer")
    if DEV == "cuda":
        torch.cuda.synchronize()
    model = copy.deepcopy(pristine)
    compile_fn = peer_compiler(None) if variant == "peer" else torchkiln_compiler("inductor")
    t0 = time.perf_counter()
    step = _Step(model, compile_fn(model), work, mode, DEV)
    step.first()
    if DEV == "cuda":
        torch.cuda.synchronize()
    out = {"first_call_s": time.perf_counter() - t0}
    t1 = time.perf_counter()
    step.finish_first()
    step.step()
    if DEV == "cuda":
        torch.cuda.synchronize()
    out["second_step_s"] = time.perf_counter() - t1
    if variant == "kiln":
        from torchkiln.codegen import metrics
        from torchkiln.codegen.triton import compile_pool, runtime

        out["kernels"] = metrics.generated_kernel_count
        out["pool"] = dict(compile_pool.stats, workers=compile_pool.workers())
        if out["pool"]["started_at"] is not None:
            out["pool"]["started_after_s"] = out["pool"].pop("started_at") - t0
        out["binds"] = dict(runtime.bind_stats)
        import re

        jit = dups = 0
        for mod_name, mod in list(sys.modules.items()):
            if mod_name.startswith("torchkiln_triton_") and getattr(mod, "INTERPRET", True) is False:
                src = open(mod.__file__).read()
                jit += len(re.findall(r"^def kernel\w*\(", src, re.M)) - len(re.findall(r"^def kernel\w*_launch\(", src, re.M))
                dups += len(re.findall(r"^kernel\w+ = kernel\w+$", src, re.M))
        out["jit_functions"], out["aliased_jit_functions"] = jit, dups
    return out


def _stages(trace_dir: str) -> dict:
    totals: dict = collections.defaultdict(float)
    for f in os.listdir(trace_dir):
        for line in open(os.path.join(trace_dir, f)):
            rec = json.loads(line)
            if rec.get("kind") == "stage":
                totals[rec["data"]["name"]] += rec["data"]["duration_s"]
    return {k: round(v, 3) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def run(name: str, mode: str, variant: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="kiln-cold-") as tmp:
        env = dict(os.environ, TORCHKILN_CACHE_DIR=os.path.join(tmp, "kiln"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"), TRITON_CACHE_DIR=os.path.join(tmp, "triton"))
        if variant == "kiln":
            env["TORCHKILN_TRACE"] = os.path.join(tmp, "trace")
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--child", name, mode, variant], env=env,
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            return {"error": proc.stderr[-3000:]}
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        out["process_s"] = time.perf_counter() - t0
        if variant == "kiln":
            out["stages"] = _stages(os.path.join(tmp, "trace"))
        return out


def main() -> None:
    if sys.argv[1] == "--child":
        print(json.dumps(child(*sys.argv[2:5])))
        return
    name, mode = sys.argv[1], sys.argv[2]
    variants = {"both": ["kiln", "peer"]}.get(sys.argv[3] if len(sys.argv) > 3 else "both", [sys.argv[3] if len(sys.argv) > 3 else "kiln"])
    for variant in variants:
        r = run(name, mode, variant)
        if "error" in r:
            print(f"{name} {mode} {variant}: ERROR\n{r['error']}")
            continue
        print(f"{name} {mode} {variant}: first call {r['first_call_s']:.2f} s (second step {r['second_step_s'] * 1e3:.1f} ms)")
        if variant == "kiln":
            print(f"  stages: {r['stages']}")
            print(f"  pool: {r['pool']}")
            print(f"  binds: {r['binds']}; kernels {r['kernels']}, jit functions {r['jit_functions']} "
                  f"(+{r['aliased_jit_functions']} aliases)")
        print("  json: " + json.dumps(r))


if __name__ == "__main__":
    main()
