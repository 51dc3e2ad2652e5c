"""Split reductions (codegen/split_reduction.py): how many chunks, and that the two-stage
form computes what eager does.  Splitting is for CUDA; here it is forced on for CPU
tensors (the C++ kernels; the Triton renderer sees the same IR) and, with a GPU, run on
CUDA as the default does."""
from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln.codegen import split_reduction
from torchkiln.testing import same


def test_num_splits():
    assert split_reduction.num_splits(768, 4096) == 16  # bias gradient of 4096 rows
    assert split_reduction.num_splits(64, 262144) == 256  # batch-norm statistics, 64 channels
    assert split_reduction.num_splits(1, 1 << 23) == 1024  # a full sum
    assert split_reduction.num_splits(1, 8192) == 1  # too little work for a second launch
    assert split_reduction.num_splits(4096, 4096) == 1  # enough outputs already
    assert split_reduction.num_splits(2048, 8192, outer=True) == 8  # a column sum: 32 outputs a program
    assert split_reduction.num_splits(16384, 8192, outer=True) == 1
    # layer-norm weight/bias gradients of 2048 rows: 24 programs of 32 columns unsplit
    assert split_reduction.num_splits(768, 2048, outer=True) == 8
    assert split_reduction.num_splits(768, 2048) == 1  # a row reduction of 2048 stays whole
    assert split_reduction.num_splits(768, 512, outer=True) == 1  # too few rows / elements
    assert split_reduction.num_splits(8, 1000) == 1  # short rows
    assert split_reduction.num_splits(3, 4099 * 1023) == 1  # no power of two divides the row
    for x, r in [(1, 1 << 20), (7, 6144 * 256), (1000, 1 << 20)]:
        s = split_reduction.num_splits(x, r)
        assert r % s == 0 and r // s >= split_reduction.MIN_CHUNK and x * s <= split_reduction.TARGET_OUTPUTS


def _fns():
    def colsum(x):
        return x.sum(0), x.amax(0), x.mean(0, keepdim=True)

    def bn_stats(x):  # per channel over N, H, W
        return x.sum((0, 2, 3)), x.amin((0, 2, 3), keepdim=True), (x > 3).any((0, 2, 3))

    def full(x):
        return x.sum(), x.abs().max(), (x * 2).sum() + 1

    def welford(x):  # batch-norm statistics: var_mean per channel, biased and unbiased
        var, mean = torch.var_mean(x + 3.0, (0, 2, 3), correction=0)
        return var, mean, x.var((0, 2, 3), keepdim=True)

    def welford_rows(x):  # a column variance (one reduction dim)
        return torch.var_mean(x * 1000.0 + 1e4, 0)

    return [(colsum, (4096, 8)), (bn_stats, (16, 4, 16, 16)), (full, (64, 128)),
            (welford, (16, 4, 16, 16)), (welford_rows, (4096, 8))]


def _spy(monkeypatch) -> list:
    monkeypatch.setattr(split_reduction, "enabled", lambda device: True)
    monkeypatch.setattr(split_reduction, "MIN_ELEMENTS", 0)
    calls, real = [], split_reduction._partials  # one call per stage-1 partial result
    monkeypatch.setattr(split_reduction, "_partials", lambda red, n: calls.append(n) or real(red, n))
    return calls


def test_wide_column_sum_is_split_row_sum_is_not(monkeypatch):
    calls = _spy(monkeypatch)
    x = torch.randn(4096, 2048)
    torchkiln.reset()
    out = torchkiln.compile(lambda x: (x.sum(0), x.sum(1)))(x)
    assert same(out, (x.sum(0), x.sum(1)), tol=1e-4)
    assert calls and set(calls) == {8}  # the column sum (2048 outputs): 8 chunks of 512 rows; the row sum whole


