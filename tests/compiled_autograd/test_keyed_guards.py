"""The compiled backward's guard leaves out dtype, device and requires_grad of the
engine's lifted inputs (and their distinctness): the engine's cache key holds those of
every lifted tensor, so a change of one is a new capture, never a call of a compiled
function made for other metadata.  Checked here: each compiled function only ever sees
the metadata it was captured with, and gradients stay eager's."""
import pytest
import torch

import torchkiln
from torchkiln.capture import eval_frame
from torchkiln.compiled_autograd import compiler_fn_for_backend, protocol

pytestmark = pytest.mark.skipif(protocol.unverified_reason() is not None, reason=str(protocol.unverified_reason()))


@pytest.fixture(autouse=True)
def _clean():
    torchkiln.reset()
    torchkiln.compiled_autograd.reset()
    yield
    torchkiln.compiled_autograd.reset()


def _recording(seen: list):
    """compiler_fn_for_backend("eager"), recording per compiled function the metadata of
    every call's inputs."""
    inner = compiler_fn_for_backend("eager")

    def compiler_fn(gm):
        compiled = inner(gm)
        metas = set()
        seen.append(metas)

        def run(inputs, *rest):
            metas.add(tuple((t.dtype, t.device, t.requires_grad) for t in inputs))
            return compiled(inputs, *rest)
        return run
    return compiler_fn


def _backward(model, x, compiler_fn=None):
    loss = model(x).square().sum()
    if compiler_fn is None:
        loss.backward()
    else:
        with torchkiln.compiled_autograd.enable(compiler_fn, dynamic=False):
            loss.backward()


def test_dtype_and_requires_grad_changes_recapture_with_eager_gradients():
    seen = []
    compiler_fn = _recording(seen)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    ref.load_state_dict(model.state_dict())
    for p in (*model.parameters(), *ref.parameters()):
        p.register_hook(lambda g: g * 0.5)
    x = torch.randn(5, 4)
    variants = [(torch.float32, False), (torch.float64, False), (torch.float32, True), (torch.float64, True)]
    for dtype, x_grad in variants * 2:
        for m in (model, ref):
            m.to(dtype)
            m.zero_grad(set_to_none=True)
        xs = [x.to(dtype).clone().requires_grad_(x_grad) for _ in range(2)]
        _backward(model, xs[0], compiler_fn)
        _backward(ref, xs[1])
        for p, q in zip(model.parameters(), ref.parameters()):
            assert p.grad.dtype == dtype
            torch.testing.assert_close(p.grad, q.grad)
        if x_grad:
            torch.testing.assert_close(xs[0].grad, xs[1].grad)
    assert len(seen) >= len(variants)  # each variant a capture of its own
    assert all(len(metas) == 1 for metas in seen)  # a compiled function sees one metadata only


def test_requires_grad_of_a_saved_tensor_alone_recaptures():
    # b is saved for a's gradient; its requires_grad changes nothing else in the graph
    # when only a's gradient is asked for
    seen = []
    compiler_fn = _recording(seen)
    a = torch.randn(6, requires_grad=True)
    for b_grad in (False, True, False, True):
        b = torch.randn(6).requires_grad_(b_grad)
        with torchkiln.compiled_autograd.enable(compiler_fn, dynamic=False):
            (ga,) = torch.autograd.grad((a * b).sin().sum(), [a])
        torch.testing.assert_close(ga, (a * b).cos().detach() * b.detach())
    assert len(seen) == 2  # one capture per requires_grad of b, each reused once
    assert all(len(metas) == 1 for metas in seen)


def test_engine_graph_guard_has_no_dtype_parts_but_a_user_compile_does():
    model = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    _backward(model, x, compiler_fn_for_backend("eager"))
    parts = [part for fc in eval_frame._frame_caches.values() if fc.code.co_filename.startswith("<eval_with_key>")
             for _, entry in fc.entries for part in entry.guard.code_parts]
    assert any(".stride() ==" in p for p in parts) and any(".shape ==" in p for p in parts)
    assert not any(".dtype is" in p or ".requires_grad is" in p or ".device ==" in p for p in parts)

    def f(xs):
        return xs[0] + 1

    torchkiln.compile(f, backend="eager")([torch.randn(2)])
    parts = [part for fc in eval_frame._frame_caches.values() if fc.code is f.__code__
             for _, entry in fc.entries for part in entry.guard.code_parts]
    assert any(".dtype is" in p for p in parts) and any(".requires_grad is" in p for p in parts)
