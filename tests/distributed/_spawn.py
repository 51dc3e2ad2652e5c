"""Run a test body on 2 processes: gloo on CPU over loopback (the default, CI), or NCCL
on 2 GPUs with ``TORCHKILN_DIST_BACKEND=nccl`` (rank r on ``cuda:r``; the bodies put
their models and inputs on :func:`device`)."""
from __future__ import annotations

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BACKEND = os.environ.get("TORCHKILN_DIST_BACKEND", "gloo")
NCCL = BACKEND == "nccl"


def device() -> torch.device:
    """This rank's device: ``cuda:<rank>`` under NCCL, else the CPU."""
    return torch.device("cuda", dist.get_rank()) if NCCL else torch.device("cpu")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, body, args: tuple) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    if NCCL:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        body(rank, world, *args)
        if NCCL:
            torch.cuda.synchronize()
    finally:
        dist.destroy_process_group()
    # The body passed. Leave without running C++ static destructors: with gloo and
    # functional collectives, torch 2.13 sometimes aborts the process at exit
    # ("terminate called without an active exception", no Python frame on the stack),
    # which mp.spawn reports as a failure of a test whose checks all passed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_spawned(body, *args, world: int = 2) -> None:
    """``body(rank, world, *args)`` on ``world`` processes; a failure in any one raises here."""
    if NCCL and torch.cuda.device_count() < world:
        import pytest

        pytest.skip(f"TORCHKILN_DIST_BACKEND=nccl needs {world} GPUs, {torch.cuda.device_count()} found")
    mp.spawn(_entry, args=(world, free_port(), body, args), nprocs=world, join=True)


def assert_close(actual, expected, what: str, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    if NCCL:  # TF32 is off by default, but GPU reductions reorder sums: allow a little more
        atol, rtol = max(atol, 1e-4), max(rtol, 1e-3)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")