def test_short_column_sum_is_split_short_row_sum_is_not(monkeypatch):
    calls = _spy(monkeypatch)
    x = torch.randn(2048, 768)
    torchkiln.reset()
    out = torchkiln.compile(lambda x: (x.sum(0), (x * 2).sum(1)))(x)
    assert same(out, (x.sum(0), (x * 2).sum(1)), tol=1e-4)
    assert calls == [8]  # only the column sum: 8 chunks of 256 rows


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_split_layer_norm_weight_gradients(backend, backend_device, monkeypatch):
    """A layer norm trained on 2048 rows: its weight and bias gradients (column sums of
    rows shorter than MIN_RNUMEL) are split; gradients as eager's."""
    calls = _spy(monkeypatch)
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm(64).to(backend_device)
    x = torch.randn(2048, 64, device=backend_device, requires_grad=True)
    w = torch.randn(2048, 64, device=backend_device)
    torchkiln.reset()
    out = torchkiln.compile(lambda x: (ln(x) * w).sum())(x)
    out.backward()
    got = [out.detach(), ln.weight.grad.clone(), ln.bias.grad.clone(), x.grad.clone()]
    ln.zero_grad(); x.grad = None
    ref = (ln(x) * w).sum()
    ref.backward()
    assert same(got, [ref.detach(), ln.weight.grad, ln.bias.grad, x.grad], tol=1e-4)
    assert calls


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("case", range(5))
def test_split_matches_eager(case, backend, backend_device, monkeypatch):
    fn, shape = _fns()[case]
    calls = _spy(monkeypatch)
    device = backend_device
    x = torch.randn(shape, device=device)
    torchkiln.reset()
    out = torchkiln.compile(fn)(x)
    assert same(out, fn(x), tol=1e-4)
    assert len(calls) >= 2


def test_split_bias_gradient_training(monkeypatch):
    calls = _spy(monkeypatch)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 6).to(device)
    x = torch.randn(4096, 8, device=device, requires_grad=True)
    torchkiln.reset()
    out = torchkiln.compile(lambda x: torch.relu(lin(x)).sum())(x)
    out.backward()
    grads = [lin.bias.grad.clone(), lin.weight.grad.clone(), x.grad.clone()]
    lin.zero_grad(); x.grad = None
    torch.relu(lin(x)).sum().backward()
    assert same(grads, [lin.bias.grad, lin.weight.grad, x.grad], tol=1e-4)
    assert calls  # the bias gradient (6 outputs of 4096 rows) was split


def test_split_batch_norm_training(monkeypatch):
    """Batch norm's forward statistics (Welford) and backward sums, split."""
    calls = _spy(monkeypatch)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(4).to(device)
    x = (torch.randn(16, 4, 16, 16, device=device) * 5 + 7).requires_grad_()
    w = torch.randn(16, 4, 16, 16, device=device)
    torchkiln.reset()
    out = torchkiln.compile(lambda x: (bn(x) * w).sum())(x)
    out.backward()
    got = [out.detach(), bn.bias.grad.clone(), bn.weight.grad.clone(), x.grad.clone(), bn.running_var.clone(),
           bn.running_mean.clone()]
    torch.manual_seed(0)
    ref_bn = torch.nn.BatchNorm2d(4).to(device)
    x.grad = None
    ref = (ref_bn(x) * w).sum()
    ref.backward()
    assert same(got, [ref.detach(), ref_bn.bias.grad, ref_bn.weight.grad, x.grad, ref_bn.running_var,
                      ref_bn.running_mean], tol=1e-4)
    assert len(calls) >= 3  # mean, M2 and the backward's sums


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_split_conv_batch_norm_training(backend, backend_device, monkeypatch):
    """conv -> batch norm -> relu, trained: split statistics over a convolution's output
    (channels-last on CPU with oneDNN, as on CUDA with codegen.config.layout_optimization_cuda)."""
    calls = _spy(monkeypatch)
    device = backend_device
    monkeypatch.setattr(torchkiln.codegen.config, "layout_optimization_cuda", True)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).to(device)
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).to(device)
    ref.load_state_dict(net.state_dict())
    x = torch.randn(16, 3, 16, 16, device=device)
    w = torch.randn(16, 8, 16, 16, device=device)
    torchkiln.reset()
    out = torchkiln.compile(lambda x: (net(x) * w).sum())(x)
    out.backward()
    ref_out = (ref(x) * w).sum()
    ref_out.backward()
    assert same([out.detach()] + [p.grad for p in net.parameters()] + list(net.buffers()),
                [ref_out.detach()] + [p.grad for p in ref.parameters()] + list(ref.buffers()), tol=1e-3)
    assert calls
