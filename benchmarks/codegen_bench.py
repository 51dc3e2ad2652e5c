"""Code generator benchmark (run by hand; not a test): eager vs torchkiln vs torch.compile.

For each workload (a pointwise chain, softmax, layer_norm followed by GELU, an MLP block and
a GPT-2-style block), forward only and forward+backward, it measures in one run, on one
machine:

- steady-state median time per call (after warmup) of eager PyTorch,
  ``torchkiln.compile(backend="inductor")`` and ``torch.compile(backend="inductor")``,
  measured round-robin (one call of each per round) so background load hits all alike;
- cold compile time of both compilers (time of the first call, minus one eager call),
  in a process where each compiler has already compiled one trivial function (so imports
  are not counted), with empty disk caches: a fresh temporary ``TORCHKILN_CACHE_DIR`` and
  ``TORCHINDUCTOR_CACHE_DIR`` per workload, ``torchkiln.reset()`` and ``torch._dynamo.reset()``;
- the largest difference of either compiler's result from eager's (a sanity check).

Usage::

    python benchmarks/codegen_bench.py [--device cpu|cuda] [--threads N] [--only NAME]
                                       [--reps N] [--json PATH] [--no-torch]

On CUDA each row also gets the summed GPU kernel time per call of each contender and,
for torchkiln, every generated Triton kernel's median GPU time, the bytes of its tensor
arguments (each buffer once) and the achieved GB/s against the H100's measured copy
bandwidth (~3.0 TB/s; torch.profiler, launches recorded in order).

CPU runs use ``torch.set_num_threads(1)`` unless ``--threads`` says otherwise (on a
shared 2-core machine, more threads make timings long-tailed).  Timings are noisy; this
prints them, it never asserts on them.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torchkiln  # noqa: E402


# ---------------------------------------------------------------------------------------
# workloads: name -> (module factory, input factory); sizes scaled for the device


def _sizes(device):
    big = device == "cuda"
    return dict(rows=4096 if big else 1024, cols=1024, d=768 if big else 256, batch=8 if big else 2,
                seq=256 if big else 64, heads=12 if big else 4)


class PointwiseChain(nn.Module):
    def forward(self, x):
        y = torch.sin(x) * 2 + 1
        y = torch.relu(y) * x - torch.tanh(x)
        return torch.sigmoid(y) * torch.exp(-x.abs()) + y * 0.5


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class LayerNormGelu(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.ln = nn.LayerNorm(n)

    def forward(self, x):
        return F.gelu(self.ln(x))


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return x + self.proj(F.gelu(self.fc(self.ln(x)), approximate="tanh"))


class GPT2Block(nn.Module):
    """Pre-LN transformer block as in GPT-2: causal self-attention written out (no SDPA), MLP."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.mlp = MLP(d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln_1(x)
        q, k, v = self.c_attn(h).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.c_proj(y)
        return self.mlp(x)


def workloads(device):
    s = _sizes(device)
    return {
        "pointwise": (lambda: PointwiseChain(), lambda: torch.randn(s["rows"], s["cols"])),
        "softmax": (lambda: Softmax(), lambda: torch.randn(s["rows"], s["cols"])),
        "layernorm_gelu": (lambda: LayerNormGelu(s["cols"]), lambda: torch.randn(s["rows"], s["cols"])),
        "mlp": (lambda: MLP(s["d"]), lambda: torch.randn(s["batch"] * s["seq"], s["d"])),
        "gpt2_block": (lambda: GPT2Block(s["d"], s["heads"]), lambda: torch.randn(s["batch"], s["seq"], s["d"])),
    }


# ---------------------------------------------------------------------------------------
# timing


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _step(fn, x, backward):
    if backward:
        out = fn(x)
        out.sum().backward()
        return out
    with torch.no_grad():
        return fn(x)


def _interleaved_medians(fns: dict, x, backward, device, reps, warmup=3) -> dict:
    """Median time per call of each callable, measured round-robin (one call of each per
    round) so that load from other processes hits every contender alike."""
    for fn in fns.values():
        for _ in range(warmup):
            _step(fn, x, backward)
    _sync(device)
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            _step(fn, x, backward)
            _sync(device)
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _fresh_caches():
    os.environ["TORCHKILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln_bench_")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor_bench_")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton_bench_")  # both compilers' Triton builds
    torchkiln.reset()
    import torch._dynamo  # the peer, reset between workloads

    torch._dynamo.reset()


def _compilers(use_torch):
    out = {"torchkiln": lambda m: torchkiln.compile(m, backend="inductor")}
    if use_torch:
        out["torch"] = lambda m: torch.compile(m, backend="inductor")
    return out


