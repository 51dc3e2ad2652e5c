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


def _one_hot_loss(x, idx):
    onehot = torch.zeros(x.shape).scatter(1, idx.unsqueeze(1), 1.0)
    return (x * onehot).sum()


def test_rewritten_one_hot_checks_its_index():
    """A user's one-hot scatter is rewritten to a ``where`` too, and an out-of-range index
    still raises as in eager's scatter (never a row with no value)."""
    import torchkiln

    x = torch.randn(6, 5, requires_grad=True)
    fn = torchkiln.compile(_one_hot_loss)
    good = torch.tensor([0, 4, 2, 2, 1, 3])
    got = fn(x, good)
    got.backward()
    ref_x = x.detach().requires_grad_(True)
    ref = _one_hot_loss(ref_x, good)
    ref.backward()
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(x.grad, ref_x.grad)
    bad = torch.tensor([0, 4, 2, 7, 1, 3])
    with pytest.raises(RuntimeError):
        _one_hot_loss(x, bad)
    with pytest.raises((RuntimeError, IndexError)):
        fn(x, bad)
