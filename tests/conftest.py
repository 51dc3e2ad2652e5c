"""Triton's interpreter is process-wide: TRITON_INTERPRET=1 must be set before triton is
first imported (``import torch._dynamo`` imports it, so this sits at the root, before any
test module is collected).  Where there is no GPU, turn it on, so the ``triton`` device
path of tests/codegen runs Triton kernels on CPU tensors; with a GPU, Triton kernels
compile for real and that path is skipped."""
import os

import torch

# The persistent FX graph and AOT autograd caches are on by default for users; the
# suite runs without them (a graph compiled twice must really compile twice, and no
# test may depend on what an earlier run left in ~/.cache).  tests/cache turns them on.
os.environ.setdefault("TORCHKILN_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHKILN_AUTOGRAD_CACHE", "0")

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` (whole sweeps) run only when asked for: ``-m slow`` (or any
    ``-m`` naming it) or ``TORCHKILN_OPINFO_FULL=1``."""
    import pytest

    if "slow" in (config.getoption("markexpr") or "") or os.environ.get("TORCHKILN_OPINFO_FULL", "") not in ("", "0"):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow or TORCHKILN_OPINFO_FULL=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
