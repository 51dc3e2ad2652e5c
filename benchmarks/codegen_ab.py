"""A/B of two torchkiln trees on codegen_bench's workloads (run by hand; not a test).

One worker process per tree (``PYTHONPATH=<tree>``) compiles every workload with its
torchkiln; the parent then asks them for timed rounds in turn (A, B, A, B...), so that
load from other processes hits both alike, and prints per workload the median thread
(CPU) time per call of each, the ratio B/A and the ratio of their fastest rounds.

    python benchmarks/codegen_ab.py --a /work/main --b . [--only softmax] [--rounds 15]

Besides codegen_bench's workloads: ``rowsum`` (x.sum(1) of 64 x 65536), ``colsum``
(x.sum(0) of 65536 x 64), ``multisum`` (x.sum((1, 2)) of 64 x 8192 x 8), ``rowvar``
(x.var(1) of 64 x 65536) and ``colvar`` (x.var(0) of 65536 x 64).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _extra():
    import torch

    class Fn(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x)

    return {
        "rowsum": (lambda: Fn(lambda x: x.sum(1)), lambda: torch.randn(64, 65536)),
        "colsum": (lambda: Fn(lambda x: x.sum(0)), lambda: torch.randn(65536, 64)),
        "multisum": (lambda: Fn(lambda x: x.sum((1, 2))), lambda: torch.randn(64, 8192, 8)),
        "rowvar": (lambda: Fn(lambda x: x.var(1)), lambda: torch.randn(64, 65536)),
        "colvar": (lambda: Fn(lambda x: x.var(0)), lambda: torch.randn(65536, 64)),
    }


def worker(only) -> None:
    """Compile the workloads, then answer ``<key> <calls>`` lines with seconds per call."""
    import torch

    import torchkiln  # first: from PYTHONPATH (codegen_bench puts its own tree first on sys.path)

    sys.path.insert(0, HERE)
    import codegen_bench

    print(os.path.dirname(os.path.dirname(os.path.abspath(torchkiln.__file__))), file=sys.stderr, flush=True)

    torch.set_num_threads(1)
    loads = {**codegen_bench.workloads("cpu"), **_extra()}
    fns = {}
    for name, (make_model, make_input) in loads.items():
        if only and name not in only:
            continue
        for backward in (False, True):
            if backward and name in _extra():
                continue
            torch.manual_seed(0)
            model, x = make_model(), make_input()
            if backward:
                x.requires_grad_(True)
            compiled = torchkiln.compile(model)
            for _ in range(3):
                codegen_bench._step(compiled, x, backward)
            fns[f"{name}:{'fwd+bwd' if backward else 'fwd'}"] = (compiled, x, backward)
    print(json.dumps(sorted(fns)), flush=True)
    for line in sys.stdin:
        key, calls = line.split()
        compiled, x, backward = fns[key]
        t0 = time.thread_time()  # CPU time of this thread: steadier than wall time on a loaded machine
        for _ in range(int(calls)):
            codegen_bench._step(compiled, x, backward)
        print((time.thread_time() - t0) / int(calls), flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="tree A (its root, put on PYTHONPATH)")
    p.add_argument("--b", required=True, help="tree B")
    p.add_argument("--only", action="append")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args.only)
    procs = {}
    for tag, tree in (("A", args.a), ("B", args.b)):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), OMP_NUM_THREADS="1")
        cmd = [sys.executable, os.path.abspath(__file__), "--a", args.a, "--b", args.b, "--worker"]
        cmd += [a for o in (args.only or []) for a in ("--only", o)]
        procs[tag] = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    keys = [json.loads(proc.stdout.readline()) for proc in procs.values()][0]

    def ask(tag, key, calls):
        procs[tag].stdin.write(f"{key} {calls}\n")
        procs[tag].stdin.flush()
        return float(procs[tag].stdout.readline())

    print(f"A = {args.a}, B = {args.b}; median ms per call over {args.rounds} rounds")
    print(f"{'workload':<24} {'A ms':>9} {'B ms':>9} {'B/A':>6} {'min B/A':>8}")
    ratios = []
    for key in keys:
        calls = max(1, int(0.05 / max(ask("A", key, 1), 1e-6)))  # ~50 ms a round
        times = {"A": [], "B": []}
        for _ in range(args.rounds):
            for tag in ("A", "B"):
                times[tag].append(ask(tag, key, calls))
        a, b = statistics.median(times["A"]), statistics.median(times["B"])
        ratios.append(b / a)
        low = min(times["B"]) / min(times["A"])  # the least loaded round of each
        print(f"{key:<24} {a * 1e3:>9.3f} {b * 1e3:>9.3f} {b / a:>6.3f} {low:>8.3f}", flush=True)
    geo = statistics.geometric_mean(ratios)
    print(f"geomean B/A: {geo:.3f}")
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()


if __name__ == "__main__":
    main()
