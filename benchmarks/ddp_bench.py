"""DDP step time: eager, torchkiln with and without the bucket split, torch.compile (by hand).

Each of ``--nproc`` processes (gloo on CPU, NCCL on CUDA; loopback) trains a GPT-2-style
decoder (``--config gpt2``: GPT-2 small, 12 layers, 768 wide, 1024 tokens; ``small``:
4 layers, 128 wide, 32 tokens, for a CPU) or the model suite's hf_llama (``hf_llama``:
transformers' LlamaForCausalLM, 6 layers, 1024 wide; ``hf_llama_small`` for a CPU),
``--batch`` sequences per rank, wrapped in ``DistributedDataParallel``, in
these modes, all in the same processes:

- ``eager``: ``DDP(model)``;
- ``kiln``: ``torchkiln.compile(DDP(model))`` with ``config.optimize_ddp=True`` (the
  graph split at DDP's bucket boundaries);
- ``kiln_nosplit``: the same with ``optimize_ddp=False`` (one graph);
- ``kiln_ca`` (opt-in, ``--modes``): ``torchkiln.compile(DDP(model))`` with forward and
  backward under ``torchkiln.compiled_autograd.enable``: DDP's Python reducer (one
  all-reduce per parameter from its post-accumulate-grad hook), the backward one graph;
- ``torch``: ``torch.compile(DDP(model))`` (the peer, its DDPOptimizer on).

A step is ``zero_grad``, forward (the loss is computed inside the model), backward,
SGD step.  Every mode is built, compiled and warmed up (``--warmup`` steps) first; then
``--rounds`` rounds each run ``--steps`` steps of every mode in turn, so that a change
of load on a shared machine hits all modes alike.  A step's time is the slowest
rank's.  Printed per mode (rank 0): the minimum and the median step time and the
minimum main-thread CPU time (``time.thread_time``: forward and, on CPU, backward
compute; not the wait for the all-reduce nor time lost to other processes), each
with its ratio to eager; the all-reduce time per step and the fraction of it hidden
behind the backward, from ``torch.profiler`` over ``--profile-steps`` steps:
all-reduce intervals are ``gloo:all_reduce`` events (CPU) or NCCL kernels (CUDA); backward compute intervals are autograd node evaluations other than
AccumulateGrad (CPU) or the non-NCCL kernels (CUDA); hidden = |all-reduce ∩ compute| /
|all-reduce|; ``n/step`` is the number of all-reduces (NCCL kernels) per step;
``--trace-dir`` keeps rank 0's traces.  For the torchkiln modes, the graphs captured,
the pieces DDPOptimizer compiled them as (``counters["ddp"]``; a graph it did not
split counts one; 0: it never saw the graph) and the graph breaks are
printed.  The first loss of each mode is printed as a sanity check (equal across
modes up to rounding).  On a shared machine trust the minimum and the CPU time over
the median; nothing is asserted.

Usage::

    python benchmarks/ddp_bench.py --device cpu --nproc 2            # small config
    python benchmarks/ddp_bench.py --device cuda --nproc 2           # GPT-2 small, NCCL
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import itertools
import math
import os
import shutil
import socket
import statistics
import time
import types

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

CONFIGS = {
    "gpt2": dict(n_layer=12, n_embd=768, n_head=12, vocab=50257, seq=1024, batch=4),
    "small": dict(n_layer=4, n_embd=128, n_head=4, vocab=512, seq=32, batch=4),
    # the model suite's hf_llama at its CUDA size (torchkiln/bench/models/hf.py::make_llama):
    # LlamaForCausalLM, 1024 wide, 6 layers, 16 heads, 4 KV heads, vocab 2048
    "hf_llama": dict(n_layer=6, n_embd=1024, n_head=16, n_kv_head=4, vocab=2048, seq=256, batch=16),
    "hf_llama_small": dict(n_layer=2, n_embd=128, n_head=4, n_kv_head=2, vocab=2048, seq=64, batch=4),
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


class HFLlama(torch.nn.Module):
    """transformers' LlamaForCausalLM returning the mean next-token cross-entropy (the
    model suite's hf_llama; needs transformers)."""

    def __init__(self, n_layer, n_embd, n_head, n_kv_head, vocab, seq, **_) -> None:
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(vocab_size=vocab, hidden_size=n_embd, intermediate_size=n_embd * 8 // 3,
                             num_hidden_layers=n_layer, num_attention_heads=n_head, num_key_value_heads=n_kv_head,
                             max_position_embeddings=seq, attention_dropout=0.0)
        self.lm = LlamaForCausalLM(config)

    def forward(self, idx, targets):
        logits = self.lm(idx).logits
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _wrap(mode: str, model, device_ids, bucket_cap_mb: float, backend: str):
    import torchkiln

    ddp = DDP(model, device_ids=device_ids, bucket_cap_mb=bucket_cap_mb)
    if mode == "eager":
        return ddp
    if mode in ("kiln", "kiln_nosplit", "kiln_ca"):
        return torchkiln.compile(ddp, backend=backend)
    if mode == "torch":
        return torch.compile(ddp)
    raise ValueError(mode)


