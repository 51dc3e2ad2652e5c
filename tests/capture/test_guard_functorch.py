"""torch.func transforms over compiled code give eager's answers (the compiled frame
runs eagerly inside a transform; before, a cached entry's autograd.Function raised
the ``setup_context`` error under ``torch.func.grad``)."""
import pytest
import torch

import torchkiln


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("first_outside", [True, False])
def test_func_transforms_over_compiled_module(backend, first_outside):
    torchkiln.reset()
    m = _model()
    cm = torchkiln.compile(m, backend=backend)
    x = torch.randn(3, 4, requires_grad=True)
    if first_outside:  # a cached entry exists (and matches the wrapped tensors' metadata)
        cm(x).sum().backward()
    got = torch.func.grad(lambda x: cm(x).sum())(x)
    torch.testing.assert_close(got, torch.func.grad(lambda x: m(x).sum())(x))
    torch.testing.assert_close(torch.func.vmap(cm)(x.detach()), m(x.detach()))
    torch.testing.assert_close(torch.func.jacrev(cm)(x), torch.func.jacrev(m)(x))
    params = {k: v.detach() for k, v in m.named_parameters()}

    def loss(p, mod):
        return torch.func.functional_call(mod, p, (x,)).sum()
    ref = torch.func.grad(loss)(params, m)
    got = torch.func.grad(loss)(params, cm)
    for k in ref:
        torch.testing.assert_close(got[k], ref[k])
    # and outside a transform the compiled entry is used again, with eager's result
    torch.testing.assert_close(cm(x), m(x))


def test_func_grad_over_compiled_function():
    torchkiln.reset()
    w = torch.randn(4, requires_grad=True)

    @torchkiln.compile(backend="aot_eager")
    def f(x):
        return (x.sin() * w).sum()
    x = torch.randn(4, requires_grad=True)
    f(x).backward()
    torch.testing.assert_close(torch.func.grad(f)(x), torch.func.grad(lambda x: (x.sin() * w).sum())(x))
