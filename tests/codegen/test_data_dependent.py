"""Data-dependent shapes end to end (capture -> AOT autograd -> C++ / Triton kernels),
each against eager: the programs real models write around ``.item()``, ``.tolist()``,
``nonzero`` and boolean masks (issue 14's own tests; the seed's are in
test_dynamic_shapes.py)."""
from __future__ import annotations

import pytest
import torch
import torchkiln
from torchkiln.bench.models.moe import MoE
from torchkiln.testing import CompileCounterWithBackend

from test_dynamic_shapes import _checked, device  # noqa: F401  (the cpp / triton / cuda fixture)

both = torchkiln.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True)


@both
def test_moe_forward_backward_one_graph(device):
    torch.manual_seed(0)
    model = MoE(d=16, hidden=16, n_experts=3).to(device)
    counter = CompileCounterWithBackend("inductor")
    compiled = _checked(torchkiln.compile(model, backend=counter, fullgraph=True))
    for seed in (0, 1):  # another routing: the same graph, other token counts
        torch.manual_seed(seed)
        x = torch.randn(24, 16, device=device)
        model.zero_grad()
        ref = model(x)
        ref.pow(2).sum().backward()
        expected = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        out = compiled(x)
        out.pow(2).sum().backward()
        torch.testing.assert_close(out, ref)
        for p, g in zip(model.parameters(), expected):
            torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)
    assert counter.frame_count == 1


def test_moe_without_settings_breaks_the_graph(device):
    # torch.compile's behaviour without the settings: bincount and .tolist() break the graph
    if device == "cpu" and torchkiln.codegen.config.cpu_backend == "triton":
        pytest.skip("a capture behaviour: the C++ path shows it")
    model = MoE(d=16, hidden=16, n_experts=3).to(device)
    x = torch.randn(24, 16, device=device)
    counter = CompileCounterWithBackend("inductor")
    out = _checked(torchkiln.compile(model, backend=counter))(x)
    torch.testing.assert_close(out, model(x))
    assert counter.frame_count > 1


@both
def test_mask_select_reduce_matmul(device):
    def f(x, w):
        rows = x[x[:, 0] > 0]              # (u0, 8)
        centred = rows - rows.mean(0)      # a reduction over u0
        return centred @ w, (centred.t() @ centred).sum()

    opt = _checked(torchkiln.compile(f, fullgraph=True))
    w = torch.randn(8, 3, device=device)
    for n in (10, 17):
        x = torch.randn(n, 8, device=device)
        torch.testing.assert_close(opt(x, w), f(x, w))


@both
def test_arange_of_max_item(device):
    def f(t):
        n = t.max().item()
        return torch.arange(n, device=t.device) * 2 + 1

    opt = _checked(torchkiln.compile(f, fullgraph=True))
    for t in (torch.tensor([3, 7, 5]), torch.tensor([1, 2])):
        t = t.to(device)
        torch.testing.assert_close(opt(t), f(t))


@both
def test_split_tolist_then_cat(device):
    def f(x, lengths):
        parts = x.split(lengths.tolist())
        return torch.cat([p.flip(0) * (i + 1) for i, p in enumerate(parts)])

    opt = _checked(torchkiln.compile(f, fullgraph=True))
    x = torch.randn(10, 4, device=device)
    for lengths in ([3, 5, 2], [0, 9, 1]):
        lengths = torch.tensor(lengths)
        torch.testing.assert_close(opt(x, lengths), f(x, lengths))
    with pytest.raises(RuntimeError, match="runtime assertion failed"):  # sizes that do not add up
        opt(x, torch.tensor([3, 3, 3]))


@both
def test_violated_check_raises(device):
    def f(x, n):
        k = n.item()
        torch._check(k >= 2)
        torch._check(k < x.size(0))
        return x[:k].sum(), x.new_ones(k)

    opt = _checked(torchkiln.compile(f, fullgraph=True))
    x = torch.randn(5, device=device)
    torch.testing.assert_close(opt(x, torch.tensor(3)), f(x, torch.tensor(3)))
    with pytest.raises(RuntimeError, match=r"^Expected cond to be True, but got False.*\(u\d+ >= 2\) is False"):
        opt(x, torch.tensor(1))
    with pytest.raises(RuntimeError, match=r"u\d+ <= 4|u\d+ < 5"):
        opt(x, torch.tensor(5))
    # against a symbolic size: the assert reads both the unbacked and the input's symbol
    opt = _checked(torchkiln.compile(f, fullgraph=True, dynamic=True))
    x = torch.randn(7, device=device)
    torch.testing.assert_close(opt(x, torch.tensor(6)), f(x, torch.tensor(6)))
    with pytest.raises(RuntimeError, match=r"\(u\d+ < s\d+\)"):
        opt(x, torch.tensor(7))


