"""DDP under torchkiln.compile on 2 gloo processes: losses and gradients equal eager DDP's.

Each spawned run groups several checks (a spawn costs two torch imports).
"""
from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import torchkiln
from torchkiln.testing import CompileCounterWithBackend

from _spawn import assert_close, device, run_spawned


class MLP(torch.nn.Module):
    """``regions``: a ``no_grad`` gate and an ``autocast(enabled=False)`` region over
    layers 1-2, which a one-layer bucket cap cuts (as transformers' rotary embedding)."""

    def __init__(self, width: int = 16, depth: int = 4, unused: bool = False, regions: bool = False) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.head = torch.nn.Linear(width, 4)
        self.unused = torch.nn.Linear(width, width) if unused else None
        self.regions = regions

    def forward(self, x):
        if not self.regions:
            for layer in self.layers:
                x = torch.relu(layer(x))
            return self.head(x)
        x = torch.relu(self.layers[0](x))
        with torch.no_grad():
            gate = torch.sigmoid(x.sum(1, keepdim=True))
        with torch.autocast(x.device.type, enabled=False):
            x = torch.relu(self.layers[1](x)) * gate
            x = torch.relu(self.layers[2](x))
        return self.head(torch.relu(self.layers[3](x)))


def make(**kw) -> MLP:
    """The MLP with seed-0 weights, on this rank's device (cuda:<rank> under NCCL)."""
    torch.manual_seed(0)
    return MLP(**kw).to(device())


def train(model, batches, steps: int = 2, no_sync_steps: int = 0):
    """Loss per step and the gradients after the last step; SGD updates in between."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        for x in batches[:no_sync_steps]:
            with model.no_sync():
                model(x).square().mean().backward()
        loss = model(batches[step % len(batches)]).square().mean()
        loss.backward()
        losses.append(loss.detach())
        grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
        opt.step()
    return losses, grads


def check_same(compiled_run, eager_run, what: str) -> None:
    (losses, grads), (ref_losses, ref_grads) = compiled_run, eager_run
    assert_close(torch.stack(losses), torch.stack(ref_losses), f"{what}: losses")
    assert len(grads) == len(ref_grads)
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        assert (g is None) == (r is None), f"{what}: grad {i} is {g} where eager's is {r}"
        if r is not None:
            assert_close(g, r, f"{what}: grad {i}")


def _ddp_checks(rank: int, world: int) -> None:
    torch.manual_seed(rank)
    batches = [torch.randn(8, 16, device=device()) for _ in range(2)]
    eager = train(DDP(make()), batches)

    # both wrap orders, default bucket size (one bucket: no split)
    torchkiln.reset()
    counter = CompileCounterWithBackend("aot_eager")
    check_same(train(torchkiln.compile(DDP(make()), backend=counter), batches), eager, "compile(DDP(m))")
    assert counter.frame_count == 1, counter.frame_count
    torchkiln.reset()
    counter = CompileCounterWithBackend("aot_eager")
    check_same(train(DDP(torchkiln.compile(make(), backend=counter)), batches), eager, "DDP(compile(m))")
    assert counter.frame_count == 1, counter.frame_count

    # small buckets: the graph is split into one piece per bucket (3 or more)
    cap = 16 * 17 * 4 / 2**20  # one 16x16 layer per bucket
    eager_small = train(DDP(make(), bucket_cap_mb=cap), batches)
    for order in ("outer", "inner"):
        torchkiln.reset()
        counter = CompileCounterWithBackend("aot_eager")
        model = (torchkiln.compile(DDP(make(), bucket_cap_mb=cap), backend=counter) if order == "outer"
                 else DDP(torchkiln.compile(make(), backend=counter), bucket_cap_mb=cap))
        check_same(train(model, batches), eager_small, f"split {order}")
        assert counter.frame_count >= 3, f"{order}: {counter.frame_count} pieces"
    # grad-mode and autocast regions cut by the split: each piece re-enters its region
    eager_regions = train(DDP(make(regions=True), bucket_cap_mb=cap), batches)
    torchkiln.reset()
    counter = CompileCounterWithBackend("aot_eager")
    check_same(train(torchkiln.compile(DDP(make(regions=True), bucket_cap_mb=cap), backend=counter), batches),
               eager_regions, "split with grad-mode/autocast regions")
    assert counter.frame_count >= 3 and torchkiln.counters["ddp"]["split_graphs"] == 1, counter.frame_count
    # optimize_ddp=False: one graph
    torchkiln.reset()
    counter = CompileCounterWithBackend("aot_eager")
    with torchkiln.config.patch(optimize_ddp=False):
        model = torchkiln.compile(DDP(make(), bucket_cap_mb=cap), backend=counter)
        check_same(train(model, batches), eager_small, "optimize_ddp=False")
    assert counter.frame_count == 1, counter.frame_count

    # no_sync: gradients accumulate locally for one micro-batch, then sync
    eager_ns = train(DDP(make(), bucket_cap_mb=cap), batches, no_sync_steps=1)
    torchkiln.reset()
    model = torchkiln.compile(DDP(make(), bucket_cap_mb=cap), backend="aot_eager")
    check_same(train(model, batches, no_sync_steps=1), eager_ns, "no_sync")

    # unused parameters: a layer the forward never calls
    eager_unused = train(DDP(make(unused=True), find_unused_parameters=True, bucket_cap_mb=cap), batches)
    for order in ("outer", "inner"):
        torchkiln.reset()
        model = (torchkiln.compile(DDP(make(unused=True), find_unused_parameters=True, bucket_cap_mb=cap),
                                   backend="aot_eager") if order == "outer"
                 else DDP(torchkiln.compile(make(unused=True), backend="aot_eager"),
                          find_unused_parameters=True, bucket_cap_mb=cap))
        check_same(train(model, batches), eager_unused, f"unused {order}")


def _ddp_default_backend(rank: int, world: int) -> None:
    torch.manual_seed(rank)
    batches = [torch.randn(8, 16, device=device()) for _ in range(2)]
    cap = 16 * 17 * 4 / 2**20
    eager = train(DDP(make(), bucket_cap_mb=cap), batches)
    torchkiln.reset()
    check_same(train(torchkiln.compile(DDP(make(), bucket_cap_mb=cap)), batches), eager, "inductor split")


def test_ddp_aot_eager():
    run_spawned(_ddp_checks)


def test_ddp_default_backend():
    run_spawned(_ddp_default_backend)


def test_ddp_graphs_log_names_the_buckets(tmp_path):
    """One process (world size 1): the split is logged under TORCHKILN_LOGS=ddp_graphs."""
    import logging

    import torch.distributed as dist
    from torchkiln.utils.logging import get_artifact_logger

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = get_artifact_logger("ddp_graphs")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        torchkiln.reset()
        counter = CompileCounterWithBackend("aot_eager")
        torch.manual_seed(0)  # on the CPU whatever the backend switch says: this is a gloo group
        model = torchkiln.compile(DDP(MLP(), bucket_cap_mb=16 * 17 * 4 / 2**20), backend=counter)
        model(torch.randn(2, 16)).sum().backward()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        dist.destroy_process_group()
        torchkiln.reset()
    text = "\n".join(records)
    assert "DDPOptimizer: 4 bucket(s)" in text, text
    assert "head.weight" in text, text
    assert "---submod_3 graph---" in text, text
    assert counter.frame_count == 4
