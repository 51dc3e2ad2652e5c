"""Outputs that alias inputs, other outputs or intermediates come back as real views
of the right base, with eager's sizes, strides and autograd behaviour."""
import torch

from torchkiln.aot import aot_function, nop

from ._helpers import check


def test_output_views_input():
    def f(x):
        return x.t(), x.sin()

    _, res, _, res_args = check(f, lambda: [torch.randn(2, 3, requires_grad=True)])
    assert res[0]._base is res_args[0]
    res_args[0].data.add_(1)  # the view sees later writes to its base
    torch.testing.assert_close(res[0], res_args[0].detach().t())


def test_output_is_input():
    def f(x, y):
        return x, y * 2

    _, res, _, res_args = check(f, lambda: [torch.randn(3, requires_grad=True), torch.randn(3)])
    assert res[0] is res_args[0]


def test_outputs_view_each_other():
    def f(x):
        y = x * 2
        return y, y.view(-1), y[0]

    _, res, _, _ = check(f, lambda: [torch.randn(2, 3, requires_grad=True)])
    assert res[1]._base is res[0] and res[2]._base is res[0]
    res[0].data.fill_(7.0)
    assert bool((res[1] == 7).all()) and bool((res[2] == 7).all())


def test_outputs_view_an_intermediate():
    def f(x):
        y = x * 2
        return y.view(-1), y[1]

    _, res, _, _ = check(f, lambda: [torch.randn(2, 3, requires_grad=True)])
    assert res[0]._base is not None and res[0]._base is res[1]._base


def test_in_place_on_aliased_output_after_the_call():
    def f(x):
        y = x * 2
        return y.view(-1), y[1]

    x = torch.randn(2, 3, requires_grad=True)
    a, b = aot_function(f, nop)(x)
    ra, rb = f(x)
    a.mul_(3)
    ra.mul_(3)
    torch.testing.assert_close(b, rb)
    (a.sum() + b.sum()).backward()
    g = x.grad.clone()
    x.grad = None
    (ra.sum() + rb.sum()).backward()
    torch.testing.assert_close(g, x.grad)


def test_view_of_input_under_no_grad_has_no_history():
    def f(x):
        with torch.no_grad():
            v = x.view(-1)
        return v, x * 2

    ref, res, _, _ = check(f, lambda: [torch.randn(2, 2, requires_grad=True)])
    assert res[0].grad_fn is None and ref[0].grad_fn is None


def test_grad_mode_change_inside_the_graph_persists():
    def f(x):
        y = x * x
        torch.set_grad_enabled(False)
        return y.clone(), y

    x = torch.ones(3, requires_grad=True) * 3
    try:
        y_ref = f(x)
        assert not torch.is_grad_enabled()
        torch.set_grad_enabled(True)
        y = aot_function(f, nop)(x)
        assert not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)
    torch.testing.assert_close(y_ref, y)
    assert y[0].grad_fn is None and y[1].grad_fn is not None
    t = torch.tensor([-1.0, 2.0, 0.0])
    ref = sum(y_ref[1].grad_fn(t))
    res = sum(g for g in y[1].grad_fn.apply(None, t) if g is not None)
    torch.testing.assert_close(ref, res)


def test_constant_tensor_alias_inside_graph():
    def f():
        a = torch.tensor([1])
        a = a[0:1]
        b = a.squeeze()
        a[0] = 0
        a[0] = 2
        return b

    torch.testing.assert_close(aot_function(f, nop)(), f())


def test_reshape_of_an_intermediate_is_a_view_not_as_strided():
    # a language model's logits: (batch*seq, vocab) matmul output returned as
    # (batch, seq, vocab); as_strided's backward zero-filled a base-sized gradient each step
    def f(x, w):
        return (x @ w).view(2, 3, 5)

    _, res, _, _ = check(f, lambda: [torch.randn(6, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)])
    assert type(res.grad_fn).__name__ == "ViewBackward0", res.grad_fn


def test_strided_slice_of_an_intermediate_stays_as_strided():
    def f(x):
        y = x * 2
        return y[:, 1:], y.t()

    _, res, _, _ = check(f, lambda: [torch.randn(3, 4, requires_grad=True)])
    assert res[0]._base is res[1]._base
