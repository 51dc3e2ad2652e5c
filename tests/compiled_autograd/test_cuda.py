"""Compiled autograd on CUDA: a small model trained a few steps, gradients equal eager's,
with the default mode and with ``mode="reduce-overhead"`` (CUDA graphs).

Run on a GPU machine:
``TORCHKILN_LOGS=perf_hints python3 -m pytest -q tests/compiled_autograd/test_cuda.py``
"""
import pytest
import torch

import torchkiln
from torchkiln.compiled_autograd import protocol
from torchkiln.utils.counters import counters

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)"),
    pytest.mark.skipif(protocol.unverified_reason() is not None, reason=str(protocol.unverified_reason())),
]

STEPS = 3


class _Scale(torch.autograd.Function):
    """A custom Function with a saved tensor and a Python side effect in its backward."""

    calls = 0

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        _Scale.calls += 1
        return grad * w, (grad * x).sum(0)


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.scale = torch.nn.Parameter(torch.ones(64))
        self.fc2 = torch.nn.Linear(64, 8)

    def forward(self, x):
        return self.fc2(_Scale.apply(torch.relu(self.fc1(x)), self.scale))


def _train(compiler_fn=None, forward_mode=None, hooks=True):
    """STEPS steps; returns (per step: the loss and each parameter's ``.grad`` object as
    left by that step, not cloned: a later step must not overwrite it), calls, hook log."""
    torch.manual_seed(0)
    model = _Model().cuda()
    log = []
    if hooks:
        for name, p in model.named_parameters():
            p.register_hook(lambda g, name=name: log.append(name) or g.clamp(-1, 1))
    fwd = torchkiln.compile(model, mode=forward_mode) if compiler_fn is not None else model
    _Scale.calls = 0
    steps = []
    for i in range(STEPS):
        x = torch.randn(16, 32, device="cuda", generator=torch.Generator("cuda").manual_seed(i))
        model.zero_grad(set_to_none=True)
        if compiler_fn is None:
            loss = fwd(x).square().mean()
            loss.backward()
        else:
            with torchkiln.compiled_autograd.enable(compiler_fn):
                loss = fwd(x).square().mean()
                loss.backward()
        steps.append((loss.detach(), [p.grad for p in model.parameters()]))
    torch.cuda.synchronize()
    return steps, _Scale.calls, log


@pytest.fixture(autouse=True)
def _clean():
    torchkiln.reset()
    counters.clear()
    yield
    torchkiln.compiled_autograd.reset()
    torchkiln.reset()


def _check(compiler_fn, forward_mode=None):
    expected, expected_calls, expected_log = _train()
    actual, calls, log = _train(compiler_fn, forward_mode)
    for (loss_e, grads_e), (loss_a, grads_a) in zip(expected, actual):
        torch.testing.assert_close(loss_a, loss_e, rtol=1e-4, atol=1e-5)
        for g_a, g_e in zip(grads_a, grads_e):
            torch.testing.assert_close(g_a, g_e, rtol=1e-4, atol=1e-5)
    assert calls == expected_calls == STEPS  # the custom backward ran on every backward
    assert log == expected_log
    assert counters["compiled_autograd"]["captures"] >= 1


def test_cuda_model_gradients_equal_eager():
    _check(lambda gm: torchkiln.compile(gm, backend="inductor", fullgraph=False))
    assert counters["compiled_autograd"]["captures"] <= 2  # the first backward assigns .grad, no other


def test_cuda_reduce_overhead():
    # the captured backward recorded as a CUDA graph: each step's .grad must stay its own
    # (a replay must not overwrite the gradients an earlier step left)
    _check(lambda gm: torchkiln.compile(gm, backend="inductor", mode="reduce-overhead"), forward_mode="reduce-overhead")


def test_cuda_config_compiled_autograd_reduce_overhead():
    # config.compiled_autograd: a compiled training step's backward is compiled too
    expected, _, _ = _train(hooks=False)
    torchkiln.reset()
    counters.clear()
    torch.manual_seed(0)
    model = _Model().cuda()

    def step(x):
        loss = model(x).square().mean()
        loss.backward()
        return loss.detach()

    with torchkiln.config.patch(compiled_autograd=True):
        compiled_step = torchkiln.compile(step, mode="reduce-overhead")
    grads = []
    for i, (loss_e, _) in enumerate(expected):
        x = torch.randn(16, 32, device="cuda", generator=torch.Generator("cuda").manual_seed(i))
        model.zero_grad(set_to_none=True)
        torch.testing.assert_close(compiled_step(x), loss_e, rtol=1e-4, atol=1e-5)
        grads.append([p.grad for p in model.parameters()])
    for (_, grads_e), grads_a in zip(expected, grads):  # each step's .grad is still its own
        for g_a, g_e in zip(grads_a, grads_e):
            torch.testing.assert_close(g_a, g_e, rtol=1e-4, atol=1e-5)
    assert 1 <= counters["compiled_autograd"]["captures"] <= 2
