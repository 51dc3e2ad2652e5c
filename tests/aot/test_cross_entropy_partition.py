"""Cross-entropy's training graph: the forward saves the logits and two per-row
statistics, never a second tensor of the logits' size (log_softmax, its exp, nll_loss's
one-hot scatter), the backward sums no one-hot, and the grads are eager's."""
import pytest
import torch
import torch.nn.functional as F

from torchkiln.aot import aot_function, min_cut_rematerialization_partition

from ._helpers import GraphRecorder

aten = torch.ops.aten
_DECOMPOSED = (aten._log_softmax.default, aten._log_softmax_backward_data.default,
               aten.nll_loss_forward.default, aten.nll_loss_backward.default)


def _loss(h, w, t):
    return F.cross_entropy(h @ w.t(), t)


@pytest.mark.parametrize("ignored", [False, True])
def test_cross_entropy_saves_the_logits_once(ignored):
    rows, v, d = 8, 50, 4
    torch.manual_seed(0)
    h, w = torch.randn(rows, d, requires_grad=True), torch.randn(v, d, requires_grad=True)
    t = torch.randint(0, v, (rows,))
    if ignored:
        t[::3] = -100
    fw, bw = GraphRecorder(), GraphRecorder()
    decomps = {op: torch._decomp.decomposition_table[op] for op in _DECOMPOSED}
    f = aot_function(_loss, fw, bw, partition_fn=min_cut_rematerialization_partition, decompositions=decomps)
    f(h, w, t).backward()
    rh, rw = h.detach().requires_grad_(True), w.detach().requires_grad_(True)
    _loss(rh, rw, t).backward()
    torch.testing.assert_close((h.grad, w.grad), (rh.grad, rw.grad))

    saved = [n for n in bw.graphs[0].graph.nodes if n.op == "placeholder" and not n.name.startswith("tangents")]
    full = [n for n in saved if isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].numel() >= rows * v]
    assert len(full) == 1 and full[0].meta["val"].shape == (rows, v), [(s.name, s.meta["val"].shape) for s in saved]
    producer = {x.name: x for x in fw.graphs[0].graph.nodes}[full[0].name]
    assert producer.target is aten.mm.default, producer.format_node()  # the logits, written by the matmul anyway
    for gm in (fw.graphs[0], bw.graphs[0]):
        assert not any(x.target is aten.scatter.value for x in gm.graph.nodes), gm.code
    # the one-hot's row sum is the row's own value: the backward is pointwise over the logits
    assert not any(x.target is aten.sum.dim_IntList and x.args[0].meta["val"].shape == (rows, v)
                   for x in bw.graphs[0].graph.nodes), bw.graphs[0].code
