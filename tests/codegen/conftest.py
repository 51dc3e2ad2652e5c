"""Fixtures shared by the codegen tests."""
from __future__ import annotations

import pytest
import torch

import torchkiln


@pytest.fixture
def backend_device(backend, monkeypatch) -> str:
    """The device a test parametrized over ``backend`` ("cpp" or "triton") runs on: CUDA
    when present (Triton is its "cpp" case, so "triton" skips there), else the CPU, with
    Triton under its interpreter (skipped without ``TRITON_INTERPRET=1``)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if backend == "triton" and device == "cpu":
        pytest.importorskip("triton")
        from torchkiln.codegen.triton.generator import interpreter_active

        if not interpreter_active():
            pytest.skip("needs TRITON_INTERPRET=1")
        monkeypatch.setattr(torchkiln.codegen.config, "cpu_backend", "triton")
    elif backend == "triton":
        pytest.skip("CUDA runs Triton in the cpp case")
    return device
