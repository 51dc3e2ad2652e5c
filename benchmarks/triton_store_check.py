"""GPU check: a warm start compiles no Triton kernel (binaries come from torchkiln's store).

    python3 benchmarks/triton_store_check.py [--models mlp,nanogpt,gpt2_block] [--mode training]

Per model: a *cold* process (empty ``TORCHKILN_CACHE_DIR`` and ``TRITON_CACHE_DIR``)
and a *warm* one (the same ``TORCHKILN_CACHE_DIR``, a NEW empty ``TRITON_CACHE_DIR``:
the binaries can only come from torchkiln's store).  Each runs the first step on CUDA
and reports the Triton compiles it made (``triton.knobs.compilation.listener`` where
the Triton has it: every compile, ours or not; and torchkiln's store counters), the
first step's seconds and the largest difference from eager.  Exit status 1 when a warm
process compiled a kernel or a result differs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def child(model: str, mode: str) -> None:
    import torch

    compiled = {"n": 0, "hits": 0}
    try:
        from triton import knobs

        def listener(*, cache_hit, **_):
            compiled["hits" if cache_hit else "n"] += 1

        knobs.compilation.listener = listener
        listen = True
    except (ImportError, AttributeError):
        listen = False
    import torchkiln
    from torchkiln.bench.models import build
    from torchkiln.bench.run import _Step

    torch.manual_seed(0)
    work = build(model, "cuda")
    import copy

    eager_model = copy.deepcopy(work.model)
    step = _Step(work.model, torchkiln.compile(work.model), work, mode, "cuda")
    t0 = time.perf_counter()
    out = step.first()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    ref = _Step(eager_model, eager_model, work, mode, "cuda").first()
    err = max(float((a.float() - b.float()).abs().max()) if a.numel() else 0.0
              for a, b in zip(torch.utils._pytree.tree_leaves(ref), torch.utils._pytree.tree_leaves(out))
              if isinstance(a, torch.Tensor))
    ind = torchkiln.counters["inductor"]
    print(json.dumps({"first_step_s": seconds, "max_abs_err": err,
                      "triton_compiles": compiled["n"] if listen else None, "triton_loaded": compiled["hits"],
                      "triton_cache_hit": ind["triton_cache_hit"], "triton_cache_miss": ind["triton_cache_miss"],
                      "triton_cache_saved": ind["triton_cache_saved"], "fxgraph_cache_hit": ind["fxgraph_cache_hit"]}))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="mlp,nanogpt,gpt2_block")
    parser.add_argument("--mode", default="training")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.mode)
        return 0
    ok = True
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory() as kiln:
            for phase in ("cold", "warm"):
                with tempfile.TemporaryDirectory() as triton_dir:
                    env = dict(os.environ, TORCHKILN_CACHE_DIR=kiln, TRITON_CACHE_DIR=triton_dir)
                    env.pop("TRITON_CACHE_MANAGER", None)
                    t0 = time.time()
                    proc = subprocess.run([sys.executable, __file__, "--child", model, "--mode", args.mode], env=env,
                                          capture_output=True, text=True, timeout=900)
                    wall = time.time() - t0
                    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
                    if proc.returncode or not lines:
                        print(f"{model} {phase}: FAILED rc={proc.returncode}: {proc.stderr.strip()[-2000:]}")
                        ok = False
                        break
                    row = json.loads(lines[-1])
                    print(f"{model:12s} {phase}: process {wall:6.2f} s, first step {row['first_step_s']:6.2f} s, "
                          f"triton compiles {row['triton_compiles']}, loaded {row['triton_loaded']}, "
                          f"store hit/miss/saved {row['triton_cache_hit']}/{row['triton_cache_miss']}/"
                          f"{row['triton_cache_saved']}, max abs err {row['max_abs_err']:.3g}")
                    if row["max_abs_err"] > 1e-2:
                        ok = False
                    if phase == "warm" and (row["triton_cache_miss"] or row["triton_cache_saved"]
                                            or row["triton_compiles"]):
                        ok = False
    print("OK: no Triton compile on a warm start" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
