"""Per-call overhead of the compiled wrapper (run by hand; not a test).

A function of 10 tensor inputs with a trivial graph (``a0 + a1 + ... + a9`` on 1-element
tensors) is called many times: eagerly, through ``torchkiln.compile(backend="eager")``
and through ``torch.compile(backend="eager")``, all in one process, interleaved in
rounds.  The overhead of a compiler is its median time per call minus eager's median:
guard checks, argument binding and dispatch to the captured graph.  Also reported:
the same for a function of one tensor input, and torchkiln's ratio to torch's
overhead (target: at most 1.5x), and the same for an ``nn.Module`` (``OptimizedModule``).

Usage::

    python benchmarks/capture_overhead.py [--calls N] [--rounds N] [--no-torch]

Uses ``torch.set_num_threads(1)``.  Timings are noisy; this prints them, it never
asserts on them.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import torchkiln


def ten_inputs(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9):
    return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9


def one_input(a0):
    return a0 + 1


class AddOne(torch.nn.Module):
    def forward(self, a0):
        return a0 + 1


def _time_per_call(fn, args, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - start) / calls


def measure(name, fn, args, calls, rounds, with_torch):
    """Median seconds per call for eager, torchkiln and (optionally) torch.compile."""
    candidates = {"eager": fn}
    torchkiln.reset()
    candidates["torchkiln"] = torchkiln.compile(fn, backend="eager")
    if with_torch:
        torch._dynamo.reset()
        candidates["torch.compile"] = torch.compile(fn, backend="eager")
    expected = fn(*args)
    for label, f in candidates.items():
        out = f(*args)  # compile (warm-up)
        if not torch.equal(out, expected):
            raise SystemExit(f"{label} gave a different result for {name}")
        _time_per_call(f, args, calls // 10 + 1)
    samples = {label: [] for label in candidates}
    for _ in range(rounds):
        for label, f in candidates.items():
            samples[label].append(_time_per_call(f, args, calls))
    return {label: statistics.median(s) for label, s in samples.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed sample")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved samples per candidate")
    parser.add_argument("--no-torch", action="store_true", help="skip torch.compile")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with_torch = not args.no_torch
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, threads=1, "
          f"{args.rounds} rounds x {args.calls} calls, median per call")
    header = f"{'workload':<12}{'eager us':>10}{'torchkiln us':>14}{'torch us':>10}" \
             f"{'kiln ovh us':>13}{'torch ovh us':>14}{'ratio':>8}"
    print(header)
    print("-" * len(header))
    for name, fn, args_ in (("10 inputs", ten_inputs, tuple(torch.randn(1) for _ in range(10))),
                            ("1 input", one_input, (torch.randn(1),)),
                            ("module", AddOne(), (torch.randn(1),))):
        t = measure(name, fn, args_, args.calls, args.rounds, with_torch)
        kiln_ovh = t["torchkiln"] - t["eager"]
        torch_t = t.get("torch.compile")
        torch_ovh = torch_t - t["eager"] if torch_t is not None else None
        ratio = f"{kiln_ovh / torch_ovh:.2f}x" if torch_ovh else "-"
        print(f"{name:<12}{t['eager'] * 1e6:>10.2f}{t['torchkiln'] * 1e6:>14.2f}"
              f"{(torch_t or float('nan')) * 1e6:>10.2f}{kiln_ovh * 1e6:>13.2f}"
              f"{(torch_ovh if torch_ovh is not None else float('nan')) * 1e6:>14.2f}{ratio:>8}")


if __name__ == "__main__":
    main()
