"""The generated wrapper's per-call work: the buffer-reuse plan never gives one storage to
two live buffers, GEMMs write into wrapper-allocated (reused) buffers through ``out=``,
extern calls go through the overload's builtin, views of buffers are made without the
``reinterpret`` helper where their storage offset or layout is known.  Eager is the oracle."""
from __future__ import annotations

import random

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln.codegen import compile_fx_inner, config
from torchkiln.codegen.decompositions import decompositions
from torchkiln.codegen.wrapper import plan_reuse
from torchkiln.codegen.wrapper_runtime import extern_callable


def _compile(fn, *args):
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    with config.patch(debug=True, fx_graph_cache=False, mkldnn_linear=False):
        return compile_fx_inner(gm, vals)


def _live_ranges_disjoint(allocations, uses, reuse):
    """Every storage (a chain of reuses) is held by one live buffer at a time."""
    born = {n: i for i, names in allocations for n in names}
    root = {}
    for i, names in allocations:
        for n in names:
            root[n] = root[reuse[n]] if n in reuse else n
    by_storage: dict = {}
    for n, r in root.items():
        by_storage.setdefault(r, []).append((born[n], uses.get(n, born[n]), n))
    for ranges in by_storage.values():
        ranges.sort()
        for (b0, d0, n0), (b1, d1, n1) in zip(ranges, ranges[1:]):
            assert d0 < b1, f"{n0} (live {b0}..{d0}) and {n1} (live {b1}..{d1}) share a storage"


@pytest.mark.parametrize("seed", range(200))
def test_plan_reuse_never_aliases_live_buffers(seed):
    rng = random.Random(seed)
    n_entries = rng.randint(1, 25)
    allocations, uses, keys = [], {}, {}
    count = 0
    for i in range(n_entries):
        names = []
        for _ in range(rng.choice([0, 1, 1, 2])):
            name = f"buf{count}"
            count += 1
            names.append(name)
            keys[name] = rng.choice([None, "a", "a", "b"])  # None: an input / extern result
            uses[name] = rng.randint(i, n_entries + 1)       # n_entries and above: an output
        allocations.append((i, names))
    reuse = plan_reuse(allocations, uses, keys.get)
    for new, old in reuse.items():
        assert keys[new] == keys[old] is not None
    assert len(set(reuse.values())) == len(reuse)  # each dead storage taken once
    _live_ranges_disjoint(allocations, uses, reuse)


def test_plan_reuse_waits_for_the_last_use():
    # buf0 is read by entry 1, which allocates buf1: buf1 must not take buf0's storage there
    allocations = [(0, ["buf0"]), (1, ["buf1"]), (2, ["buf2"])]
    uses = {"buf0": 1, "buf1": 3, "buf2": 3}
    assert plan_reuse(allocations, uses, lambda n: "k") == {"buf2": "buf0"}


