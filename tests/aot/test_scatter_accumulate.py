"""A tied embedding's gradient: the embedding rows are scattered straight into the LM
head's weight gradient (aot/scatter_accumulate.py), no zero-filled vocabulary-size
tensor and no add, and the grads are eager's."""
import pytest
import torch
import torch.nn.functional as F

import torchkiln
from torchkiln.aot import aot_function, min_cut_rematerialization_partition
from torchkiln.codegen.decompositions import decompositions

from ._helpers import GraphRecorder

aten = torch.ops.aten


def _tied(w, ids, target):
    h = F.embedding(ids, w) * 2.0
    return F.cross_entropy(h @ w.t(), target)


def _inputs(v=40, d=8, n=12):
    torch.manual_seed(0)
    ids = torch.randint(0, v, (n,))
    ids[:3] = 5  # repeated rows accumulate
    return torch.randn(v, d, requires_grad=True), ids, torch.randint(0, v, (n,))


def test_tied_embedding_grad_has_no_zero_fill_nor_add():
    w, ids, t = _inputs()
    bw = GraphRecorder()
    decomps = decompositions()  # codegen's table, as torchkiln.compile's training graphs
    f = aot_function(_tied, GraphRecorder(), bw, partition_fn=min_cut_rematerialization_partition,
                     decompositions=decomps)
    f(w, ids, t).backward()
    ref = w.detach().requires_grad_(True)
    _tied(ref, ids, t).backward()
    torch.testing.assert_close(w.grad, ref.grad)
    nodes = list(bw.graphs[0].graph.nodes)
    puts = [n for n in nodes if n.target in (aten.index_put.default, aten._unsafe_index_put.default)]
    assert len(puts) == 1 and puts[0].args[0].target is aten.mm.default, bw.graphs[0].code
    assert not any(n.target in (aten.full.default, aten.zeros.default) for n in nodes), bw.graphs[0].code


@pytest.mark.parametrize("bad", [False, True])
def test_compiled_tied_embedding_grad_matches_eager(bad):
    w, ids, t = _inputs()
    fn = torchkiln.compile(_tied)
    if bad:  # an out-of-range id still raises, as eager's embedding does
        ids = ids.clone()
        ids[4] = 40
        with pytest.raises((IndexError, RuntimeError)):
            fn(w, ids, t).backward()
        return
    fn(w, ids, t).backward()
    ref = w.detach().requires_grad_(True)
    _tied(ref, ids, t).backward()
    torch.testing.assert_close(w.grad, ref.grad)


def test_broadcast_addend_is_left_alone():
    """``a`` of another shape than the scatter (broadcast by the add) keeps the zeros."""
    def f(w, b, ids):
        return (F.embedding(ids, w).sum() + (w * b).sum())

    torch.manual_seed(0)
    w, b = torch.randn(10, 4, requires_grad=True), torch.randn(4, requires_grad=True)
    ids = torch.tensor([1, 1, 3])
    fn = torchkiln.compile(f)
    fn(w, b, ids).backward()
    rw, rb = w.detach().requires_grad_(True), b.detach().requires_grad_(True)
    f(rw, rb, ids).backward()
    torch.testing.assert_close((w.grad, b.grad), (rw.grad, rb.grad))
