"""Launch groups (codegen/cpp/launch_groups.py): consecutive C++ kernels with no extern
call between them are launched as one function; a member's buffers, a storage a later
member's output takes over (``reuse``), and index-checked kernels (launched alone) keep
eager's results."""
from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln.codegen import compile_fx_inner, config
from torchkiln.codegen.decompositions import decompositions


def _compile(fn, *args, **options):
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    with config.patch(debug=True, fx_graph_cache=False, mkldnn_linear=False, **options):
        return compile_fx_inner(gm, vals)


def _mlp_backward(g, a1, a2, w1, w2):
    # per layer: ReLU mask, the input gradient (mm), the bias gradient (a column sum),
    # the weight gradient (mm), then a clamp of every weight gradient at the end
    d2 = g * (a2 > 0)
    gw2 = d2.t() @ a1
    gb2 = d2.sum(0).clamp(-0.1, 0.1)
    d1 = (d2 @ w2) * (a1 > 0)
    gw1 = d1.t() @ a1
    gb1 = d1.sum(0).clamp(-0.1, 0.1)
    return gw1.clamp(-0.1, 0.1), gb1, gw2.clamp(-0.1, 0.1), gb2, (d1 @ w1).clamp(-1, 1)


def test_consecutive_kernels_share_one_launch():
    torch.manual_seed(0)
    args = [torch.randn(16, 32) for _ in range(3)] + [torch.randn(32, 32), torch.randn(32, 32)]
    compiled = _compile(_mlp_backward, *args)
    grouped = [k for k in compiled.kernel_source.split('extern "C" void ')[1:] if k.split("(")[0].endswith("_group")]
    assert grouped, compiled.source
    launches = [line for line in compiled.source.splitlines() if line.lstrip().startswith("kernel")]
    assert len(launches) < len(compiled.kernels), compiled.source
    for got, want in zip(compiled(*args), _mlp_backward(*args)):
        torch.testing.assert_close(got, want)


def test_kernel_profile_launches_each_kernel():
    args = [torch.randn(16, 32) for _ in range(3)] + [torch.randn(32, 32), torch.randn(32, 32)]
    compiled = _compile(_mlp_backward, *args, kernel_profile=True)
    assert "_group" not in compiled.source


def test_index_checked_kernel_launched_alone():
    def fn(x, idx, y):
        a = (x * 2).sum(0)       # a kernel
        b = x[idx] + 1           # a gather with an index check
        return a, b, (y + a).clamp(0, 1)

    x, y = torch.randn(8, 4), torch.randn(4)
    compiled = _compile(fn, x, torch.tensor([0, 7, 3]), y)
    assert "_kiln_index_error" in compiled.source and "_group" not in compiled.source, compiled.source
    for got, want in zip(compiled(x, torch.tensor([0, 7, 3]), y), fn(x, torch.tensor([0, 7, 3]), y)):
        torch.testing.assert_close(got, want)
    try:
        compiled(x, torch.tensor([0, 9, 3]), y)
    except (IndexError, RuntimeError) as e:
        assert "index" in str(e).lower()
    else:
        raise AssertionError("an index out of range did not raise")
