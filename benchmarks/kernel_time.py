"""Generated-kernel thread time per step: torchkiln's kernels one by one, torch.compile's in total.

    python benchmarks/kernel_time.py hf_llama training [--steps 10] [--top 15]

Builds a suite model (torchkiln.bench.models), compiles one copy with torchkiln and one
with torch.compile, runs their steps interleaved at one thread and charges each
generated-kernel launch its thread CPU time (``time.thread_time_ns`` around the call:
time other processes of a shared machine take is not counted).  torchkiln's launches
are the wrapper's ``kernel*`` globals (a launch group counts as one), the peer's the
``cpp_fused_*`` functions of its generated modules.  Prints the median kernel time per
step of each, the step times, and torchkiln's most expensive kernels; their source is
in the wrapper's output code (``TORCHKILN_LOGS=output_code``).  This is what found the
rotary-embedding kernels that GCC left scalar (docs/codegen.md, the split inner loop):
hf_llama training 2.52 ms of kernels per step vs torch.compile's 1.33.
"""
from __future__ import annotations

import argparse
import collections
import copy
import gc
import statistics
import sys
import time

import torch


def _timed(f, key, acc):
    def launch(*args):
        t = time.thread_time_ns()
        out = f(*args)
        acc[key] += time.thread_time_ns() - t
        return out
    return launch


def wrap_torchkiln_kernels(acc) -> int:
    """Times every launch of the torchkiln wrappers alive now; returns how many wrappers."""
    wrappers = [o for o in gc.get_objects() if type(o).__name__ == "function" and o.__name__ == "call"
                and "_kiln_sync_threads" in o.__globals__]
    for i, fn in enumerate(wrappers):
        for name, value in list(fn.__globals__.items()):
            if name.startswith("kernel") and callable(value):
                fn.__globals__[name] = _timed(value, f"graph{i}.{name}", acc)
    return len(wrappers)


def wrap_peer_kernels(acc) -> None:
    from torch._inductor.codecache import PyCodeCache  # the peer's generated modules (benchmark only)

    for mod in PyCodeCache.modules:
        for name in list(vars(mod)):
            if name.startswith("cpp_fused"):
                setattr(mod, name, _timed(getattr(mod, name), name, acc))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("mode", choices=["inference", "training"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--ungrouped", action="store_true",
                   help="launch every kernel alone (codegen.config.kernel_profile): times each member of a launch group")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.ungrouped:
        from torchkiln.codegen import config

        config.kernel_profile = True
    from torchkiln.bench import run as R
    from torchkiln.bench.models import build

    work = build(args.model, "cpu")
    steps = {}
    for name, compiler in (("kiln", R.torchkiln_compiler("inductor")), ("peer", R.peer_compiler())):
        model = copy.deepcopy(work.model)
        steps[name] = R._Step(model, compiler(model), work, args.mode, "cpu")
        steps[name].first()
        steps[name].finish_first()
    kiln_acc: dict = collections.defaultdict(int)
    peer_acc: dict = collections.defaultdict(int)
    graphs = wrap_torchkiln_kernels(kiln_acc)
    wrap_peer_kernels(peer_acc)
    for step in steps.values():
        for _ in range(3):
            step.step()
    kiln_acc.clear()
    samples = {name: [] for name in steps}
    kernels = {name: [] for name in steps}
    for _ in range(args.steps):
        for name, step in steps.items():
            acc = kiln_acc if name == "kiln" else peer_acc
            k0, t0 = sum(acc.values()), time.thread_time()
            step.step()
            samples[name].append(time.thread_time() - t0)
            kernels[name].append(sum(acc.values()) - k0)
    print(f"{args.model} {args.mode}, 1 thread, {args.steps} steps, {graphs} torchkiln graphs")
    for name in steps:
        print(f"  {name}: step {1e3 * min(samples[name]):.2f} ms (fastest), "
              f"generated kernels {statistics.median(kernels[name]) / 1e6:.3f} ms per step (median)")
    print("torchkiln's kernels, us per step:")
    for key, ns in sorted(kiln_acc.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"  {key:32s} {ns / args.steps / 1e3:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
