"""Mixture-of-experts benchmark (not a test): data-dependent shapes in one graph or many.

A top-k routed MoE layer (``torchkiln.bench.models.moe.MoE``, the suite's ``moe``: 8
experts, top-2, d=256, hidden=512, 512 tokens, float32, CPU, ``torch.set_num_threads(1)``):
routing weights from a softmax gate, per-expert token counts from ``bincount`` turned into split sizes with ``.tolist()``, a loop over the
experts (gather, two matmuls, ``index_add``).  Compiled with and without
``capture_scalar_outputs`` + ``capture_dynamic_output_shape_ops``:

* graphs: how many graphs capture made (torchkiln's ``counters["stats"]["unique_graphs"]``,
  torch.compile's ``torch._dynamo.utils.counters`` for the peer) for the first inference
  call, and after the training step and 8 inference calls on other inputs (other token
  counts per expert: without the settings the counts are specialised, so recompiles);
* steady-state time of an inference call and of a training step (forward, ``.pow(2).sum()``,
  backward), eager / torchkiln / torch.compile side by side in this one process, timed in
  interleaved rounds (every variant once per round; the median per variant), with ratios
  to eager.  Each variant compiles its own copy of the model (a ``forward`` code object of
  its own, so the capture caches do not mix) and runs every call under its settings.

Run: ``python benchmarks/moe_bench.py [--device cuda] [--repeats N] [--tokens N]``.  On
CUDA every round ends with ``torch.cuda.synchronize()``; the token count stays 512 unless
given (the suite's ``moe`` workload uses 8192 on CUDA).
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time
import types
import warnings

import torch

import torchkiln
from torchkiln.bench.models.moe import MoE


SETTINGS = dict(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True)


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _own_copy(model):
    """A deep copy of ``model`` whose ``forward`` has a code object of its own: capture
    caches (torchkiln's and torch.compile's) are per code object, so each variant keeps
    its own compiled entries and all can be timed side by side in this process."""
    fwd = type(model).forward
    cls = type(type(model).__name__, (type(model),), {
        "forward": types.FunctionType(fwd.__code__.replace(), fwd.__globals__, fwd.__name__, fwd.__defaults__,
                                      fwd.__closure__)})
    twin = copy.deepcopy(model)
    twin.__class__ = cls
    return twin


def variants(model):
    """name -> (callable model, graph counter): each runs under its own settings."""
    import torch._dynamo  # the peer, for comparison only

    def kiln(settings):
        compiled = torchkiln.compile(_own_copy(model))

        def call(x):
            with torchkiln.config.patch(**settings):
                return compiled(x)
        return call, compiled, lambda: torchkiln.counters["stats"]["unique_graphs"]

    def peer(settings):
        compiled = torch.compile(_own_copy(model))

        def call(x):
            with torch._dynamo.config.patch(**settings):
                return compiled(x)
        return call, compiled, lambda: torch._dynamo.utils.counters["stats"]["unique_graphs"]

    return {
        "torchkiln, settings on": kiln(SETTINGS),
        "torchkiln, settings off": kiln({}),
        "torch.compile, settings on": peer(SETTINGS),
        "torch.compile, settings off": peer({}),
    }


def interleaved(fns: dict, device, repeats, inner=3) -> dict:
    """Median seconds per call of each function, timed in rounds (every function once
    per round, ``inner`` calls each), so that load that comes and goes on a shared
    machine hits every variant alike."""
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            _sync(device)
            samples[name].append((time.perf_counter() - start) / inner)
    return {name: statistics.median(v) for name, v in samples.items()}


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

    def step(m, params):
        def run():
            for p in params:
                p.grad = None
            m(x).pow(2).sum().backward()
        return run

    def infer(m):
        def run():
            with torch.no_grad():
                m(x)
        return run

    warnings.simplefilter("ignore")
    calls = {"eager": (model, model, lambda: "-")} | variants(model)
    counts = {}
    with torch.no_grad():
        ref = model(x)
    for name, (call, module, graphs) in calls.items():
        before = graphs()
        torch.testing.assert_close(call(x).detach(), ref, rtol=1e-4, atol=1e-4)  # compiles
        counts[name] = graphs() if before == "-" else graphs() - before
        step(call, list(module.parameters()))()  # compiles the backward
    inf = interleaved({n: infer(c) for n, (c, _, _) in calls.items()}, device, args.repeats)
    train = interleaved({n: step(c, list(m.parameters())) for n, (c, m, _) in calls.items()}, device, args.repeats)
    later = {}
    for name, (call, _, graphs) in calls.items():  # other routings: the same graphs, or recompiles?
        before = graphs()
        with torch.no_grad():
            for _ in range(8):
                call(torch.randn_like(x))
        later[name] = graphs() if before == "-" else counts[name] + graphs() - before
    where = torch.cuda.get_device_name() if device == "cuda" else "cpu, 1 thread"
    print(f"MoE: 8 experts, top-2, d=256, hidden=512, {args.tokens} tokens, float32, {where}, "
          f"timed interleaved ({args.repeats} rounds)")
    print("graphs: after the first inference call; graphs+8: after training and 8 inference calls on other inputs")
    print(f"{'variant':30s} {'graphs':>6s} {'infer ms':>9s} {'vs eager':>8s} {'train ms':>9s} {'vs eager':>8s} {'graphs+8':>8s}")
    for name in calls:
        print(f"{name:30s} {str(counts[name]):>6s} {inf[name] * 1e3:9.2f} {inf['eager'] / inf[name]:7.2f}x "
              f"{train[name] * 1e3:9.2f} {train['eager'] / train[name]:7.2f}x {str(later[name]):>8s}")


if __name__ == "__main__":
    main()
