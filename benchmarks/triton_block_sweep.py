"""Block-size sweep of generated Triton reductions and pointwise kernels (GPU).

    python3 benchmarks/triton_block_sweep.py [OUTDIR] [name,name...]

Compiles small functions (add+LayerNorm, RMSNorm, softmax, logsumexp, column sums, batch-
norm sums, a full sum, GELU, add) with torchkiln under each forced launch config
(``runtime.reduction_config`` / ``pointwise_config`` patched) and times the kernels by
replaying a CUDA graph of 20 calls (no launch overhead in the figure), beside
torch.compile's.  Column/batch-norm/full sums also run with split reductions on and off.
The heuristics in codegen/triton/runtime.py and split_reduction.py come from its H100 run.
Data fits in the H100's 50 MB L2 for the small cases, so GB/s may exceed HBM bandwidth.
"""
import os
import sys

import torch

import torchkiln
from torchkiln.codegen import config as cg
from torchkiln.codegen.triton import runtime

cg.fx_graph_cache = False
dev = os.environ.get("DEV", "cuda")
real_cfg, real_pw = runtime.reduction_config, runtime.pointwise_config
REPS = 20


def gbench(fn, args):
    """us per call, from replaying a CUDA graph of REPS calls."""
    if dev == "cpu":
        import time
        t0 = time.perf_counter(); fn(*args); return (time.perf_counter() - t0) * 1e6
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn(*args)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(REPS):
                fn(*args)
        g.replay(); torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(10):
            g.replay()
        b.record(); torch.cuda.synchronize()
        return a.elapsed_time(b) / (10 * REPS) * 1e3


def kiln(fn, args, forced=None, pw=None):
    torchkiln.reset()
    if forced is not None:
        runtime.reduction_config = lambda x, r, i, outer=False: forced
    if pw is not None:
        runtime.pointwise_config = lambda x, i: pw
    try:
        c = torchkiln.compile(fn)
        with torch.no_grad():
            out, ref = c(*args), fn(*args)
        outs = out if isinstance(out, tuple) else (out,)
        refs = ref if isinstance(ref, tuple) else (ref,)
        ok = all(torch.allclose(o, r, atol=1e-3, rtol=1e-3) for o, r in zip(outs, refs))
        return gbench(c, args), ok
    except Exception as e:
        return float("nan"), f"err {type(e).__name__}: {str(e)[:80]}"
    finally:
        runtime.reduction_config, runtime.pointwise_config = real_cfg, real_pw


def peer(fn, args):
    torch._dynamo.reset()
    try:
        return gbench(torch.compile(fn), args)
    except Exception as e:
        return float("nan")


lines = []


def emit(s):
    lines.append(s)
    print(s, flush=True)


