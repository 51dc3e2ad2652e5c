"""Static launcher vs Triton's C launcher for one compiled kernel, timed interleaved in
one process (CPU microseconds per launch, median of rounds).  CUDA only.

    python3 benchmarks/launch_ab.py [--n 5000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

import torchkiln
from torchkiln.codegen.triton import runtime


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=5000)
    n = p.parse_args().n
    x, y, out = (torch.randn(64, 64, device="cuda") for _ in range(3))
    f = torchkiln.compile(lambda a, b: a * 2 + b)
    before = set(sys.modules)
    f(x, y)
    mod = next(sys.modules[k] for k in sys.modules if k.startswith("torchkiln_triton_") and k not in before)
    jit = mod.kernel0
    kernel = jit.run(x, y, out, 4096, 1024, False, grid=None, warmup=True, num_warps=4)
    os.environ["TORCHKILN_STATIC_LAUNCHER"] = "0"
    triton_launch = runtime._bound_launch(kernel)
    os.environ["TORCHKILN_STATIC_LAUNCHER"] = "1"
    static_launch = runtime._bound_launch(kernel)
    stream = torch.cuda.current_stream().cuda_stream
    args = (x, y, out, 4096, 1024, False)
    for launch in (triton_launch, static_launch):
        launch(4, stream, *args)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x * 2 + y)
    out.zero_()
    static_launch(4, stream, *args)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x * 2 + y)
    times = {"triton": [], "static": []}
    for _ in range(7):
        for name, launch in (("triton", triton_launch), ("static", static_launch)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                launch(4, stream, *args)
            times[name].append((time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    print("static launcher is", static_launch)
    for name, ts in times.items():
        print(f"{name:>7} launcher: {statistics.median(ts):.2f} us per launch (rounds {', '.join(f'{t:.2f}' for t in ts)})")


if __name__ == "__main__":
    main()
