"""Mixture-of-experts benchmark (not a test): data-dependent shapes in one graph or many.

A top-k routed MoE layer (``torchkiln.bench.models.moe.MoE``, the suite's ``moe``: 8
experts, top-2, d=256, hidden=512, 512 tokens, float32, CPU, ``torch.set_num_threads(1)``): routing weights from a softmax gate, per-expert
token counts from ``bincount`` turned into split sizes with ``.tolist()``, a loop over the
experts (gather, two matmuls, ``index_add``).  Compiled with and without
``capture_scalar_outputs`` + ``capture_dynamic_output_shape_ops``:

* graphs: how many graphs capture made (torchkiln's ``counters["stats"]["unique_graphs"]``,
  torch.compile's ``torch._dynamo.utils.counters`` for the peer) for the first inference
  call, and after the training step and 8 inference calls on other inputs (other token
  counts per expert: without the settings the counts are specialised, so recompiles);
* steady-state time of an inference call and of a training step (forward, ``.pow(2).sum()``,
  backward), median of repeats, eager / torchkiln / torch.compile side by side in this one
  process, with ratios to eager.

Run: ``python benchmarks/moe_bench.py [--device cuda] [--repeats N]``.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

import torchkiln
from torchkiln.bench.models.moe import MoE


SETTINGS = dict(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True)


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, repeats, inner=5):
    for _ in range(3):
        fn()
    _sync(device)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        _sync(device)
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def variants(model):
    """name -> (make compiled model, graph count after the first call)."""
    import torch._dynamo  # the peer, for comparison only

    def kiln(settings):
        def make():
            torchkiln.reset()
            with torchkiln.config.patch(**settings):
                return torchkiln.compile(model)
        return make, lambda: torchkiln.counters["stats"]["unique_graphs"]

    def peer(settings):
        def make():
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()
            with torch._dynamo.config.patch(**settings):
                return torch.compile(model)
        return make, lambda: torch._dynamo.utils.counters["stats"]["unique_graphs"]

    return {
        "torchkiln, settings on": (*kiln(SETTINGS), SETTINGS, torchkiln.config),
        "torchkiln, settings off": (*kiln({}), {}, torchkiln.config),
        "torch.compile, settings on": (*peer(SETTINGS), SETTINGS, torch._dynamo.config),
        "torch.compile, settings off": (*peer({}), {}, torch._dynamo.config),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--tokens", type=int, default=512)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    device = args.device
    model = MoE().to(device)
    x = torch.randn(args.tokens, 256, device=device)

    def step(m):
        def run():
            m.zero_grad(set_to_none=True)
            m(x).pow(2).sum().backward()
        return run

    def infer(m):
        def run():
            with torch.no_grad():
                m(x)
        return run

    rows = [("eager", "-", timed(infer(model), device, args.repeats), timed(step(model), device, args.repeats), "-")]
    for name, (make, graphs, settings, cfg) in variants(model).items():
        with cfg.patch(**settings), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = make()
            with torch.no_grad():
                ref = model(x)
                torch.testing.assert_close(compiled(x), ref, rtol=1e-4, atol=1e-4)
            count = graphs()
            inf_t = timed(infer(compiled), device, args.repeats)
            step_t = timed(step(compiled), device, args.repeats)
            with torch.no_grad():  # other routings: the same graphs, or recompiles?
                for _ in range(8):
                    compiled(torch.randn_like(x))
            rows.append((name, count, inf_t, step_t, graphs()))
    eager_inf, eager_step = rows[0][2], rows[0][3]
    print(f"MoE: 8 experts, top-2, d=256, hidden=512, {args.tokens} tokens, float32, {device}, 1 thread")
    print("graphs: after the first inference call; graphs+8: after training and 8 inference calls on other inputs")
    print(f"{'variant':30s} {'graphs':>6s} {'infer ms':>9s} {'vs eager':>8s} {'train ms':>9s} {'vs eager':>8s} {'graphs+8':>8s}")
    for name, count, inf, st, later in rows:
        print(f"{name:30s} {str(count):>6s} {inf * 1e3:9.2f} {eager_inf / inf:7.2f}x {st * 1e3:9.2f} {eager_step / st:7.2f}x "
              f"{str(later):>8s}")


if __name__ == "__main__":
    main()
