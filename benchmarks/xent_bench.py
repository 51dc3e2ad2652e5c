"""Cross-entropy over a large vocabulary (run by hand; not a test): eager vs torchkiln vs
torch.compile, forward+backward of ``F.cross_entropy(h @ w.t(), t)`` (an LM head and its
loss: GPT-2's is 4096 rows x 768 x 50257 classes), timed round-robin in one process.

Prints the median step time of each, the ratios, and the largest gradient difference
from eager.  Saved tensors: ``TORCHKILN_LOGS=aot_graphs`` prints the backward graph's inputs.

Usage::

    python benchmarks/xent_bench.py [--device cpu|cuda] [--rows N] [--vocab V] [--dim D] [--reps N]

Defaults: cuda 4096 x 768 x 50257; cpu 512 x 64 x 50257 with one thread.  Timings are
noisy on a shared machine: compare the ratios, repeated.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torchkiln  # noqa: E402


def loss_fn(h, w, t):
    return F.cross_entropy(h @ w.t(), t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--dim", type=int)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    cuda = a.device == "cuda"
    rows, dim = a.rows or (4096 if cuda else 512), a.dim or (768 if cuda else 64)
    if not cuda:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    h = torch.randn(rows, dim, device=a.device, requires_grad=True)
    w = (torch.randn(a.vocab, dim, device=a.device) * 0.02).requires_grad_(True)
    t = torch.randint(0, a.vocab, (rows,), device=a.device)
    fns = {"eager": loss_fn, "torchkiln": torchkiln.compile(loss_fn), "torch.compile": torch.compile(loss_fn)}

    def step(f):
        h.grad = w.grad = None
        f(h, w, t).backward()

    grads = {}
    for name, f in fns.items():
        for _ in range(3):
            step(f)
        grads[name] = (h.grad.clone(), w.grad.clone())
    diff = {n: max((a_ - b).abs().max().item() for a_, b in zip(g, grads["eager"])) for n, g in grads.items()}
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times = {n: [] for n in fns}
    for _ in range(a.reps):
        for name, f in fns.items():
            sync()
            t0 = time.perf_counter()
            step(f)
            sync()
            times[name].append(time.perf_counter() - t0)
    med = {n: statistics.median(v) * 1e3 for n, v in times.items()}
    print(f"cross_entropy {rows} x {dim} x {a.vocab} on {a.device}, fwd+bwd median ms: "
          + "  ".join(f"{n} {m:.2f}" for n, m in med.items()))
    print(f"torchkiln/eager {med['torchkiln'] / med['eager']:.2f}  "
          f"torchkiln/torch.compile {med['torchkiln'] / med['torch.compile']:.2f}  "
          f"max grad diff vs eager: torchkiln {diff['torchkiln']:.2e} torch.compile {diff['torch.compile']:.2e}")


if __name__ == "__main__":
    main()
