"""AOT autograd benchmark (not a test): memory saved for backward and compile time.

For a GPT-2-style block (torchkiln.bench.models.gpt.Block, n_embd=256, 8 heads,
seq 128, batch 4, float32, CPU, torch.set_num_threads(1)):

1. Bytes saved for backward: eager autograd vs torchkiln's forward graph under the
   default partition and the min-cut partition.  Both sides are measured the same way,
   with ``torch.autograd.graph.saved_tensors_hooks``, counting each storage once.
   The second column leaves out parameters and the input, which are alive anyway.
2. Time to trace and partition (first call with forward+backward, nop compilers) for
   torchkiln.aot, against ``torch.compile(backend="aot_eager")`` (after
   ``torch._dynamo.reset()``) and ``torchkiln.compile(backend="aot_eager")``; each in a
   fresh process ("cold": includes first-use costs inside torch) and again in the same
   process after a reset ("warm").

Run: ``python benchmarks/aot_bench.py``.
"""
from __future__ import annotations

import subprocess
import sys
import time

import torch

import torchkiln
from torchkiln.aot import aot_module, default_partition, min_cut_rematerialization_partition, nop
from torchkiln.bench.models.gpt import Block, GPTConfig


def make_block():
    torch.manual_seed(0)
    return Block(GPTConfig(n_embd=256, n_head=8, block_size=128))


def saved_bytes(model, x) -> tuple[int, int]:
    """(all saved bytes, saved bytes other than parameters and the input), unique storages."""
    seen, total, activations = set(), 0, 0
    keep_alive = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}

    def pack(t):
        nonlocal total, activations
        s = t.untyped_storage()
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            total += s.nbytes()
            if s.data_ptr() not in keep_alive:
                activations += s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    out.pow(2).mean().backward()
    return total, activations


def first_call_seconds(compiled, x) -> float:
    start = time.perf_counter()
    compiled(x).pow(2).mean().backward()
    return time.perf_counter() - start


def main():
    torch.set_num_threads(1)
    x = torch.randn(4, 128, 256)
    rows = []
    eager = make_block()
    rows.append(("eager autograd", *saved_bytes(eager, x)))
    for name, fn in (("torchkiln default_partition", default_partition),
                     ("torchkiln min-cut partition", min_cut_rematerialization_partition)):
        block = make_block()
        compiled = aot_module(block, nop, partition_fn=fn)
        compiled(x)  # compile outside the measurement
        rows.append((name, *saved_bytes(compiled, x)))
    print("Bytes saved for backward, GPT-2-style block (4x128x256 float32)")
    print(f"{'':32s} {'all saved (MiB)':>16s} {'activations (MiB)':>18s}")
    for name, total, act in rows:
        print(f"{name:32s} {total / 2**20:16.2f} {act / 2**20:18.2f}")

    print("\nFirst call (trace + partition + forward + backward), seconds, 1 thread;")
    print("each in a fresh process (cold) and then again after a reset in that process (warm)")
    print(f"{'':42s} {'cold':>8s} {'warm':>8s}")
    for variant in VARIANTS:
        out = subprocess.run([sys.executable, __file__, "--time", variant], capture_output=True, text=True, check=True)
        cold, warm = out.stdout.split()[-2:]
        print(f"{variant:42s} {float(cold):8.3f} {float(warm):8.3f}")


VARIANTS = ("torchkiln.aot.aot_module (min-cut)", "torch.compile(backend='aot_eager')",
            "torchkiln.compile(backend='aot_eager')")


def time_variant(variant: str) -> None:
    torch.set_num_threads(1)
    x = torch.randn(4, 128, 256)
    results = []
    for _ in range(2):
        if variant.startswith("torchkiln.aot"):
            compiled = aot_module(make_block(), nop)
        elif variant.startswith("torch.compile"):
            dynamo = __import__("torch._dynamo", fromlist=["reset"])  # the peer, for comparison only
            dynamo.reset()
            compiled = torch.compile(make_block(), backend="aot_eager")
        else:
            torchkiln.reset()
            compiled = torchkiln.compile(make_block(), backend="aot_eager")
        results.append(first_call_seconds(compiled, x))
    print(*results)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--time":
        time_variant(sys.argv[2])
    else:
        main()