def _own_forward(cls):
    """A subclass of ``cls`` whose ``forward`` has a code object of its own.  Compiled code
    is cached per code object and guarded on the module's type, not its identity, so
    without this the modes built later would reuse the graphs compiled for the first
    (``kiln_nosplit`` would run ``kiln``'s split graph)."""
    fn = cls.forward
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{next(_forward_ids)}")
    forward = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
    return type(cls.__name__, (cls,), {"forward": forward})


_forward_ids = itertools.count()


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


def _comm_and_hidden(prof, cuda: bool) -> tuple[float, float, int]:
    """(all-reduce microseconds, hidden fraction, number of all-reduces) from the profiled events."""
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
    count = len(comm)
    comm, compute = _intervals_union(comm), _intervals_union(compute)
    total = sum(e - s for s, e in comm)
    return total, (_overlap(comm, compute) / total if total else float("nan")), count


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
    cfg = dict(CONFIGS[args.config])
    if args.batch:
        cfg["batch"] = args.batch
    model_cls = HFLlama if args.config.startswith("hf_llama") else GPT
    gen = torch.Generator().manual_seed(rank)
    idx = torch.randint(cfg["vocab"], (cfg["batch"], cfg["seq"]), generator=gen).to(device)
    targets = torch.randint(cfg["vocab"], (cfg["batch"], cfg["seq"]), generator=gen).to(device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    modes = args.modes.split(",")
    torchkiln.reset()
    torch._dynamo.reset()
    steps, compile_s, first_loss, graphs = {}, {}, {}, {}
    for mode in modes:  # build, compile and warm up every mode first
        before = (torchkiln.counters["stats"]["unique_graphs"],
                  torchkiln.counters["ddp"]["pieces"] + torchkiln.counters["ddp"]["whole_graphs"],
                  sum(torchkiln.counters["graph_break"].values()))
        torch.manual_seed(0)
        model = _own_forward(model_cls)(**cfg).to(device)
        with torchkiln.config.patch(optimize_ddp=mode != "kiln_nosplit"):
            ddp = _wrap(mode, model, [rank] if cuda else None, args.bucket_cap_mb, args.backend)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)

        autograd = (functools.partial(torchkiln.compiled_autograd.enable,
                                      torchkiln.compiled_autograd.compiler_fn_for_backend(args.backend))
                    if mode == "kiln_ca" else contextlib.nullcontext)

        def step(ddp=ddp, opt=opt, split=mode != "kiln_nosplit", autograd=autograd):
            with torchkiln.config.patch(optimize_ddp=split):
                opt.zero_grad(set_to_none=True)
                with autograd():
                    loss = ddp(idx, targets)
                    loss.backward()
                opt.step()
            return loss

        start = time.perf_counter()
        first_loss[mode] = step().item()
        compile_s[mode] = time.perf_counter() - start
        if rank == 0:  # progress, in case a time limit cuts the run short
            print(f"{mode}: first step (compile) {compile_s[mode]:.1f} s, loss {first_loss[mode]:.5f}", flush=True)
        for _ in range(args.warmup):
            step()
        steps[mode] = step
        if mode.startswith("kiln"):  # graphs compiled (DDP pieces count one each) and graph breaks
            graphs[mode] = (torchkiln.counters["stats"]["unique_graphs"] - before[0],
                            torchkiln.counters["ddp"]["pieces"] + torchkiln.counters["ddp"]["whole_graphs"] - before[1],
                            sum(torchkiln.counters["graph_break"].values()) - before[2])
    sync()
    # Timed rounds, the modes interleaved so that a change of load on a shared machine
    # hits every mode alike; per step the slowest rank's wall time and main-thread CPU
    # time (time.thread_time: the forward and, on CPU, the backward run on this thread;
    # waits for the all-reduce and time descheduled by other load do not count).
    wall = {m: [] for m in modes}
    cpu = {m: [] for m in modes}
    for _ in range(args.rounds):
        for mode in modes:
            for _ in range(args.steps):
                dist.barrier()
                start, start_cpu = time.perf_counter(), time.thread_time()
                steps[mode]()
                sync()
                wall[mode].append(time.perf_counter() - start)
                cpu[mode].append(time.thread_time() - start_cpu)
    for table in (wall, cpu):
        for mode in modes:
            t = torch.tensor(table[mode], dtype=torch.float64, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            table[mode] = t.tolist()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    hidden = {}
    for mode in modes:
        steps[mode]()
        sync()
        dist.barrier()
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(args.profile_steps):
                steps[mode]()
            sync()
        comm_us, frac, count = _comm_and_hidden(prof, cuda)
        hidden[mode] = (comm_us / args.profile_steps / 1e3, frac, count / args.profile_steps)
        if args.trace_dir and rank == 0:  # chrome://tracing / Perfetto; gzipped (tens of MB raw)
            path = os.path.join(args.trace_dir, f"ddp_{args.config}_{mode}.json")
            prof.export_chrome_trace(path)
            with open(path, "rb") as raw, gzip.open(path + ".gz", "wb") as packed:
                shutil.copyfileobj(raw, packed)
            os.remove(path)
    if rank == 0:
        n = args.rounds * args.steps
        print(f"\nDDP benchmark: device={args.device} nproc={world} config={args.config} {cfg} "
              f"bucket_cap_mb={args.bucket_cap_mb} backend={args.backend} {args.rounds} rounds x "
              f"{args.steps} steps per mode, interleaved; slowest rank per step")
        print(f"{'mode':<14}{'min ms':>9}{'vs eager':>10}{'median ms':>11}{'vs eager':>10}{'cpu min ms':>12}"
              f"{'vs eager':>10}{'cpu med ms':>12}{'allreduce ms':>14}{'n/step':>7}{'hidden':>8}{'first loss':>12}"
              f"{'1st step s':>11}  graphs/pieces/breaks")
        ref = modes[0] if "eager" not in modes else "eager"
        stats = {m: (min(wall[m]), statistics.median(wall[m]), min(cpu[m]), statistics.median(cpu[m])) for m in modes}
        for mode in modes:
            (w, med, c, cmed), (ew, emed, ec, _) = stats[mode], stats[ref]
            comm, frac, count = hidden[mode]
            print(f"{mode:<14}{w * 1e3:>9.2f}{ew / w:>9.2f}x{med * 1e3:>11.2f}{emed / med:>9.2f}x{c * 1e3:>12.2f}"
                  f"{ec / c:>9.2f}x{cmed * 1e3:>12.2f}{comm:>14.2f}{count:>7.0f}{frac:>8.0%}{first_loss[mode]:>12.5f}"
                  f"{compile_s[mode]:>11.1f}  {'%d/%d/%d' % graphs[mode] if mode in graphs else ''}")
        print(f"(min and median over {n} steps; 'cpu' is main-thread CPU time; 'vs eager' > 1 is faster)")
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
    parser.add_argument("--steps", type=int, default=5, help="timed steps per mode per round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds over the modes, interleaved")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per mode after the first")
    parser.add_argument("--profile-steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process on CPU")
    parser.add_argument("--batch", type=int, default=None, help="batch size (default: the config's)")
    parser.add_argument("--trace-dir", default=None, help="write rank 0's profiler traces there (gzipped)")
    args = parser.parse_args()
    args.config = args.config or ("gpt2" if args.device == "cuda" else "small")
    if args.bucket_cap_mb is None:
        args.bucket_cap_mb = 1.0 if args.config.endswith("small") else 25.0
    if args.trace_dir:
        os.makedirs(args.trace_dir, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(args.nproc, port, args), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
