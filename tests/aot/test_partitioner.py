"""Partitioners: the forward/backward split is correct, and min-cut rematerialization
saves no more than the save-everything partition, recomputing only cheap ops."""
import pytest
import torch

from torchkiln.aot import aot_module, default_partition, min_cut_rematerialization_partition, nop
from torchkiln.bench.models.gpt import Block, GPTConfig

from ._helpers import GraphRecorder

aten = torch.ops.aten
NEVER_RECOMPUTED = {"mm", "bmm", "addmm", "convolution", "native_dropout", "bernoulli", "rand", "sum", "mean",
                    "native_layer_norm", "_softmax", "var_mean", "amax"}


def saved_bytes(bw_gm) -> int:
    total = 0
    for n in bw_gm.graph.nodes:
        if n.op == "placeholder" and not n.name.startswith("tangents"):
            v = n.meta["val"]
            if isinstance(v, torch.Tensor):
                total += v.numel() * v.element_size()
    return total


def _train_once(partition_fn, dropout=0.0):
    torch.manual_seed(0)
    block = Block(GPTConfig(n_embd=64, n_head=4, block_size=16, dropout=dropout))
    ref = Block(GPTConfig(n_embd=64, n_head=4, block_size=16, dropout=dropout))
    ref.load_state_dict(block.state_dict())
    fw, bw = GraphRecorder(), GraphRecorder()
    compiled = aot_module(block, fw, bw, partition_fn=partition_fn)
    x = torch.randn(2, 16, 64)
    torch.manual_seed(1)
    compiled(x).pow(2).mean().backward()
    torch.manual_seed(1)
    ref(x).pow(2).mean().backward()
    if dropout == 0.0:
        for (name, p), q in zip(block.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    return fw.graphs[0], bw.graphs[0]


@pytest.mark.parametrize("partition_fn", [default_partition, min_cut_rematerialization_partition])
def test_partitions_give_eager_grads(partition_fn):
    _train_once(partition_fn)


def test_min_cut_saves_no_more_than_default():
    _, bw_default = _train_once(default_partition)
    _, bw_min_cut = _train_once(min_cut_rematerialization_partition)
    assert saved_bytes(bw_min_cut) <= saved_bytes(bw_default)


def test_min_cut_recomputes_only_cheap_ops():
    fw, bw = _train_once(min_cut_rematerialization_partition, dropout=0.1)
    fw_names = {n.name for n in fw.graph.nodes if n.op == "call_function"}
    recomputed = [n for n in bw.graph.nodes if n.op == "call_function" and n.name in fw_names]
    assert recomputed, "expected some pointwise recomputation in a GPT-2 block"
    for n in recomputed:
        if isinstance(n.target, torch._ops.OpOverload):
            assert n.target.overloadpacket.__name__ not in NEVER_RECOMPUTED, n.format_node()
    # The dropout masks come from the forward: no random op in the backward.
    for n in bw.graph.nodes:
        if isinstance(n.target, torch._ops.OpOverload):
            assert torch.Tag.nondeterministic_seeded not in n.target.tags, n.format_node()


def test_custom_partition_fn_is_used():
    calls = []

    def partition(joint, inputs, *, num_fwd_outputs):
        calls.append(num_fwd_outputs)
        return default_partition(joint, inputs, num_fwd_outputs=num_fwd_outputs)

    from torchkiln.aot import aot_function

    x = torch.randn(3, requires_grad=True)
    aot_function(lambda x: x.sin(), nop, partition_fn=partition)(x).sum().backward()
    assert calls == [1]
    torch.testing.assert_close(x.grad, x.detach().cos())


def test_graph_constants_are_read_again_in_the_backward():
    rec = GraphRecorder()
    c = torch.tensor([1.0, 2.0, 3.0])
    from torchkiln.aot import aot_function

    x = torch.randn(3, requires_grad=True)
    aot_function(lambda x: (x * c).sin(), rec)(x).sum().backward()
    torch.testing.assert_close(x.grad, (x * c).cos().detach() * c)
    fw_outputs = next(n for n in rec.graphs[0].graph.nodes if n.op == "output").args[0]
    assert all(o.op != "get_attr" for o in fw_outputs)  # the constant is not saved
    assert any(n.op == "get_attr" and "val" in n.meta for n in rec.graphs[1].graph.nodes)


def test_min_cut_saves_a_forward_output_rather_than_recompute_it():
    # softmax's output is handed to the caller anyway: the backward reads it (as eager's
    # does) instead of recomputing exp(x - max) / sum from the saved input.
    from torchkiln.aot import aot_function

    fw, bw = GraphRecorder(), GraphRecorder()
    x = torch.randn(4, 256, requires_grad=True)  # rows long enough that saving x, max and sum once looked cheaper
    table = torch._decomp.decomposition_table  # softmax and its backward written out, as codegen's
    decomps = {op: table[op] for op in (aten._softmax.default, aten._softmax_backward_data.default)}
    out = aot_function(lambda t: torch.softmax(t, -1), fw, bw, partition_fn=min_cut_rematerialization_partition,
                       decompositions=decomps)(x)
    out.sum().backward()
    ref = x.detach().requires_grad_(True)
    torch.softmax(ref, -1).sum().backward()
    torch.testing.assert_close(x.grad, ref.grad)
    bw_ops = {n.target.overloadpacket.__name__ for n in bw.graphs[0].graph.nodes
              if isinstance(getattr(n, "target", None), torch._ops.OpOverload)}
    assert "exp" not in bw_ops, bw_ops
    fw_outputs = next(n for n in fw.graphs[0].graph.nodes if n.op == "output").args[0]
    assert fw_outputs[0] in fw_outputs[1:]  # the output is also the saved tensor


def test_min_cut_merges_a_value_both_passes_compute():
    # silu written out: the forward's x * sigmoid(x) and the backward's
    # g * sigmoid(x) * (1 + x * (1 - sigmoid(x))) compute sigmoid(x) twice in the joint
    # graph; merged before the cut, the backward recomputes it once, as eager's
    # silu_backward computes it once (the MoE backward computed it twice per expert).
    from torchkiln.aot import aot_function

    fw, bw = GraphRecorder(), GraphRecorder()
    # written out here: torch's own silu_backward decomposition spells sigmoid as
    # 1 / (1 + exp(-x)) in some versions (2.11), which no CSE can merge with sigmoid(x)
    def silu_backward(g, x):
        s = torch.sigmoid(x)
        return g * s * (1 + x * (1 - s))

    decomps = {aten.silu.default: lambda x: x * torch.sigmoid(x), aten.silu_backward.default: silu_backward}
    x = torch.randn(8, 32, requires_grad=True)
    w = torch.randn(32, 16, requires_grad=True)
    f = aot_function(lambda x, w: torch.nn.functional.silu(x) @ w, fw, bw,
                     partition_fn=min_cut_rematerialization_partition, decompositions=decomps)
    f(x, w).pow(2).sum().backward()
    rx, rw = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    (torch.nn.functional.silu(rx) @ rw).pow(2).sum().backward()
    torch.testing.assert_close((x.grad, w.grad), (rx.grad, rw.grad))

    def count(gm):
        return sum(n.target is aten.sigmoid.default for n in gm.graph.nodes)
    assert count(fw.graphs[0]) == 1 and count(bw.graphs[0]) == 1, bw.graphs[0].code


def test_cse_keeps_random_mutating_and_data_dependent_ops_apart():
    from torch.fx.experimental.proxy_tensor import make_fx
    from torchkiln.aot.cse import cse_graph

    def f(x):
        a, b = torch.rand_like(x), torch.rand_like(x)  # two draws, not one
        return a + b, x.sin() + x.sin(), x * 0.0 + x * -0.0, x.sum().item() + x.sum().item()

    gm = make_fx(f, tracing_mode="fake")(torch.randn(4))
    new, merged = cse_graph(gm.graph)
    ops = [n.target for n in new.nodes if n.op == "call_function"]
    assert ops.count(aten.rand_like.default) == 2
    assert ops.count(aten.sin.default) == 1
    assert ops.count(aten.mul.Tensor) == 2  # 0.0 and -0.0 are different arguments
    assert ops.count(aten.sum.default) == 1 and ops.count(aten._local_scalar_dense.default) == 2
    assert merged == 2


def _bw_op_names(gm):
    return {n.target.overloadpacket.__name__ for n in gm.graph.nodes
            if isinstance(getattr(n, "target", None), torch._ops.OpOverload)}


def test_min_cut_saves_a_value_both_passes_matmuls_read():
    # sin(x @ w1) is read by the forward's mm and by the backward's mm (w2's gradient):
    # the forward writes it anyway, so it is saved, not recomputed in the backward
    # (torch.compile's partitioner bans recomputing a node materialized in the backward).
    from torchkiln.aot import aot_function

    fw, bw = GraphRecorder(), GraphRecorder()
    args = [torch.randn(8, 32, requires_grad=True), torch.randn(32, 64, requires_grad=True),
            torch.randn(64, 16, requires_grad=True)]
    f = aot_function(lambda x, w1, w2: torch.sin(x @ w1) @ w2, fw, bw, partition_fn=min_cut_rematerialization_partition)
    f(*args).pow(2).sum().backward()
    ref = [a.detach().requires_grad_(True) for a in args]
    (torch.sin(ref[0] @ ref[1]) @ ref[2]).pow(2).sum().backward()
    torch.testing.assert_close([a.grad for a in args], [r.grad for r in ref])
    assert "sin" not in _bw_op_names(bw.graphs[0]), bw.graphs[0].code


def test_min_cut_sees_through_a_p0_dropout_clone():
    # dropout(p=0) in training mode is a clone: the attention probabilities are saved once
    # (for the backward's bmm and the softmax backward), exp is not recomputed.
    from torchkiln.aot import aot_function

    fw, bw = GraphRecorder(), GraphRecorder()
    table = torch._decomp.decomposition_table
    decomps = {op: table[op] for op in (aten._softmax.default, aten._softmax_backward_data.default)}

    def attn(s, v):
        return torch.nn.functional.dropout(torch.softmax(s, -1), 0.0, True) @ v

    args = [torch.randn(2, 16, 16, requires_grad=True), torch.randn(2, 16, 8, requires_grad=True)]
    f = aot_function(attn, fw, bw, partition_fn=min_cut_rematerialization_partition, decompositions=decomps)
    f(*args).pow(2).sum().backward()
    ref = [a.detach().requires_grad_(True) for a in args]
    attn(*ref).pow(2).sum().backward()
    torch.testing.assert_close([a.grad for a in args], [r.grad for r in ref])
    assert "exp" not in _bw_op_names(bw.graphs[0]), bw.graphs[0].code


def test_a_clone_returned_or_of_an_input_is_kept():
    from torchkiln.aot import aot_function

    x = torch.randn(4, 4, requires_grad=True)
    out = aot_function(lambda t: (t.clone(), t.sin().clone()), nop, partition_fn=min_cut_rematerialization_partition)(x)
    assert out[0].data_ptr() != x.data_ptr()
    torch.testing.assert_close(out[1], x.sin())
    (out[0].sum() + out[1].sum()).backward()
    torch.testing.assert_close(x.grad, 1 + x.detach().cos())


def test_batch_first_lstm_saves_its_time_major_input_once():
    """A batch-first LSTM over an embedding: the forward gathers the embedding straight into
    the time-major copy its first oneDNN layer reads, and saves that copy for the layer's
    backward; saving the embedding itself (a view of it) made the forward gather it in
    both layouts and the backward copy it again."""
    torch.manual_seed(0)
    embed, lstm = torch.nn.Embedding(50, 16), torch.nn.LSTM(16, 16, num_layers=2, batch_first=True)
    ids = torch.randint(0, 50, (3, 5))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.lstm = embed, lstm

        def forward(self, t):
            return self.lstm(self.embed(t))[0]

    net, fw, bw = Net(), GraphRecorder(), GraphRecorder()
    compiled = aot_module(net, fw, bw, partition_fn=min_cut_rematerialization_partition)
    compiled(ids).pow(2).sum().backward()
    got = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    net(ids).pow(2).sum().backward()
    for g, p in zip(got, net.parameters()):
        torch.testing.assert_close(g, p.grad)
    saved = [n for n in bw.graphs[0].graph.nodes if n.op == "placeholder" and not n.name.startswith("tangents")]
    fwd = {n.name: n for n in fw.graphs[0].graph.nodes}
    producers = [fwd[s.name].target for s in saved if s.name in fwd]
    assert aten.clone.default in producers and aten.permute.default not in producers, producers
