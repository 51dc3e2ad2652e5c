"""A linear whose result only pointwise ops read is ``mm`` + a bias add in the joint graph
(CUDA's rule, forced here for CPU tensors): the forward saves the ``mm`` output, never an
``addmm`` one, the backward recomputes the add; a linear an extern kernel reads (q/k/v of
attention) keeps its ``addmm``; grads are eager's."""
import pytest
import torch
import torch.nn.functional as F

from torchkiln.aot import aot_function, min_cut_rematerialization_partition, unfuse_addmm

from ._helpers import GraphRecorder

aten = torch.ops.aten


def _block(x, w1, b1, w2, b2, wq, bq):
    h = F.gelu(F.linear(x, w1, b1))  # gelu's backward reads the linear's result
    y = F.layer_norm(F.linear(h, w2, b2) + x, (8,))  # the layer norm's backward reads its input
    q = F.linear(y, wq, bq).view(4, 4, 8)  # read by a bmm: stays addmm
    return (q @ q.transpose(1, 2)).sum() + y.sum()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA"))])
def test_saved_linear_is_an_mm(device, monkeypatch):
    monkeypatch.setattr(unfuse_addmm, "_DEVICES", {"cuda", "cpu"})
    torch.manual_seed(0)
    args = [torch.randn(16, 8), torch.randn(32, 8), torch.randn(32), torch.randn(8, 32), torch.randn(8),
            torch.randn(8, 8), torch.randn(8)]
    args = [a.to(device) for a in args]
    args = [a.requires_grad_() for a in args]
    fw, bw = GraphRecorder(), GraphRecorder()
    f = aot_function(_block, fw, bw, partition_fn=min_cut_rematerialization_partition)
    f(*args).backward()
    ref = [a.detach().clone().requires_grad_() for a in args]
    _block(*ref).backward()
    torch.testing.assert_close([a.grad for a in args], [r.grad for r in ref], rtol=1e-4, atol=1e-4)

    fwd = fw.graphs[0].graph
    assert sum(n.target is aten.addmm.default for n in fwd.nodes) == 1, fw.graphs[0].code  # q's
    assert sum(n.target is aten.mm.default for n in fwd.nodes) == 2, fw.graphs[0].code
    saved = [a for a in next(n for n in fwd.nodes if n.op == "output").args[0] if isinstance(a, torch.fx.Node)]
    assert not any(a.target is aten.add.Tensor and a.args[0].target is aten.mm.default for a in saved), saved


def test_cpu_keeps_addmm():
    x, w, b = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    fw = GraphRecorder()
    aot_function(lambda x, w, b: F.gelu(F.linear(x, w, b)).sum(), fw, GraphRecorder(),
                 partition_fn=min_cut_rematerialization_partition)(x, w, b).backward()
    assert any(n.target is aten.addmm.default for n in fw.graphs[0].graph.nodes)
