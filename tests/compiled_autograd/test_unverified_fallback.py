"""On a torch minor version whose engine protocol is not verified (forced here by
emptying ``protocol.VERIFIED``), ``enable`` and ``config.compiled_autograd`` never hand
our compiler to the engine: the backward runs eagerly, gradients equal eager's, nothing
is captured, and one warning says why."""
import warnings

import pytest
import torch

import torchkiln
from torchkiln import compiled_autograd
from torchkiln.compiled_autograd import protocol
from torchkiln.config import config
from torchkiln.utils.counters import counters


@pytest.fixture(autouse=True)
def _unverified(monkeypatch):
    monkeypatch.setattr(protocol, "VERIFIED", set())
    monkeypatch.delenv(protocol.OPT_IN, raising=False)
    monkeypatch.setattr(compiled_autograd, "_warned", set())
    torchkiln.reset()
    yield
    config.compiled_autograd = False
    monkeypatch.undo()
    compiled_autograd.reset()


def _grads(backward_in):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    x = torch.randn(3, 4)
    backward_in(lambda: model(x).sum().backward())
    return [p.grad for p in model.parameters()]


def test_enable_runs_eagerly_and_warns_once():
    expected = _grads(lambda step: step())

    def twice(step):
        for _ in range(2):
            with compiled_autograd.enable(lambda gm: gm):
                step()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        actual = _grads(twice)
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, 2 * e)  # two backwards accumulate
    messages = [str(w.message) for w in caught if "compiled autograd" in str(w.message)]
    major, minor = protocol.torch_version()
    assert messages == [f"compiled autograd: torch {major}.{minor}'s engine protocol is not verified; "
                        "running the backward eagerly"]
    assert counters["compiled_autograd"]["captures"] == 0


def test_config_switch_runs_eagerly():
    expected = _grads(lambda step: step())
    config.compiled_autograd = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actual = _grads(lambda step: torchkiln.compile(step, backend="aot_eager")())
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e)
    assert counters["compiled_autograd"]["captures"] == 0


def test_opt_in_captures_on_an_unverified_version(monkeypatch):
    monkeypatch.setenv(protocol.OPT_IN, "1")
    assert protocol.unverified_reason() is None


def test_accumulate_grad_returns_none_in_the_three_argument_form():
    """torch 2.11's engine calls ``accumulate_grad(variable, grad, has_post_hooks)`` and
    asserts the result is None (python_compiled_autograd.cpp:305); 2.13's passes the
    leaf's current grad too and uses the returned grad."""
    from types import SimpleNamespace

    from torchkiln.compiled_autograd.tracer import AutogradCapture

    leaf, grad = torch.zeros(2), torch.ones(2)
    stub = SimpleNamespace(input_index={id(leaf): 0}, accumulates=[], origin="", accumulate_positions=[],
                           _graph_checkpoint=lambda: None)
    assert AutogradCapture.accumulate_grad(stub, leaf, grad, False) is None
    assert AutogradCapture.accumulate_grad(stub, leaf, None, grad, False) is grad
    assert [r.grad for r in stub.accumulates] == [grad, grad]
