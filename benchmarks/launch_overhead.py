"""Per-kernel launch cost of the generated Triton launchers (CUDA only).

Compiles a one-kernel pointwise graph and a one-kernel reduction graph, then times, in
CPU microseconds per launch (median of 5 rounds of N launches on small tensors, so the
GPU keeps up): Triton's own dispatch (``jit_fn[grid](...)``, what the launchers did
before), the generated ``kernelN_launch`` (bound launcher), the bound launch alone (the
floor: Triton's C launcher), and whole calls of the
compiled function against eager and torch.compile (peer).

    python benchmarks/launch_overhead.py [--n 20000]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import torchkiln


def _time(fn, n: int) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def _module_of(compiled, *args):
    before = {k for k in sys.modules if k.startswith("torchkiln_triton_")}
    compiled(*args)
    torch.cuda.synchronize()
    new = [m for k, m in sys.modules.items() if k.startswith("torchkiln_triton_") and k not in before]
    return new[-1]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=20000)
    n = p.parse_args().n
    x = torch.randn(64, 64, device="cuda")
    y = torch.randn(64, 64, device="cuda")
    rows = []

    def pointwise(a, b):
        return a * 2 + b

    def reduction(a, b):
        return (a * b).sum(1)

    for name, fn, out in (("pointwise", pointwise, torch.empty(64, 64, device="cuda")),
                          ("reduction", reduction, torch.empty(64, device="cuda"))):
        torchkiln.reset()
        compiled = torchkiln.compile(fn)
        mod = _module_of(compiled, x, y)
        launch = mod.kernel0_launch
        if name == "pointwise":
            jit = lambda: mod.kernel0[(4,)](x, y, out, 4096, XBLOCK=1024, IDX64=False, num_warps=4)  # noqa: E731
        else:
            jit = lambda: mod.kernel0_persistent[(1,)](x, y, out, 64, 64, XBLOCK=64, RBLOCK=64, IDX64=False, num_warps=8)  # noqa: E731
        peer = torch.compile(fn)
        peer(x, y)
        launch(x, y, out)
        floor = float("nan")
        bound = getattr(mod, "kernel0_L", None) or getattr(mod, "kernel0_persistent_L", None)
        if bound is not None and len(bound.bound) >= 1:  # the bound launch alone: the floor
            b = next(iter(bound.bound.values()))
            stream = torch.cuda.current_stream().cuda_stream
            args = (x, y, out, 4096, 1024, False) if name == "pointwise" else (x, y, out, 64, 64, 64, 64, False)
            floor = _time(lambda: b(4 if name == "pointwise" else 1, stream, *args), n)
        rows.append((name, _time(jit, n), _time(lambda: launch(x, y, out), n), floor, _time(lambda: compiled(x, y), n // 4),
                     _time(lambda: peer(x, y), n // 4), _time(lambda: fn(x, y), n // 4)))
    print(f"{'kernel':<10} {'triton jit us':>14} {'launcher us':>12} {'bound us':>9} {'kiln call us':>13} "
          f"{'peer call us':>13} {'eager us':>9}")
    for r in rows:
        print(f"{r[0]:<10} {r[1]:>14.2f} {r[2]:>12.2f} {r[3]:>9.2f} {r[4]:>13.2f} {r[5]:>13.2f} {r[6]:>9.2f}")


if __name__ == "__main__":
    main()
