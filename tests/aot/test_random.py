"""Random ops: the forward draws the mask once and the backward reuses it (saved, never
re-drawn).  Without decompositions the draws are eager's own (bit-identical for the
same seed); with core-ATen decompositions they follow the same distribution."""
import torch
from torch._decomp import core_aten_decompositions

from torchkiln.aot import aot_function, nop


def dropout_fn(x):
    return torch.nn.functional.dropout(x, 0.5, True) * 2


def test_forward_and_backward_agree_on_the_mask():
    for decomps in (None, core_aten_decompositions()):
        x = torch.randn(2000, requires_grad=True)
        out = aot_function(dropout_fn, nop, decompositions=decomps)(x)
        out.sum().backward()
        kept = out != 0
        torch.testing.assert_close(x.grad, kept.float() * 4.0)  # 2 (scale) * 2 (mul)


def test_bit_identical_to_eager_without_decompositions():
    x = torch.randn(1000, requires_grad=True)
    torch.manual_seed(7)
    ref = dropout_fn(x)
    torch.manual_seed(7)
    res = aot_function(dropout_fn, nop)(x)
    assert torch.equal(ref, res)


def test_distribution_matches_with_decompositions():
    x = torch.ones(20000)
    torch.manual_seed(0)
    res = aot_function(lambda t: torch.nn.functional.dropout(t, 0.3, True), nop,
                       decompositions=core_aten_decompositions())(x)
    kept = (res != 0).float().mean().item()
    assert abs(kept - 0.7) < 0.02
    torch.testing.assert_close(res[res != 0], torch.full_like(res[res != 0], 1 / 0.7))


def test_rand_like_inside_graph_is_saved_for_backward():
    def f(x):
        noise = torch.rand_like(x)
        return (x * noise).sin()

    x = torch.randn(64, requires_grad=True)
    torch.manual_seed(3)
    out = aot_function(f, nop)(x)
    out.sum().backward()
    torch.manual_seed(3)
    x2 = x.detach().requires_grad_()
    ref = f(x2)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(x.grad, x2.grad)
