"""DDP step time: eager, torchkiln with and without the bucket split, torch.compile (by hand).

Each of ``--nproc`` processes (gloo on CPU, NCCL on CUDA; loopback) trains a GPT-2-style
decoder (``--config gpt2``: GPT-2 small, 12 layers, 768 wide, 1024 tokens; ``small``:
4 layers, 128 wide, 32 tokens, for a CPU) wrapped in ``DistributedDataParallel``, in
these modes, one after the other in the same processes:

- ``eager``: ``DDP(model)``;
- ``kiln``: ``torchkiln.compile(DDP(model))`` with ``config.optimize_ddp=True`` (the
  graph split at DDP's bucket boundaries);
- ``kiln_nosplit``: the same with ``optimize_ddp=False`` (one graph);
- ``torch``: ``torch.compile(DDP(model))`` (the peer, its DDPOptimizer on).

A step is ``zero_grad``, forward (the loss is computed inside the model), backward,
SGD step.  Printed per mode (rank 0): median step time over ``--steps`` after
``--warmup`` steps, its ratio to eager, the all-reduce time per step and the fraction
of it hidden behind the backward, from ``torch.profiler`` over ``--profile-steps``
steps: all-reduce intervals are ``gloo:all_reduce`` events (CPU) or NCCL kernels
(CUDA); backward compute intervals are autograd node evaluations other than
AccumulateGrad (CPU) or the non-NCCL kernels (CUDA); hidden = |all-reduce ∩ compute| /
|all-reduce|.  The first loss of each mode is printed as a sanity check (equal across
modes up to rounding).  Timings on a shared machine are noisy; nothing is asserted.

Usage::

    python benchmarks/ddp_bench.py --device cpu --nproc 2            # small config
    python benchmarks/ddp_bench.py --device cuda --nproc 2           # GPT-2 small, NCCL
"""
from __future__ import annotations

import argparse
import math
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

CONFIGS = {
    "gpt2": dict(n_layer=12, n_embd=768, n_head=12, vocab=50257, seq=1024, batch=4),
    "small": dict(n_layer=4, n_embd=128, n_head=4, vocab=512, seq=32, batch=4),
}


class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int, seq: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.out = torch.nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    """A GPT-2-style decoder returning the mean cross-entropy of next-token prediction."""

    def __init__(self, n_layer, n_embd, n_head, vocab, seq, **_) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, n_embd)
        self.wpe = torch.nn.Embedding(seq, n_embd)
        self.blocks = torch.nn.ModuleList(Block(n_embd, n_head, seq) for _ in range(n_layer))
        self.ln_f = torch.nn.LayerNorm(n_embd)
        self.head = torch.nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def _wrap(mode: str, model, device_ids, bucket_cap_mb: float, backend: str):
    import torchkiln

    ddp = DDP(model, device_ids=device_ids, bucket_cap_mb=bucket_cap_mb)
    if mode == "eager":
        return ddp
    if mode in ("kiln", "kiln_nosplit"):
        return torchkiln.compile(ddp, backend=backend)
    if mode == "torch":
        return torch.compile(ddp)
    raise ValueError(mode)


def _intervals_union(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _overlap(a, b) -> float:
    total = 0.0
    for s, e in a:
        for s2, e2 in b:
            total += max(0.0, min(e, e2) - max(s, s2))
    return total


def _comm_and_hidden(prof, cuda: bool) -> tuple[float, float]:
    """(all-reduce microseconds, hidden fraction) from the profiled events."""
    comm, compute = [], []
    for e in prof.events():
        span = (e.time_range.start, e.time_range.end)
        if cuda:
            if e.device_type == torch.autograd.DeviceType.CUDA:
                (comm if "nccl" in e.name.lower() else compute).append(span)
        elif e.name.startswith("gloo:all_reduce"):
            comm.append(span)
        elif e.name.startswith("autograd::engine::evaluate_function:") and "AccumulateGrad" not in e.name:
            compute.append(span)
    comm, compute = _intervals_union(comm), _intervals_union(compute)
    total = sum(e - s for s, e in comm)
    return total, (_overlap(comm, compute) / total if total else float("nan"))


def _worker(rank: int, world: int, port: int, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(args.threads)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    import torchkiln

    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    cfg = CONFIGS[args.config]
    gen = torch.Generator().manual_seed(rank)
    idx = torch.randint(cfg["vocab"], (cfg["batch"], cfg["seq"]), generator=gen).to(device)
    targets = torch.randint(cfg["vocab"], (cfg["batch"], cfg["seq"]), generator=gen).to(device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    results = {}
    for mode in args.modes.split(","):
        torchkiln.reset()
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = GPT(**cfg).to(device)
        with torchkiln.config.patch(optimize_ddp=mode != "kiln_nosplit"):
            ddp = _wrap(mode, model, [rank] if cuda else None, args.bucket_cap_mb, args.backend)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)

            def step():
                opt.zero_grad(set_to_none=True)
                loss = ddp(idx, targets)
                loss.backward()
                opt.step()
                return loss

            start = time.perf_counter()
            first_loss = step().item()
            compile_s = time.perf_counter() - start
            for _ in range(args.warmup - 1):
                step()
            sync()
            times = []
            for _ in range(args.steps):
                dist.barrier()
                start = time.perf_counter()
                step()
                sync()
                times.append(time.perf_counter() - start)
            activities = [torch.profiler.ProfilerActivity.CPU]
            if cuda:
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            with torch.profiler.profile(activities=activities) as prof:
                for _ in range(args.profile_steps):
                    step()
                sync()
            comm_us, hidden = _comm_and_hidden(prof, cuda)
        results[mode] = (statistics.median(times), comm_us / args.profile_steps / 1e3, hidden, first_loss, compile_s)
        del ddp, model, opt
    if rank == 0:
        eager = results.get("eager", (float("nan"),))[0]
        print(f"\nDDP benchmark: device={args.device} nproc={world} config={args.config} {cfg} "
              f"bucket_cap_mb={args.bucket_cap_mb} backend={args.backend} steps={args.steps}")
        print(f"{'mode':<14}{'step ms':>10}{'vs eager':>10}{'allreduce ms':>14}{'hidden':>9}"
              f"{'first loss':>12}{'1st step s':>11}")
        for mode, (t, comm, hidden, loss, compile_s) in results.items():
            print(f"{mode:<14}{t * 1e3:>10.2f}{eager / t:>9.2f}x{comm:>14.2f}{hidden:>8.0%}"
                  f"{loss:>12.5f}{compile_s:>11.1f}")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--config", choices=sorted(CONFIGS), default=None,
                        help="model size (default: gpt2 on cuda, small on cpu)")
    parser.add_argument("--modes", default="eager,kiln,kiln_nosplit,torch")
    parser.add_argument("--backend", default="inductor", help="torchkiln backend")
    parser.add_argument("--bucket-cap-mb", type=float, default=None,
                        help="DDP bucket size (default: 25 for gpt2, 1 for small: 4 buckets; torch wants >= 1)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile-steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process on CPU")
    args = parser.parse_args()
    args.config = args.config or ("gpt2" if args.device == "cuda" else "small")
    if args.bucket_cap_mb is None:
        args.bucket_cap_mb = 25.0 if args.config == "gpt2" else 1.0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(args.nproc, port, args), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