def warm_up_processes(device, use_torch):
    """Import and initialise each compiler once on a trivial function, forward and
    backward, so that a cold compile below measures compiling the workload (empty disk
    caches), not first imports (the partitioner's networkx, the peer's own modules)."""
    x = torch.randn(8, device=device, requires_grad=True)
    for compile_ in _compilers(use_torch).values():
        _fresh_caches()
        try:
            compile_(lambda t: t * 2 + 1)(x).sum().backward()
        except Exception:
            pass


def run_one(name, make_model, make_input, backward, device, reps, use_torch):
    torch.manual_seed(0)
    model = make_model().to(device)
    x = make_input().to(device)
    if backward:
        x.requires_grad_(True)
    row = {"workload": name, "mode": "fwd+bwd" if backward else "fwd"}
    ref = _step(model, x, backward).detach()
    t0 = time.perf_counter()
    _step(model, x, backward)
    _sync(device)
    eager_once = time.perf_counter() - t0
    contenders = {"eager": model}
    for cname, compile_ in _compilers(use_torch).items():
        _fresh_caches()
        try:
            compiled = compile_(model)
            t0 = time.perf_counter()
            out = _step(compiled, x, backward).detach()
            _sync(device)
            row[f"{cname}_compile_s"] = max(time.perf_counter() - t0 - eager_once, 0.0)
            row[f"{cname}_maxdiff"] = (out.float() - ref.float()).abs().max().item() if out.numel() else 0.0
            contenders[cname] = compiled
        except Exception as e:  # a benchmark reports failures, it does not stop on them
            row[f"{cname}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    for cname, t in _interleaved_medians(contenders, x, backward, device, reps).items():
        row[f"{cname}_ms"] = t * 1e3
    if device == "cuda" and "torchkiln" in contenders:
        try:
            row["kiln_kernels"] = kernel_bandwidth(contenders["torchkiln"], x, backward)
            row.update(_gpu_time(contenders, x, backward))
        except Exception as e:  # a report, not a failure of the row
            row["kiln_kernels"] = [{"error": f"{type(e).__name__}: {e}"}]
    return row


# ---------------------------------------------------------------------------------------
# per-kernel bandwidth (CUDA): what each generated Triton kernel moves and how fast


def _tensor_bytes(args) -> int:
    """Bytes of the tensor arguments of one launch, each buffer once (a kernel that
    reads and writes one buffer in place counts it once: a lower bound on its traffic)."""
    seen, total = set(), 0
    for a in args:
        if isinstance(a, torch.Tensor) and a.data_ptr() not in seen:
            seen.add(a.data_ptr())
            total += a.numel() * a.element_size()
    return total


def _profile_kernels(fn, x, backward, steps):
    """CUDA kernel events (name, start us, duration us) of ``steps`` calls, in launch order."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            _step(fn, x, backward)
        torch.cuda.synchronize()
    evs = [(e.name, e.time_range.start, e.device_time_total) for e in prof.events()
           if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted(evs, key=lambda e: e[1])


def kernel_bandwidth(fn, x, backward, steps=5):
    """Each generated Triton kernel of one call: median GPU time (us, over ``steps``
    profiled calls), bytes of its tensor arguments and achieved GB/s.  The launches are
    recorded by wrapping every bound :class:`runtime.Launcher` entry for the profiled
    calls only (the timed calls above ran unwrapped)."""
    import gc

    from torchkiln.codegen.triton import runtime

    log = []

    def recording(name, launch):
        def rec(grid, stream, *args):
            log.append((name, _tensor_bytes(args)))
            return launch(grid, stream, *args)
        return rec

    saved = []
    for L in [o for o in gc.get_objects() if type(o) is runtime.Launcher]:  # weak proxies fail isinstance
        saved.append((L, dict(L.bound)))
        for key, launch in list(L.bound.items()):
            L.bound[key] = recording(L.fn.__name__, launch)
    try:
        evs = _profile_kernels(fn, x, backward, steps)
    finally:
        for L, bound in saved:
            L.bound.clear()
            L.bound.update(bound)
    names = {n for n, _ in log}
    evs = [e for e in evs if e[0] in names]
    if not log or len(evs) != len(log) or any(e[0] != n for e, (n, _) in zip(evs, log)):
        return [{"error": f"{len(log)} launches recorded, {len(evs)} kernels profiled"}]
    per = len(log) // steps
    out = []
    for i in range(per):
        us = statistics.median(evs[i + j * per][2] for j in range(steps))
        name, nbytes = log[i]
        out.append({"kernel": name, "us": us, "MB": nbytes / 1e6, "GBps": nbytes / us / 1e3 if us else 0.0})
    return out


def _gpu_time(contenders, x, backward, steps=5):
    """Summed GPU kernel time per call (us) of each contender and of its Triton kernels."""
    out = {}
    for cname, fn in contenders.items():
        evs = _profile_kernels(fn, x, backward, steps)
        out[f"{cname}_gpu_us"] = sum(e[2] for e in evs) / steps
        out[f"{cname}_kernels"] = len(evs) / steps
    return out


COPY_GBPS = 3000  # the H100's measured device-to-device copy bandwidth (issue 16)


def _fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def print_table(rows, use_torch):
    head = ["workload", "mode", "eager ms", "kiln ms", "kiln x", "kiln compile s", "kiln maxdiff"]
    if use_torch:
        head += ["torch ms", "torch x", "kiln/torch", "torch compile s", "torch maxdiff"]
    lines = [head]
    for r in rows:
        e, k, t = r.get("eager_ms"), r.get("torchkiln_ms"), r.get("torch_ms")
        line = [r["workload"], r["mode"], _fmt(e, ".3f"), _fmt(k, ".3f"),
                _fmt(e / k if k else None, ".2f"), _fmt(r.get("torchkiln_compile_s"), ".2f"),
                _fmt(r.get("torchkiln_maxdiff"), ".1e")]
        if use_torch:
            line += [_fmt(t, ".3f"), _fmt(e / t if t else None, ".2f"), _fmt(k / t if k and t else None, ".2f"),
                     _fmt(r.get("torch_compile_s"), ".2f"), _fmt(r.get("torch_maxdiff"), ".1e")]
        lines.append(line)
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    for i, line in enumerate(lines):
        print("  ".join(str(c).rjust(w) for c, w in zip(line, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for r in rows:
        for key in ("torchkiln_error", "torch_error"):
            if key in r:
                print(f"{r['workload']} {r['mode']}: {key[:-6]} failed: {r[key]}")
    for r in rows:
        if r.get("kiln_kernels"):
            gpu = "  ".join(f"{c} {r[c + '_gpu_us']:.1f} us/{r[c + '_kernels']:.0f} kernels"
                            for c in ("eager", "torchkiln", "torch") if c + "_gpu_us" in r)
            print(f"{r['workload']} {r['mode']}: GPU time per call {gpu}")
            for k in r["kiln_kernels"]:
                if "error" in k:
                    print(f"    {k['error']}")
                else:
                    print(f"    {k['kernel']:28s} {k['us']:8.1f} us {k['MB']:8.2f} MB {k['GBps']:7.0f} GB/s"
                          f" ({k['GBps'] / COPY_GBPS:.0%} of {COPY_GBPS} GB/s)")
    speedups = [r["eager_ms"] / r["torchkiln_ms"] for r in rows if r.get("torchkiln_ms")]
    if speedups:
        print(f"torchkiln geomean speedup over eager: {math.exp(sum(map(math.log, speedups)) / len(speedups)):.2f}x")
    if use_torch:
        ratios = [r["torchkiln_ms"] / r["torch_ms"] for r in rows if r.get("torchkiln_ms") and r.get("torch_ms")]
        if ratios:
            print(f"torchkiln/torch.compile time, geomean: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (CPU); default 1")
    p.add_argument("--reps", type=int, default=None, help="timed calls per measurement")
    p.add_argument("--only", action="append", help="run only this workload (repeatable)")
    p.add_argument("--mode", choices=["fwd", "fwd+bwd", "both"], default="both")
    p.add_argument("--no-torch", action="store_true", help="skip the torch.compile peer")
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    reps = args.reps or (50 if args.device == "cuda" else 30)
    use_torch = not args.no_torch
    print(f"device={args.device} threads={torch.get_num_threads()} torch={torch.__version__} reps={reps}")
    warm_up_processes(args.device, use_torch)
    modes = {"fwd": [False], "fwd+bwd": [True], "both": [False, True]}[args.mode]
    rows = []
    for name, (make_model, make_input) in workloads(args.device).items():
        if args.only and name not in args.only:
            continue
        for backward in modes:
            row = run_one(name, make_model, make_input, backward, args.device, reps, use_torch)
            rows.append(row)
            # one line per row as it completes, so a run cut short still reports something
            print("  " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                  flush=True)
    print_table(rows, use_torch)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "threads": torch.get_num_threads(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
