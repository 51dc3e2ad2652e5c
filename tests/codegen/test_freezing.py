"""Freezing (codegen/freezing.py, ``codegen.config.freezing``): module state as
constants in no_grad inference; batch norm folded into convolutions, weights
prepacked for oneDNN.  Eager PyTorch is the oracle."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import torchkiln
from torchkiln.codegen import config

from test_layout import Block  # tests/codegen is on sys.path (rootdir-less test modules)


class _Ops(TorchDispatchMode):
    """Records the ops the compiled code runs: a mode that says it ignores compile
    internals is on for the compiled artifact (any other mode makes the frame run eagerly,
    as torch.compile does)."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func)
        return func(*args, **(kwargs or {}))


def _prepare(model):
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
    return model.eval()


def _compare(model, x, tol=1e-4):
    torchkiln.reset()
    with config.patch(freezing=True, debug=True), torch.no_grad():
        compiled = torchkiln.compile(model)
        compiled(x)
        with _Ops() as mode:
            got = compiled(x)
        ref = model(x)
    for a, b in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
        assert a.stride() == b.stride()
    return compiled, mode.ops


def test_conv_bn_relu_folded_and_packed():
    model = _prepare(Block())
    _, ops = _compare(model, torch.randn(2, 3, 20, 20))
    assert torch.ops.mkldnn._convolution_pointwise.default in ops
    assert torch.ops.aten.convolution.default not in ops  # both convs packed, batch norms folded


@pytest.mark.parametrize("kw", [{"groups": 4, "bias": False}, {"dilation": 2}, {"padding_mode": "reflect"}])
def test_conv_variants(kw):
    _compare(_prepare(Block(**kw)), torch.randn(2, 3, 20, 20))


def test_not_folded_when_not_per_channel():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.scale = nn.Parameter(torch.randn(6))  # varies along W, not channels
            self.convt = nn.ConvTranspose2d(4, 2, 3)

        def forward(self, x):
            return self.convt(self.conv(x) * self.scale + 1.0)

    _compare(M(), torch.randn(1, 3, 8, 8))


def test_float64_folds_without_packing():
    _compare(_prepare(Block()).double(), torch.randn(2, 3, 12, 12, dtype=torch.float64), tol=1e-8)


def test_parameter_change_after_compile_not_seen():
    """Documented behaviour, as torch's freezing: the compiled graph keeps the values
    the parameters had when it was compiled; torchkiln.reset() and compiling again
    picks up new ones.  Without freezing (or with grad mode on) changes are seen."""
    model = _prepare(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()))
    x = torch.randn(1, 3, 8, 8)
    torchkiln.reset()
    with config.patch(freezing=True), torch.no_grad():
        compiled = torchkiln.compile(model)
        before = compiled(x)
        model[0].weight.mul_(2.0)
        assert torch.equal(compiled(x), before)
        assert not torch.allclose(model(x), before)
        torchkiln.reset()
        torch.testing.assert_close(torchkiln.compile(model)(x), model(x), atol=1e-4, rtol=1e-4)
    torchkiln.reset()
    with config.patch(freezing=False), torch.no_grad():
        compiled = torchkiln.compile(model)
        compiled(x)
        model[0].weight.mul_(0.5)
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
