"""Where a suite model's step goes on the GPU: eager / torchkiln / torch.compile side by side.

    python3 benchmarks/gpu_profile.py MODEL MODE [OUTDIR] [compile_mode]   (DEV=cpu: a smoke run)

Builds the suite's MODEL (torchkiln.bench.models) in MODE (inference|training), compiles
a copy with each compiler, prints the first call's seconds and its largest relative
error against eager, the median of 20 interleaved steps, then profiles 5 steps per
variant (torch.profiler, CPU+CUDA): kernels per step, GPU kernel time, CPU enqueue time,
and the top 14 kernels by GPU time (``KTOP=N``: N); ``CPROF=N``: also the Python functions
the CPU time of N steps of torchkiln and of torch.compile goes to (cProfile, top 22 by own
time).  Writes OUTDIR/prof_MODEL_MODE.txt.  The H100 tables
of docs/codegen_triton.md ("Where the time goes") come from it.
"""
import copy
import os
import sys
import time
from collections import defaultdict

import torch
DEV = os.environ.get("DEV", "cuda")
if DEV == "cpu":
    torch.cuda.synchronize = lambda: None

from torchkiln.bench.models import build
from torchkiln.bench.run import _Step, peer_compiler, torchkiln_compiler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_suite import kernel_table  # noqa: E402

name, mode = sys.argv[1], sys.argv[2]
out_dir = sys.argv[3] if len(sys.argv) > 3 else "/tmp"
cmode = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "default" else None
work = build(name, DEV)
pristine = copy.deepcopy(work.model)
steps = {"eager": _Step(work.model, work.model, work, mode, DEV)}
torch.manual_seed(1)
ref0 = steps["eager"].first()
firsts = {}
for label, fn in (("kiln", torchkiln_compiler("inductor", cmode)), ("peer", peer_compiler(cmode))):
    m = copy.deepcopy(pristine)
    t = time.perf_counter()
    s = _Step(m, fn(m), work, mode, DEV)
    firsts[label] = s.first(); s.finish_first(); torch.cuda.synchronize()
    print(f"{label} first call {time.perf_counter()-t:.2f}s", flush=True)
    steps[label] = s
for s in steps.values():
    for _ in range(5):
        s.step()
torch.cuda.synchronize()
# timing: interleaved medians
times = defaultdict(list)
for _ in range(20):
    for label, s in steps.items():
        torch.cuda.synchronize(); t = time.perf_counter(); s.step(); torch.cuda.synchronize()
        times[label].append(time.perf_counter() - t)
steps["eager"].finish_first()


def _leaves(v):
    import torch.utils._pytree as pt
    if hasattr(v, "to_tuple"):
        v = v.to_tuple()
    return [t for t in pt.tree_leaves(v) if isinstance(t, torch.Tensor) and t.is_floating_point()]


lines = [f"# {name} {mode} mode={cmode}"]
for label, out in firsts.items():
    try:
        errs = [(a.float() - b.float()).abs().max().item() / (b.float().abs().max().item() + 1e-6)
                for a, b in zip(_leaves(out), _leaves(ref0)) if a.numel()]
        lines.append(f"{label} vs eager: max rel err {max(errs) if errs else float('nan'):.2e} over {len(errs)} tensors")
    except Exception as e:
        lines.append(f"{label} vs eager: compare failed {e}")
for label in steps:
    v = sorted(times[label]); lines.append(f"{label:6s} median {1e3*v[len(v)//2]:.3f} ms  min {1e3*v[0]:.3f}")
lines.append(kernel_table(steps, 5, top=int(os.environ.get("KTOP", "14"))))
if int(os.environ.get("CPROF", "0")):
    import cProfile
    import io
    import pstats

    for label in ("kiln", "peer"):
        prof = cProfile.Profile()
        torch.cuda.synchronize()
        t = time.perf_counter()
        prof.enable()
        for _ in range(int(os.environ["CPROF"])):
            steps[label].step()
        prof.disable()
        torch.cuda.synchronize()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(22)
        lines.append(f"  == cProfile {label}: {1e3 * (time.perf_counter() - t) / int(os.environ['CPROF']):.3f} ms/step (profiled)")
        lines.extend("     " + ln for ln in buf.getvalue().splitlines()[4:] if ln.strip())
text = "\n".join(lines)
print(text)
with open(os.path.join(out_dir, f"prof_{name}_{mode}{'_' + cmode if cmode else ''}.txt"), "w") as f:
    f.write(text + "\n")