@both
def test_other_data_dependent_ops(device):
    def f(x, r):
        u = torch.unique(x.round())
        rep = torch.repeat_interleave(x, r)
        sel = torch.masked_select(x, x > 0)
        where = torch.argwhere(x > 0.5)
        return u * 2, rep + 1, sel.sum() + sel.numel(), where + 1

    opt = _checked(torchkiln.compile(f, fullgraph=True))
    for n in (6, 9):
        x = torch.randn(n, device=device) * 3
        r = torch.randint(0, 3, (n,), device=device)
        torch.testing.assert_close(opt(x, r), f(x, r))


class _Mine(Exception):
    pass


@both
def test_checks_raise_eager_error_type_and_message():
    limit = 4

    def f(x, n):
        k = n.item()
        torch._check_is_size(k, lambda: "not a size", max=6)
        torch._check_with(_Mine, k != 1, lambda: "one")
        torch._check_value(k >= 2, lambda: "k too small")
        torch._check_index(k < x.size(0), lambda: f"k must be < {limit}")
        torch._check_type(k != 3, lambda: "three")
        torch._check_not_implemented(k != 2)
        return x[:k].sum() * 2

    opt = torchkiln.compile(f, fullgraph=True)
    x = torch.randn(8)
    torch.testing.assert_close(opt(x, torch.tensor(5)), f(x, torch.tensor(5)))
    for v in (-1, 7, 1, 0, 8, 3, 2):
        with pytest.raises(Exception) as expected:
            f(x, torch.tensor(v))
        with pytest.raises(expected.type) as got:
            opt(x, torch.tensor(v))
        assert got.type is expected.type and str(got.value).startswith(str(expected.value)), (v, got.value)


@both
def test_check_message_of_data_dependent_value_breaks():
    # eager formats k only when the check fails: a message over a data-dependent value
    # cannot be computed ahead, so the check is a graph break (and runs eagerly)
    def f(x, n):
        k = n.item()
        torch._check_value(k < x.size(0), lambda: f"k={k} too large")
        return x[:k] + 1

    with pytest.raises(torchkiln.exc.Unsupported, match="message function"):
        torchkiln.compile(f, fullgraph=True)(torch.randn(4), torch.tensor(2))
    opt = torchkiln.compile(f)
    torch.testing.assert_close(opt(torch.randn(4).zero_(), torch.tensor(2)), torch.ones(2))
    with pytest.raises(ValueError, match="^k=9 too large$"):
        opt(torch.randn(4), torch.tensor(9))


@both
def test_symfloat_item_is_a_kernel_argument(device):
    # a float .item() reaches pointwise kernels and a reduction's epilogue as a scalar
    # argument (C++ double, Triton fp32), bound by the wrapper: no eager fallback
    def f(x, y):
        s = y.sum().item()
        return (x * s + 1).relu(), x.sum(0) / s, torch.full_like(x, 2.0) * (s * 0.5 + x.size(0))

    fallbacks = torchkiln.codegen.metrics.eager_fallbacks
    opt = _checked(torchkiln.compile(f, fullgraph=True, dynamic=True))
    for n in (6, 9):
        x, y = torch.randn(n, 4, device=device), torch.randn(3, device=device)
        torch.testing.assert_close(opt(x, y), f(x, y))
    assert torchkiln.codegen.metrics.eager_fallbacks == fallbacks


def test_symfloat_from_sizes_in_kernel(device):
    def f(x):
        return x * (x.size(0) ** 0.5) + x.size(1) / 3

    opt = _checked(torchkiln.compile(f, dynamic=True, fullgraph=True))
    for shape in ((6, 4), (9, 5)):
        x = torch.randn(*shape, device=device)
        torch.testing.assert_close(opt(x), f(x))