def test_gemm_chain_reuses_buffers_through_out():
    torch.manual_seed(0)
    w1, w2, b = torch.randn(32, 32), torch.randn(32, 32), torch.randn(32)

    def fn(x):
        h = x
        for _ in range(4):  # each GEMM reads the previous one's result, which dies there
            h = torch.relu(torch.addmm(b, h, w1.t())) @ w2
        return (h, torch.mm(h, w1))

    x = torch.randn(8, 32)
    compiled = _compile(fn, x)
    src = compiled.source
    assert "out=buf" in src and "# reuse" in src
    assert "reinterpret(" not in src  # w1.t() is .t(); views of wrapper buffers as_strided
    torch.testing.assert_close(compiled(x), fn(x), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(compiled(x), fn(x), atol=1e-4, rtol=1e-4)  # second call: same


def test_out_buffer_is_not_an_input_or_live_output():
    torch.manual_seed(0)
    w = torch.randn(16, 16)

    def fn(x):
        a = x @ w           # returned: its storage is never reused
        b = torch.sigmoid(a) @ w
        c = b.t() @ b       # a transposed view of a live GEMM result as an argument
        return (a, c @ w, a.t())

    x = torch.randn(16, 16)
    compiled = _compile(fn, x)
    out = compiled(x)
    ref = fn(x)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    ptrs = [o.untyped_storage().data_ptr() for o in out]
    assert ptrs[0] == ptrs[2] and ptrs[0] != ptrs[1]  # a and a.t() alias, as eager's
    assert out[2].stride() == ref[2].stride()


def test_batched_gemm_views_and_reuse():
    torch.manual_seed(0)

    def fn(q, k, v):
        s = torch.softmax(torch.bmm(q, k.transpose(1, 2)), -1)
        o = torch.bmm(s, v)
        return (torch.baddbmm(o, o, v.transpose(1, 2)[:, :, :8].contiguous()).reshape(4, -1),)

    q, k, v = torch.randn(4, 8, 16), torch.randn(4, 8, 16), torch.randn(4, 8, 8)
    compiled = _compile(fn, q, k, v)
    torch.testing.assert_close(compiled(q, k, v), fn(q, k, v), atol=1e-4, rtol=1e-4)


def test_extern_calls_go_through_the_overload_builtin():
    op = torch.ops.aten.cumsum.default
    assert extern_callable(op) is op._op
    assert extern_callable(torch.add) is torch.add
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    torch.testing.assert_close(extern_callable(op)(a, 1), a.cumsum(1))
    # GEMMs go through their torch.* bindings (cheaper argument parsing, same kernel)
    assert extern_callable(torch.ops.aten.addmm.out) is torch.addmm
    torch.testing.assert_close(extern_callable(torch.ops.aten.mm.default)(a, b), a @ b)
    out = torch.empty(3, 5)
    extern_callable(torch.ops.aten.mm.out)(a, b, out=out)
    torch.testing.assert_close(out, a @ b)
    # convolution through torch.convolution (3x cheaper to call than op._op on CPU here)
    conv = torch.ops.aten.convolution.default
    assert extern_callable(conv) is torch.convolution
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    args = (x, w, torch.randn(4), [2, 1], [1, 0], [1, 1], False, [0, 0], 1)
    torch.testing.assert_close(extern_callable(conv)(*args), conv(*args))


def test_gemm_results_without_a_reused_buffer_are_allocated_by_the_gemm():
    # a GEMM result that takes no dead buffer's storage comes from the functional call (no
    # empty_strided + out=), addmm(b, x, w.t()) is linear(x, w, b); values as eager's
    torch.manual_seed(0)

    def fn(x, w1, b1, w2, b2):
        h = torch.nn.functional.linear(x, w1, b1).relu()
        return (torch.nn.functional.linear(h, w2, b2).relu() @ w1,)

    args = (torch.randn(4, 8), torch.randn(8, 8), torch.randn(8), torch.randn(8, 8), torch.randn(8))
    compiled = _compile(fn, *args)
    torch.testing.assert_close(compiled(*args), fn(*args))


def test_inputs_with_a_storage_offset():
    # views of graph inputs keep the input's storage offset (t() / view / reinterpret)
    torch.manual_seed(0)
    big = torch.randn(40, 16)
    w = big[8:24]  # offset 128 into the storage
    x = torch.randn(4, 2, 16)

    def fn(x, w):
        return (x.reshape(8, 16) @ w.t(), torch.mm(x.reshape(8, 16), w))

    compiled = _compile(fn, x, w)
    assert "reinterpret(" not in compiled.source and ".view(" in compiled.source
    torch.testing.assert_close(compiled(x, w), fn(x, w), atol=1e-4, rtol=1e-4)
    y = torch.randn(12, 2, 16)[4:8]  # another offset on the next call
    torch.testing.assert_close(compiled(y, w), fn(y, w), atol=1e-4, rtol=1e-4)


def test_buffers_are_allocated_in_the_shape_their_gemms_read():
    # a kernel's [4, 8, 16] result read only as the [32, 16] input of GEMMs is allocated
    # [32, 16] (no as_strided per call); mm(x, w.t()) is linear(x, w, None); read in two
    # shapes, a buffer keeps its own and the views are made per call
    torch.manual_seed(0)

    def fn(x, w1, w2):
        h = (x.relu() * 2).reshape(32, 16)
        y = (x.sin() + 1).reshape(32, 16)
        return (h @ w1.t(), h @ w2.t(), y @ w1.t(), torch.mm(y.reshape(16, 32), w2.reshape(32, 8)))

    args = (torch.randn(4, 8, 16), torch.randn(16, 16), torch.randn(16, 16))
    compiled = _compile(fn, *args)
    src = compiled.source
    assert "empty_strided((32, 16, )" in src and ".t()" not in src
    # y, read as [32, 16] and [16, 32]: both views made per call
    assert src.count("buf1.as_strided(") + src.count("buf1.view(") == 2, src
    for got, want in zip(compiled(*args), fn(*args)):
        torch.testing.assert_close(got, want)


def test_view_of_reused_buffer_made_once():
    """An MLP's backward (ReLU masks, bias sums, ``mm(d.t(), a)`` weight gradients): each
    layer's ``d`` takes the storage of the one before (a ``reuse`` of the same tensor
    object), so the ``t()`` view of it is made once, kept in a variable, and freed with
    the object; eager's results."""
    def fn(g, a1, a2, a3, a4, w2, w3, w4):
        outs, d = [], g * (a4 > 0)
        for a, a_prev, w in ((a4, a3, w4), (a3, a2, w3), (a2, a1, w2)):
            outs += [d.t() @ a_prev, d.sum(0)]
            d = (d @ w) * (a_prev > 0)
        return outs + [d.t() @ a1, d.sum(0)]

    torch.manual_seed(0)
    args = [torch.randn(16, 32) for _ in range(5)] + [torch.randn(32, 32) for _ in range(3)]
    compiled = _compile(fn, *args)
    lines = compiled.source.splitlines()
    made = [line.split("(", 2)[2].split(" :=")[0] for line in lines if ":= " in line]
    assert made and any(line.count(made[0]) and ":=" not in line and "del" not in line for line in lines), \
        compiled.source
    for var in made:  # every kept view is freed with its tensor object
        assert any(line.lstrip().startswith("del") and var in line or f"del {var}" in line or f", {var}" in line
                   for line in lines if "del" in line), (var, compiled.source)
    for got, want in zip(compiled(*args), fn(*args)):
        torch.testing.assert_close(got, want)


def test_extern_reads_an_expanded_argument_as_a_stride0_view():
    # SDPA's causal mask, expanded over batch and heads: stored once (8x8), passed as a
    # stride-0 alias as eager passes it, not materialized at (2, 3, 8, 8)
    def fn(q, k, v):
        i = torch.arange(8)
        mask = torch.where(i[None, :] <= i[:, None], 0.0, float("-inf"))[None, None].expand(2, 3, 8, 8)
        return (torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask),)

    q, k, v = (torch.randn(2, 3, 8, 4) for _ in range(3))
    compiled = _compile(fn, q, k, v)
    assert "(2, 3, 8, 8, ), (0, 0, 8, 1, )" in compiled.source
    assert "empty_strided((2, 3, 8, 8, )" not in compiled.source
    torch.testing.assert_close(compiled(q, k, v)[0], fn(q, k, v)[0], atol=1e-5, rtol=1e-5)


def test_expanded_attention_mask_training_matches_eager():
    import torchkiln

    def fn(q, k, v, bias):
        mask = (torch.tanh(bias) * 2)[:, None].expand(2, 3, 8, 8)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum()

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    args = [torch.randn(2, 3, 8, 4, device=dev, requires_grad=True) for _ in range(3)]
    args.append(torch.randn(2, 8, 8, device=dev, requires_grad=True))
    ref = fn(*args)
    ref_grads = torch.autograd.grad(ref, args)
    out = torchkiln.compile(fn, backend="inductor")(*args)
    grads = torch.autograd.grad(out, args)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)