ln768, ln1024 = torch.nn.LayerNorm(768).to(dev), torch.nn.LayerNorm(1024).to(dev)
t = lambda *s: torch.randn(*s, device=dev)
x768, r768, x1024, att, att2, logits, big = t(4096, 768), t(4096, 768), t(4096, 1024), t(49152, 256), t(8192, 128), t(4096, 2048), t(8192, 8192)
inner = {
    "add_layernorm 4096x768": (lambda x, r: ln768(x + r), (x768, r768), 768),
    "rmsnorm 4096x1024": (lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), (x1024,), 1024),
    "softmax 4096x1024": (lambda a: torch.softmax(a, -1), (x1024,), 1024),  # codegen_bench's softmax
    "layernorm_gelu 4096x1024": (lambda x: torch.nn.functional.gelu(ln1024(x)), (x1024,), 1024),
    "softmax 49152x256": (lambda a: torch.softmax(a * 0.125, -1), (att,), 256),
    "softmax 8192x128": (lambda a: torch.softmax(a, -1), (att2,), 128),
    "logsumexp 4096x2048": (lambda l: torch.logsumexp(l, -1), (logits,), 2048),
    "softmax 8192x8192": (lambda l: torch.softmax(l, -1), (big,), 8192),
}
SEL = sys.argv[2].split(",") if len(sys.argv) > 2 else None
for name, (fn, args, rn) in inner.items():
    if SEL and not any(s in name for s in SEL):
        continue
    d, ok = kiln(fn, args)
    p = peer(fn, args)
    nbytes = sum(a.numel() * 4 for a in args) + args[0].numel() * 4
    emit(f"== {name}: kiln default {d:.1f} us ({ok}, {real_cfg(args[0].numel() // rn, rn, False)}) peer {p:.1f} us"
         f"  [kiln {nbytes / d / 1e3:.0f} GB/s, peer {nbytes / p / 1e3:.0f} GB/s]")
    rb = runtime.next_power_of_2(rn)
    res = []
    cands = []
    if rb <= 4096:
        cands += [(True, x, rb, w) for x in (1, 2, 4, 8, 16) for w in (2, 4, 8, 16) if x * rb <= 8192 and 32 * w <= x * rb]
    if rn > 512:
        cands += [(False, x, r, w) for r in (512, 1024, 2048) if r < rb and r * 8 >= rb for x in (1, 2, 4) for w in (4, 8, 16) if x * r <= 8192]
    for c in cands:
        tt, ok = kiln(fn, args, c)
        res.append((tt, c, ok))
    res.sort(key=lambda v: (v[0] != v[0], v[0]))
    emit("   top: " + "; ".join(f"{'P' if c[0] else 'L'} X{c[1]} R{c[2]} w{c[3]} {tt:.1f}" for tt, c, ok in res[:6]))
    emit("   worst: " + "; ".join(f"{'P' if c[0] else 'L'} X{c[1]} R{c[2]} w{c[3]} {tt:.1f}" for tt, c, ok in res[-3:]))
    bad = [c for tt, c, ok in res if ok is not True]
    if bad:
        emit(f"   not ok: {bad[:4]} {[ok for tt, c, ok in res if ok is not True][:1]}")

# outer reductions and split on/off
bn = t(256, 64, 32, 32)
g32k = t(32768, 768)
outer = {
    "colsum 4096x768": (lambda g: g.sum(0), (x768,)),
    "colsum 32768x768": (lambda g: g.sum(0), (g32k,)),
    "bn sums 256x64x32x32": (lambda b: (b.sum((0, 2, 3)), (b * b).sum((0, 2, 3))), (bn,)),
    "full sum 4096x2048": (lambda l: l.sum(), (logits,)),
}
for name, (fn, args) in outer.items():
    if SEL and not any(s in name for s in SEL):
        continue
    cg.split_reductions = True
    t1, ok1 = kiln(fn, args)
    cg.split_reductions = False
    t0, ok0 = kiln(fn, args)
    res = []
    for c in [(False, x, r, w) for x in (32, 64, 128) for r in (8, 16, 32) for w in (4, 8)]:
        runtime.reduction_config = lambda x, r, i, outer=False, c=c: c if outer else real_cfg(x, r, i, outer)
        tt, ok = kiln(fn, args)
        res.append((tt, c))
    runtime.reduction_config = real_cfg
    res.sort(key=lambda v: (v[0] != v[0], v[0]))
    cg.split_reductions = True
    p = peer(fn, args)
    emit(f"== {name}: split {t1:.1f} us ({ok1})  whole {t0:.1f} us ({ok0})  peer {p:.1f} us")
    emit("   whole, outer cfg top: " + "; ".join(f"X{c[1]} R{c[2]} w{c[3]} {tt:.1f}" for tt, c in res[:5]))

# pointwise
gx = t(16 * 1024 * 1024)
pw = {"gelu 16M": (lambda a: torch.nn.functional.gelu(a), (gx,)), "add 4096x768": (lambda a, b: a + b, (x768, r768))}
for name, (fn, args) in pw.items():
    if SEL and not any(s in name for s in SEL):
        continue
    d, _ = kiln(fn, args)
    res = [(kiln(fn, args, pw=(x, w))[0], x, w) for x in (512, 1024, 2048, 4096) for w in (4, 8)]
    res.sort(key=lambda v: (v[0] != v[0], v[0]))
    emit(f"== {name}: kiln default {d:.1f} us peer {peer(fn, args):.1f} us; top " + "; ".join(f"X{x} w{w} {tt:.1f}" for tt, x, w in res[:5]))
with open(os.path.join(sys.argv[1] if len(sys.argv) > 1 else "/tmp", "sweep2.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
