"""addmm as mm + a fused bias add where every use is pointwise (CUDA's default; forced
here for CPU tensors): the same values as eager, and the extern call is an mm."""
from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln.codegen import config, lowering
from torchkiln.testing import same


@pytest.mark.parametrize("training", [False, True])
def test_unfused_addmm(training, monkeypatch):
    monkeypatch.setattr(lowering, "_UNFUSE_DEVICES", {"cuda", "cpu"})
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    lin1, lin2 = torch.nn.Linear(16, 32).to(device), torch.nn.Linear(32, 8).to(device)

    def fn(x):
        h = torch.nn.functional.gelu(lin1(x))  # unfused: gelu is the only use
        return lin2(h) + x[:, :8]  # unfused too (an add)

    x = torch.randn(64, 16, device=device, requires_grad=training)
    calls = []
    real = lowering._prefer_unfused_addmm
    monkeypatch.setattr(lowering, "_prefer_unfused_addmm", lambda b, m: calls.append(real(b, m)) or calls[-1])
    torchkiln.reset()
    with config.patch(mkldnn_linear=False), torch.set_grad_enabled(training):
        out = torchkiln.compile(fn)(x)
        ref = fn(x)
    assert same(out, ref, tol=1e-4)
    # training on CUDA: the joint graph already has both linears as mm + add
    # (aot/unfuse_addmm.py); on CPU lin1's result is also saved for the backward (a use
    # that is no pointwise op)
    assert calls == ([] if device == "cuda" else [False, True]) if training else [True, True]
    if training:
        out.sum().backward()
        g = [p.grad.clone() for p in (*lin1.parameters(), *lin2.parameters())] + [x.grad.clone()]
        for p in (*lin1.parameters(), *lin2.parameters(), x):
            p.grad = None
        ref.sum().backward()
        assert same(g, [p.grad for p in (*lin1.parameters(), *lin2.parameters())] + [x.grad], tol=1e-4)


def test_addmm_kept_when_a_use_is_not_pointwise(monkeypatch):
    monkeypatch.setattr(lowering, "_UNFUSE_DEVICES", {"cuda", "cpu"})
    lin = torch.nn.Linear(16, 16)
    calls = []
    real = lowering._prefer_unfused_addmm
    monkeypatch.setattr(lowering, "_prefer_unfused_addmm", lambda b, m: calls.append(real(b, m)) or calls[-1])
    x = torch.randn(8, 16)
    torchkiln.reset()
    with config.patch(mkldnn_linear=False), torch.no_grad():
        out = torchkiln.compile(lambda x: lin(x).sum(0))(x)
    assert same(out, lin(x).sum(0), tol=1e-4)
    assert calls == [False]
