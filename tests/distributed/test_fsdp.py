"""FSDP2 (fully_shard per block) under torchkiln.compile on 2 gloo processes, without
and with compiled autograd.

The FSDP2 hooks (all-gather before a block, free after, reduce-scatter in backward)
run eagerly between graphs, as under torch.compile in torch 2.11-2.15 (the hooks'
wrapper differs between versions); the blocks' math is compiled.  Losses and local
gradient shards equal the uncompiled run's.  With compiled autograd the backward is
captured once for all steps, FSDP2's backward hooks (unshard, reduce-scatter, the
final callback) run from it at runtime, and the gradients still equal eager's.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import torchkiln
from torchkiln.testing import CompileCounterWithBackend

from _spawn import NCCL, assert_close, device, run_spawned


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(16, 32)
        self.l2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        return x + self.l2(torch.relu(self.l1(x)))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(2))
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make() -> Net:
    """Net sharded per block over a mesh of all ranks: on the CPU (gloo), or on the GPUs
    under NCCL.  The mesh is explicit: FSDP2's default mesh is on the accelerator where
    there is one (a GPU machine put the parameters on cuda:0, beside CPU inputs and gloo,
    and the test failed there)."""
    torch.manual_seed(0)
    model = Net().to(device())
    mesh = init_device_mesh("cuda" if NCCL else "cpu", (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def train(model, batches):
    """Losses and, per step, every parameter's local gradient shard."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads = [], []
    for x in batches:
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.to_local().clone() for p in model.parameters()])
        opt.step()
    return losses, grads


def check_same(losses, grads, ref_losses, ref_grads, what: str) -> None:
    assert_close(torch.stack(losses), torch.stack(ref_losses), f"{what} losses")
    for step, (gs, rs) in enumerate(zip(grads, ref_grads)):
        for i, (g, r) in enumerate(zip(gs, rs)):
            assert_close(g, r, f"{what} step {step} grad shard {i}")


def _fsdp_checks(rank: int, world: int) -> None:
    torch.manual_seed(rank)
    batches = [torch.randn(8, 16, device=device()) for _ in range(3)]
    ref_losses, ref_grads = train(make(), batches)
    torchkiln.reset()
    counter = CompileCounterWithBackend("aot_eager")
    losses, grads = train(torchkiln.compile(make(), backend=counter), batches)
    check_same(losses, grads, ref_losses, ref_grads, "FSDP2")
    linears = sum(1 for gm in counter.graphs for n in gm.graph.nodes
                  if n.op == "call_function" and n.target is torch._C._nn.linear)
    assert linears >= 3, f"{linears} linear calls captured"
    # the blocks' forward is one graph (both blocks share it), the head another
    assert counter.frame_count >= 2, counter.frame_count
    # each hook is one graph break at the hook (not somewhere inside FSDP's code)
    breaks = torchkiln.counters["graph_break"]
    assert breaks and all("an FSDP2 hook" in reason for reason in breaks), dict(breaks)
    _compiled_autograd_checks(batches, ref_losses, ref_grads)


def _compiled_autograd_checks(batches, ref_losses, ref_grads) -> None:
    torchkiln.reset()
    graphs = []

    def compiler_fn(gm):
        graphs.append(gm)
        return torchkiln.compile(gm, backend="aot_eager")

    model = torchkiln.compile(make(), backend="aot_eager")
    with torchkiln.compiled_autograd.enable(compiler_fn):
        losses, grads = train(model, batches)
    check_same(losses, grads, ref_losses, ref_grads, "FSDP2 under compiled autograd")
    assert torchkiln.counters["compiled_autograd"]["captures"] == 1, dict(torchkiln.counters["compiled_autograd"])
    # the hooks and post-backward Functions are runtime calls of the one captured graph
    targets = [n.target.__name__ for n in graphs[0].graph.nodes if n.op == "call_function"
               and hasattr(n.target, "__name__")]
    assert {"call_hook", "call_backward_opaque", "accumulate_grads"} <= set(targets), sorted(set(targets))


def test_fsdp2():
    run_spawned(_fsdp_checks)
