"""Accuracy of float reductions over long dims (run by hand; not a test): torchkiln vs
eager vs torch.compile, each measured against the op run in float64.

Per case (an op over a shape and dtype), the error printed is the result minus the
float64 result, at the element where it is largest in magnitude (``rel``: relative to
the float64 result, for softmax whose values are small); ``kiln/eager`` is the ratio of
the magnitudes.  Inputs are seeded, so a run is reproducible.

    python benchmarks/reduction_accuracy.py [--backend cpp|triton] [--scale N]
                                            [--only SUBSTRING] [--no-torch]

``--backend triton`` compiles torchkiln's graphs to Triton under ``TRITON_INTERPRET=1``
(set before importing triton; slow: use ``--scale 20``), with the interpreter's block
sizes or (``--gpu-blocks``) a GPU's; ``--split`` splits reductions as on CUDA.  ``--scale`` is log2 of the long
dim (24 by default: 2**24 rand values sum to ~8e6, where a float32 sum's rounding
step is 0.5).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cases(n: int) -> list:
    """(name, function, input factory, dtype, relative?)."""
    import torch

    def rand(*shape, dtype=torch.float32, normal=False, seed=0):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(*shape, generator=g) if normal else torch.rand(*shape, generator=g)
        return x.to(dtype)

    m = n // 16  # the long dim of the 16-wide and 3-wide shapes, kept near n elements
    out = [
        ("sum all (n,)", lambda x: x.sum(), lambda: rand(n)),
        ("sum rows (2,n).sum(1)", lambda x: x.sum(1), lambda: rand(2, n)),
        ("sum multi (2,n,3).sum((1,2))", lambda x: x.sum((1, 2)), lambda: rand(2, n, 3)),
        ("sum multi (n/16,16).sum()", lambda x: x.sum(), lambda: rand(m, 16)),
        ("sum multi (3,n,2).sum((0,1))", lambda x: x.sum((0, 1)), lambda: rand(3, n, 2)),
        ("sum cols (n,2).sum(0)", lambda x: x.sum(0), lambda: rand(n, 2)),
        ("sum cols (n/16,256).sum(0)", lambda x: x.sum(0), lambda: rand(m, 256)),
        ("sum cols (n/4,2,3).sum((0,1))", lambda x: x.sum((0, 1)), lambda: rand(n // 4, 2, 3)),
        ("mean rows (2,n).mean(1)", lambda x: x.mean(1), lambda: rand(2, n)),
        ("mean multi (2,n,3).mean((1,2))", lambda x: x.mean((1, 2)), lambda: rand(2, n, 3)),
        ("mean cols (n,2).mean(0)", lambda x: x.mean(0), lambda: rand(n, 2)),
        ("var rows (2,n).var(1)", lambda x: x.var(1), lambda: rand(2, n) + 10),
        ("var multi (2,n,3).var((1,2))", lambda x: x.var((1, 2)), lambda: rand(2, n, 3) + 10),
        ("var multi (2,n/16,16).var((1,2))", lambda x: x.var((1, 2)), lambda: rand(2, m, 16) + 10),
        ("var cols (n,2).var(0)", lambda x: x.var(0), lambda: rand(n, 2) + 10),
        ("std rows (2,n).std(1)", lambda x: x.std(1), lambda: rand(2, n)),
        ("var_mean mean (2,n)", lambda x: torch.var_mean(x, 1)[1], lambda: rand(2, n) + 10),
        ("batch_norm stats (n/16,4,4)", lambda x: torch.var_mean(x, (0, 2))[0], lambda: rand(m, 4, 4) + 10),
        ("norm rows (2,n).norm(dim=1)", lambda x: x.norm(dim=1), lambda: rand(2, n)),
        ("norm cols (n,2).norm(dim=0)", lambda x: x.norm(dim=0), lambda: rand(n, 2)),
        ("logsumexp rows (2,n)", lambda x: x.logsumexp(1), lambda: rand(2, n, normal=True)),
        ("softmax rows (2,n) [rel]", lambda x: x.softmax(1), lambda: rand(2, n, normal=True), True),
        ("layer_norm (2,n)", lambda x: torch.nn.functional.layer_norm(x, x.shape[1:]), lambda: rand(2, n) + 10),
        ("f16 sum (n,)", lambda x: x.sum(), lambda: rand(n, dtype=torch.float16, normal=True)),
        ("f16 sum to f32 (2,n,3).sum((1,2))", lambda x: x.sum((1, 2), dtype=torch.float32),
         lambda: rand(2, n, 3, dtype=torch.float16)),
        ("bf16 sum to f32 (n,2).sum(0)", lambda x: x.sum(0, dtype=torch.float32), lambda: rand(n, 2, dtype=torch.bfloat16)),
        ("f16 mean rows (2,n)", lambda x: x.mean(1), lambda: rand(2, n, dtype=torch.float16)),
        ("bf16 sum cols (n,2)", lambda x: x.sum(0), lambda: rand(n, 2, dtype=torch.bfloat16, normal=True)),
        ("bf16 mean multi (2,n,3)", lambda x: x.mean((1, 2)), lambda: rand(2, n, 3, dtype=torch.bfloat16)),
        ("bf16 var rows (2,n)", lambda x: x.var(1), lambda: rand(2, n, dtype=torch.bfloat16)),
        ("sum backward (2,n) grad", None, lambda: rand(2, n)),
    ]
    return [c if len(c) == 4 else c + (False,) for c in out]


def _error(result, ref, relative: bool) -> float:
    import torch

    d = result.double() - ref
    if relative:
        d = d / ref.abs().clamp_min(torch.finfo(torch.float64).tiny)
    d = d.flatten()
    i = d.abs().argmax()
    return d[i].item()


def _sum_backward(compile_):
    """The gradient of ``(x.sum(1) * w).mean()``: pointwise (a broadcast of w / 2)."""
    import torch

    def run(x):
        x = x.detach().requires_grad_(True)
        w = torch.tensor([0.3, 0.7], dtype=x.dtype)
        f = compile_(lambda x: (x.sum(1) * w).mean())
        f(x).backward()
        return x.grad

    return run


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="cpp", choices=["cpp", "triton"])
    p.add_argument("--scale", type=int, default=24)
    p.add_argument("--only", action="append")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--dynamic", action="store_true", help="compile with dynamic=True (symbolic sizes)")
    p.add_argument("--gpu-blocks", action="store_true",
                   help="triton: the block sizes a GPU gets (runtime.reduction_config), not the interpreter's")
    p.add_argument("--split", action="store_true", help="split reductions on the CPU too (as on CUDA)")
    args = p.parse_args(argv)
    if args.backend == "triton":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    import torchkiln
    from torchkiln.codegen.config import config

    config.cpu_backend = args.backend
    if args.gpu_blocks:
        from torchkiln.codegen.triton import runtime

        gpu_config = runtime.reduction_config
        runtime.reduction_config = lambda x, r, interpret, outer=False: gpu_config(x, r, False, outer)
    if args.split:
        from torchkiln.codegen import split_reduction

        split_reduction.enabled = lambda device: True
    torch.set_num_threads(1)
    compilers = {"kiln": lambda f: torchkiln.compile(f, dynamic=args.dynamic)}
    if not args.no_torch:
        import torch._dynamo

        torch._dynamo.config.cache_size_limit = 256
        compilers["tc"] = lambda f: torch.compile(f, dynamic=args.dynamic)
    head = f"{'case':<36} {'eager':>10} " + " ".join(f"{c:>10}" for c in compilers) + f" {'kiln/eager':>10} {'s':>5}"
    print(head)
    print("-" * len(head))
    for name, fn, make, relative in cases(1 << args.scale):
        if args.only and not any(o in name for o in args.only):
            continue
        t0 = time.perf_counter()
        x = make()
        if fn is None:  # the backward case
            w = torch.tensor([0.3, 0.7], dtype=torch.float64)
            ref = (w / 2)[:, None].expand_as(x)
            results = {"eager": _sum_backward(lambda f: f)(x)}
            results.update({c: _sum_backward(comp)(x) for c, comp in compilers.items()})
        else:
            ref = fn(x.double())
            results = {"eager": fn(x)}
            for c, comp in compilers.items():
                try:
                    results[c] = comp(lambda t: fn(t))(x)
                except Exception as e:  # reported, not fatal
                    print(f"{name}: {c} failed: {type(e).__name__}: {str(e)[:200]}")
        errs = {c: _error(r, ref, relative) for c, r in results.items()}
        ratio = abs(errs["kiln"]) / abs(errs["eager"]) if errs.get("kiln") is not None and errs["eager"] else float("nan")
        fmt = (lambda v: f"{v:>10.2e}") if relative or max(abs(v) for v in errs.values()) < 1e-2 else (lambda v: f"{v:>10.3g}")
        print(f"{name:<36} {fmt(errs['eager'])} " + " ".join(fmt(errs[c]) if c in errs else f"{'-':>10}" for c in compilers)
              + f" {ratio:>10.2f} {time.perf_counter() - t0:>5.1f}", flush=True)
        torchkiln.reset()


if __name__ == "__main__":
    main()
