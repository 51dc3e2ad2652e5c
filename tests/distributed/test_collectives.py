"""Functional collectives captured as graph nodes; in-place collectives are graph breaks."""
from __future__ import annotations

import logging

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln.testing import CompileCounterWithBackend

from _spawn import NCCL, assert_close, device, run_spawned

_ops = torch.ops._c10d_functional


def collectives(x):
    y = funcol.all_reduce(x * 2, "sum", dist.group.WORLD)
    z = funcol.all_gather_tensor(y + 1, 1, dist.group.WORLD)  # [4, 3 * world]
    w = funcol.reduce_scatter_tensor(z * 3, "sum", 0, dist.group.WORLD)  # [4 / world, 3 * world]
    b = funcol.broadcast(x, 1, dist.group.WORLD)
    return w.sin().sum() + funcol.wait_tensor(b).cos().sum() + funcol.all_reduce(x, "max", [0, 1]).sum()


def in_place(x):
    x = x * 2
    dist.all_reduce(x)
    return x + 1


def _collective_checks(rank: int, world: int) -> None:
    torch.manual_seed(rank)
    x = torch.randn(4, 3, device=device())
    expected = collectives(x)
    for backend in ("aot_eager", "inductor"):
        torchkiln.reset()
        counter = CompileCounterWithBackend(backend)
        assert_close(torchkiln.compile(collectives, backend=counter)(x), expected, f"collectives {backend}")
        assert counter.frame_count == 1, f"{backend}: {counter.frame_count} graphs"
        targets = [n.target for n in counter.graphs[0].graph.nodes if n.op == "call_function"]
        for op in (_ops.all_reduce.default, _ops.all_gather_into_tensor.default,
                   _ops.reduce_scatter_tensor.default, _ops.broadcast.default):
            assert op in targets, f"{op} not captured"
        assert targets.count(_ops.wait_tensor.default) == 6

    # dist.all_reduce(t): a graph break with a reason naming the functional alternative
    torchkiln.reset()
    explained = torchkiln.explain(in_place)(x)
    assert explained.graph_break_count == 1, explained.graph_break_count
    reason = str(explained.break_reasons[0])
    assert "in-place collective" in reason and "_functional_collectives.all_reduce" in reason, reason
    torchkiln.reset()
    assert_close(torchkiln.compile(in_place, backend="aot_eager")(x.clone()), in_place(x.clone()), "in-place")

    # codegen: a kernel scheduled between a collective and its wait never takes the
    # storage of the collective's input (read asynchronously until the wait)
    def graph(a, y):
        c = _ops.all_gather_into_tensor.default(a * 2, world, "0")
        b = y.sum(1)  # a reduction over another group: its own kernel, before the wait
        return (_ops.wait_tensor.default(c).sum(0) * b,)

    from torchkiln.codegen.compile_fx import compile_fx_inner

    a, y = torch.randn(8, device=device()), torch.randn(8, 4, device=device())
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("torchkiln.output_code")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        compiled = compile_fx_inner(make_fx(graph)(a, y), [a, y])
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    assert_close(compiled(a, y)[0], graph(a, y)[0], "collective with a kernel before its wait")
    if NCCL:  # the buffer-name checks below read the C++ wrapper's lines; Triton's differ
        return
    code = "\n".join(records)
    lines = code[code.index("def call("):].splitlines()
    collective = next(i for i, line in enumerate(lines) if "(buf0, " in line and "kernel" not in line)
    wait = next(i for i, line in enumerate(lines) if i > collective and "kernel" not in line and "= _c" in line)
    assert not any("= buf0; del buf0" in line for line in lines[collective:wait]), "\n".join(lines)


def test_collectives():
    run_spawned(_collective_checks)
