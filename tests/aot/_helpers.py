"""Shared checks for the aot tests: eager PyTorch is the oracle (outputs, grads, inputs)."""
from __future__ import annotations

import torch
import torch.utils._pytree as pytree

from torchkiln.aot import aot_function, nop


def assert_close(ref, res, tol=1e-5):
    ref_l, res_l = pytree.tree_leaves(ref), pytree.tree_leaves(res)
    assert len(ref_l) == len(res_l)
    for a, b in zip(ref_l, res_l):
        if isinstance(a, torch.Tensor):
            assert isinstance(b, torch.Tensor), (a, b)
            assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
            assert a.stride() == b.stride() or a.numel() <= 1, (a.stride(), b.stride())
            assert a.requires_grad == b.requires_grad, "requires_grad differs"
            torch.testing.assert_close(a.detach(), b.detach(), rtol=tol, atol=tol)
        else:
            assert a == b


def _loss(out):
    ts = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
    return sum((t * torch.linspace(0.5, 1.5, t.numel()).view_as(t).to(t.dtype)).sum() for t in ts) if ts else None


def check(fn, make_args, *, backward=True, roots=None, **aot_kwargs):
    """Run ``fn`` eagerly and through ``aot_function`` on identical fresh inputs; compare
    outputs, inputs afterwards (mutations), and the grads of every leaf that requires
    grad (``roots(args)`` picks other tensors whose ``.grad`` to compare)."""
    aot_kwargs.setdefault("fw_compiler", nop)
    torch.manual_seed(0)
    ref_args = make_args()
    torch.manual_seed(0)
    res_args = make_args()
    compiled = aot_function(fn, **aot_kwargs)
    ref = fn(*ref_args)
    res = compiled(*res_args)
    assert_close(ref, res)
    assert_close([a for a in ref_args if isinstance(a, torch.Tensor)],
                 [a for a in res_args if isinstance(a, torch.Tensor)])
    if backward:
        lr, ls = _loss(ref), _loss(res)
        assert (lr is None) == (ls is None)
        if lr is not None:
            lr.backward()
            ls.backward()
            pick = roots or (lambda args: [a for a in args if isinstance(a, torch.Tensor) and a.is_leaf and a.requires_grad])
            for a, b in zip(pick(ref_args), pick(res_args)):
                assert (a.grad is None) == (b.grad is None)
                if a.grad is not None:
                    torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
    return ref, res, ref_args, res_args


class GraphRecorder:
    """A compiler that keeps each ATen graph and its example inputs and runs it as is."""

    def __init__(self):
        self.graphs = []
        self.inputs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self.inputs.append(list(example_inputs))
        return gm
