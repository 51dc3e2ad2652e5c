"""Ops the OpInfo sweep found breaking the graph (or failing), each fixed at the stage
that owned the failure; one graph, eager's result."""
import pytest
import torch
import torch.nn.functional as F

import torchkiln
from torchkiln.utils.counters import counters


def _one_graph(fn, *args):
    torchkiln.reset()
    counters.clear()
    out = torchkiln.compile(fn, backend="inductor", fullgraph=True)(*args)
    assert not counters["graph_break"]
    torchkiln.reset()
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_cov_and_corrcoef_without_weights_are_one_graph(dtype):
    """Their ATen composites ask ``norm_factor <= 0`` of a tensor (data-dependent on
    fake tensors); without weights it is a size: polyfilled (capture/polyfills/torch_ops.py)."""
    x = torch.randn(3, 7).mul(4).to(dtype)
    for fn in (lambda t: torch.cov(t, correction=0), lambda t: torch.corrcoef(t), lambda t: torch.cov(t[0])):
        ref, res = fn(x), _one_graph(fn, x)
        assert res.dtype == ref.dtype
        torch.testing.assert_close(res, ref, atol=2e-2 if dtype == torch.bfloat16 else 1e-5, rtol=2e-2)


def test_cov_with_weights_breaks_and_matches_eager():
    x, fw = torch.randn(2, 5), torch.tensor([1, 2, 0, 3, 1])
    fn = lambda t, w: torch.cov(t, fweights=w) * 2  # noqa: E731
    torchkiln.reset()
    torch.testing.assert_close(torchkiln.compile(fn)(x, fw), fn(x, fw))
    torchkiln.reset()


def test_functional_with_a_module_argument_is_traced_into():
    """F.triplet_margin_with_distance_loss(distance_function=<a module>): a module cannot
    be the argument of a graph node, so the function is inlined (as torch.compile does)."""
    a, p, n = (torch.randn(4, 6) for _ in range(3))
    dist = torch.nn.PairwiseDistance()
    fn = lambda a, p, n: F.triplet_margin_with_distance_loss(a, p, n, distance_function=dist)  # noqa: E731
    torch.testing.assert_close(_one_graph(fn, a, p, n), fn(a, p, n))


def test_refs_view_prims_are_functionalized():
    """torch._refs decompositions use aliasing prims (broadcast_in_dim, collapse_view),
    which torch's functionalization rejects: they run their ATen implementation."""
    import torch._refs as refs

    x = torch.randn(2, 3, 4)
    fn = lambda t: refs.flatten(t, 0, 1) * 2 + refs.broadcast_to(t[0, 0], (3, 4)).sum()  # noqa: E731
    torch.testing.assert_close(_one_graph(fn, x), fn(x))


def test_sparse_gradient_of_to_sparse():
    """The gradient reaching a compiled graph's sparse output is sparse; the backward was
    traced for a dense one (it used to raise "unsupported memory format option")."""
    x = torch.randn(4, 5, requires_grad=True)
    fn = lambda t: (t * 2).to_sparse()  # noqa: E731
    g = torch.randn(4, 5).to_sparse()
    ref = torch.autograd.grad(fn(x), x, g)[0]
    torchkiln.reset()
    res = torch.autograd.grad(torchkiln.compile(fn)(x), x, g)[0]
    torchkiln.reset()
    torch.testing.assert_close(res, ref)


def test_extern_result_with_another_dtype_than_its_meta():
    """torch's ``prims.signbit`` meta says float64 where the kernel returns bool; kernels
    read the extern's bytes as the meta's dtype (all True was returned, silently): the
    wrapper converts such a result to the dtype the graph was compiled for."""
    import torch._refs as refs

    for x in (torch.tensor([-1.0, 0.0, -0.0, 2.0, float("-inf"), float("nan")], dtype=torch.float64),
              torch.tensor([-3, 0, 5, -1])):
        fn = lambda t: refs.signbit(t)  # noqa: E731
        torch.testing.assert_close(_one_graph(fn, x), fn(x))
