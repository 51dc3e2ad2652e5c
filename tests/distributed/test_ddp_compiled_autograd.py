"""DDP under torchkiln's compiled autograd on 2 gloo processes: gradients equal eager DDP's.

DDP's C++ reducer cannot run under compiled autograd (the engine refuses its hooks:
"not compatible with C++ DDP Reducer"); torchkiln switches a DDP module it meets to
DDP's Python reducer (per-parameter post-accumulate-grad all-reduce), as torch.compile
does with ``optimize_ddp="python_reducer"`` (distributed/ddp.py).  Each rank trains on
its own batches, so gradients equal eager DDP's only if they were all-reduced.
"""
from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import torchkiln

from _spawn import device, run_spawned
from test_ddp import check_same, make, train


def _compiled_step_train(model, batches, steps: int = 2):
    """``train`` with forward and backward in one function compiled with
    ``config.compiled_autograd``: its backward runs under compiled autograd."""
    def step(x):
        loss = model(x).square().mean()
        loss.backward()
        return loss.detach()

    with torchkiln.config.patch(compiled_autograd=True):
        compiled_step = torchkiln.compile(step, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for i in range(steps):
        opt.zero_grad()
        losses.append(compiled_step(batches[i % len(batches)]))
        grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
        opt.step()
    return losses, grads


def _checks(rank: int, world: int) -> None:
    torch.manual_seed(rank)
    batches = [torch.randn(8, 16, device=device()) for _ in range(2)]
    eager = train(DDP(make()), batches)

    # torchkiln.compile(DDP(m)) in a step compiled with config.compiled_autograd
    torchkiln.reset()
    with torchkiln.config.patch(compiled_autograd=True):
        model = torchkiln.compile(DDP(make()), backend="aot_eager")
    check_same(_compiled_step_train(model, batches), eager, "compile(DDP(m)), compiled autograd")
    assert torchkiln.counters["compiled_autograd"]["captures"] == 1, dict(torchkiln.counters["compiled_autograd"])
    assert model._orig_mod._use_python_reducer

    # DDP(torchkiln.compile(m)) with compiled autograd enabled around the steps, small
    # buckets (no split under the Python reducer), and a no_sync micro-batch
    cap = 16 * 17 * 4 / 2**20
    eager_ns = train(DDP(make(), bucket_cap_mb=cap), batches, no_sync_steps=1)
    torchkiln.reset()
    model = DDP(torchkiln.compile(make(), backend="aot_eager"), bucket_cap_mb=cap)
    with torchkiln.compiled_autograd.enable(torchkiln.compiled_autograd.compiler_fn_for_backend("aot_eager")):
        check_same(train(model, batches, no_sync_steps=1), eager_ns, "DDP(compile(m)), compiled autograd, no_sync")
    assert torchkiln.counters["compiled_autograd"]["captures"] >= 1
    assert model._use_python_reducer


def test_ddp_under_compiled_autograd():
    run_spawned(_checks)
