"""The cache-hit path's shortcuts keep eager's gradients: leaves that only receive a
gradient are not inputs the compiled graph reads (so not guarded nor stride-checked), a
new gradient is stolen into ``.grad`` as eager's ``AccumulateGrad`` steals it, and one
that something else holds is copied."""
import pytest
import torch

import torchkiln
from torchkiln.compiled_autograd import protocol

pytestmark = pytest.mark.skipif(protocol.unverified_reason() is not None, reason=str(protocol.unverified_reason()))


@pytest.fixture(autouse=True)
def _clean():
    torchkiln.compiled_autograd.reset()
    yield
    torchkiln.compiled_autograd.reset()


def _hooked_mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    for p in model.parameters():
        p.register_hook(lambda g: g.clamp(-0.05, 0.05))
    return model


def test_leaves_only_accumulated_are_not_read_by_the_graph():
    graphs, calls = [], []

    def compiler_fn(gm):
        graphs.append(gm)

        def run(inputs, *rest):
            calls.append(list(inputs))
            return gm(inputs, *rest)
        return run

    model, ref = _hooked_mlp(), _hooked_mlp()
    x = torch.randn(5, 8)
    for step in range(3):
        for m in (model, ref):
            m.zero_grad(set_to_none=step != 1)  # step 1 accumulates into the zeros
        with torchkiln.compiled_autograd.enable(compiler_fn):
            model(x).square().sum().backward()
        ref(x).square().sum().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    inputs = next(n for n in graphs[0].graph.nodes if n.op == "placeholder" and n.target == "inputs")
    read = {u.args[1] for u in inputs.users}
    passed = calls[0]
    # the first Linear's weight and both biases only receive their gradient: not read,
    # so not passed to the compiled graph (nor guarded), which reads all it receives
    for leaf in (model[0].weight, model[0].bias, model[2].bias):
        assert not any(t is leaf for t in passed)
    assert model[2].weight.grad is not None and read == set(range(len(passed)))


def test_a_gradient_the_graph_also_returns_is_copied_into_grad():
    # .grad of a leaf must not be the tensor torch.autograd.grad hands back elsewhere
    a = torch.randn(4, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    kept = []

    def compiler_fn(gm):
        def run(*args):
            outs = gm(*args)
            kept.append(outs)  # the compiled function keeps what it returned
            return outs
        return run

    with torchkiln.compiled_autograd.enable(compiler_fn):
        (a * b).sum().backward()
    torch.testing.assert_close(a.grad, b.detach())
    torch.testing.assert_close(b.grad, a.detach())
    held = [t for outs in kept for t in outs if isinstance(t, torch.Tensor)]
    assert all(a.grad is not t and b.grad is not t for t in held)


def test_optimized_module_zero_grad_reaches_every_parameter():
    """``OptimizedModule.zero_grad`` (done by the original module when the wrapper has no
    parameter of its own) clears or zeroes the same gradients as ``Module.zero_grad``."""
    model = torchkiln.compile(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1)),
                              backend="eager")
    model(torch.randn(2, 3)).sum().backward()
    model.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    own = torch.nn.Parameter(torch.ones(2))
    model.register_parameter("own", own)  # a parameter of the wrapper itself
    own.grad = torch.ones(2)
    model.zero_grad()
    assert own.grad is None
