"""Code generator fixes found by profiling the model suite's slow CPU rows: each test
checks the generated code's shape (what made the row slow) and, with eager PyTorch as
the oracle, its values."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln.codegen import compile_fx_inner, config
from torchkiln.codegen.decompositions import decompositions


def _compile(fn, *args):
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    with config.patch(debug=True):
        return compile_fx_inner(gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])


def _check(compiled, fn, *args, tol=1e-5):
    for a, b in zip(compiled(*args), fn(*args)):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, atol=tol, rtol=tol, equal_nan=True)


def _gelu_tanh(x):
    # transformers' NewGELUActivation (hf_gpt2): x.pow(3.0) in the inner loop
    return (0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0)))),)


def test_gelu_tanh_pow_is_products():
    x = torch.randn(64, 96)
    c = _compile(_gelu_tanh, x)
    assert "kiln::pow" not in c.kernel_source
    _check(c, _gelu_tanh, x)


@pytest.mark.parametrize("exponent", [1, 3.0, 4, 5.0, 7, 31, -1, -2.0, -3, -5])
def test_pow_integer_exponent_float(exponent):
    def fn(x):
        return (torch.pow(x, exponent),)

    x = torch.rand(8, 33) + 0.5
    x[0, 0] = 0.0
    x[0, 1] = -1.25
    c = _compile(fn, x)
    assert "kiln::pow" not in c.kernel_source
    _check(c, fn, x, tol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("exponent", [3, 5])
def test_pow_integer_exponent_integer_dtype(dtype, exponent):
    def fn(x):
        return (torch.pow(x, exponent),)

    x = torch.arange(-20, 20, dtype=dtype).reshape(4, 10)
    _check(_compile(fn, x), fn, x, tol=0)


@pytest.mark.parametrize("exponent", [2.5, 0.0, 40.0, float("inf"), float("nan")])
def test_pow_other_exponents_keep_pow(exponent):
    def fn(x):
        return (torch.pow(x, exponent),)

    x = torch.rand(8, 16) + 0.5
    c = _compile(fn, x)
    assert "kiln::pow" in c.kernel_source
    _check(c, fn, x, tol=1e-5)


def test_pow_half_integer_exponent():
    def fn(x):
        return (torch.pow(x, 3),)

    x = (torch.rand(8, 16) + 0.5).to(torch.bfloat16)
    _check(_compile(fn, x), fn, x, tol=1e-2)


def _masked_softmax(x, mask):
    # nanoGPT's causal attention without SDPA: masked_fill(~mask, -inf), softmax
    return (torch.softmax(x.masked_fill(~mask, float("-inf")), -1),)


def test_bool_buffers_are_bytes_compared_with_zero():
    x = torch.randn(2, 3, 16, 16)
    mask = torch.tril(torch.ones(16, 16, dtype=torch.bool))
    c = _compile(_masked_softmax, x, mask)
    assert "const bool*" not in c.kernel_source and "const uint8_t* __restrict__" in c.kernel_source
    _check(c, _masked_softmax, x, mask)


def test_bool_store_load_and_reductions():
    def fn(x, m):
        b = (x > 0) ^ m
        return b, b.any(-1), b.all(0), torch.where(b, x, -x).sum(), (~m).to(torch.float32) * x

    x = torch.randn(9, 17)
    m = torch.rand(9, 17) > 0.5
    c = _compile(fn, x, m)
    _check(c, fn, x, m, tol=1e-5)


def _bn_relu_grad_sums(g, y, x, mean):
    # batch_norm backward after relu: sums over N, H, W of a relu-masked gradient
    gm = torch.where(y <= 0, 0.0, g)
    return gm.sum((0, 2, 3)), (gm * (x - mean[None, :, None, None])).sum((0, 2, 3))


def _plain_sums(x):
    return x.sum((0, 2, 3)), (x * x).sum((0, 2, 3))


def test_select_in_multi_dim_reduction_vectorizes_innermost_loop():
    g, y, x = (torch.randn(3, 5, 7, 20) for _ in range(3))
    mean = torch.randn(5)
    c = _compile(_bn_relu_grad_sums, g, y, x, mean)
    assert "collapse(3)" not in c.kernel_source and "#pragma omp simd reduction" in c.kernel_source
    _check(c, _bn_relu_grad_sums, g, y, x, mean, tol=1e-4)


def test_plain_multi_dim_reduction_keeps_collapsed_simd():
    x = torch.randn(3, 5, 7, 20)
    c = _compile(_plain_sums, x)
    assert "collapse(3)" in c.kernel_source
    _check(c, _plain_sums, x, tol=1e-4)


def test_batch_norm_training_forward_backward():
    # both reduction shapes (welford two-pass forward, masked sums backward) end to end
    import torchkiln

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    x = torch.randn(2, 3, 9, 9)
    ref = m(x)
    ref.sum().backward()
    ref_grads = [p.grad.clone() for p in m.parameters()]
    torch.manual_seed(0)
    m3 = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    out = torchkiln.compile(m3)(x)
    out.sum().backward()
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    for p, r in zip(m3.parameters(), ref_grads):
        torch.testing.assert_close(p.grad, r, atol=1e-4, rtol=1e-4)


def _rotary(q, k, inv_freq, pos):
    # transformers' Llama rotary embedding: cos/sin of (batch, seq, dim) broadcast over heads
    freqs = pos[:, :, None].float() * inv_freq[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def apply(x):  # as apply_rotary_pos_emb: unsqueezes cos/sin for each of q and k
        h = x.shape[-1] // 2
        return x * cos.unsqueeze(1) + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin.unsqueeze(1)

    return apply(q), apply(k)


def test_rotary_cos_sin_computed_once_not_per_head():
    q, k = torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16)
    inv_freq = torch.rand(8)
    pos = torch.arange(8)[None].expand(2, 8)
    c = _compile(_rotary, q, k, inv_freq, pos)
    # one kernel computes them (its inner loop split in two at the cat: each stretch has
    # one cos and one sin); the kernels looping over heads only read them
    with_trig = [k for k in c.kernel_source.split('extern "C"') if "kiln::cos(" in k or "kiln::sin(" in k]
    assert len(with_trig) == 1 and with_trig[0].count("kiln::cos(") == with_trig[0].count("#pragma omp simd") == 2
    _check(c, _rotary, q, k, inv_freq, pos, tol=1e-5)


def test_softmax_exp_stays_fused():
    # exp has two users (sum, div) but none broadcasts it: no extra buffer or kernel
    c = _compile(lambda x: (torch.softmax(x, -1),), torch.randn(4, 33))
    assert len(c.kernels) == 1


@pytest.mark.parametrize("train", [False, True])
def test_eval_batch_norm_relu_inference_fuses(train):
    # resnet inference: eval batch_norm (_native_batch_norm_legit, training=False) was an
    # extern kernel per layer; training=True under no_grad stays the ATen op and still
    # updates the running statistics as eager does
    import copy

    import torchkiln
    from torchkiln.codegen import metrics

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).train(train)
    m[1].running_mean.uniform_(-1, 1)
    m[1].running_var.uniform_(0.5, 2)
    m2 = copy.deepcopy(m)
    x = torch.randn(2, 3, 9, 9)
    metrics.reset()
    with torch.no_grad():
        ref = m(x)
        out = torchkiln.compile(m2)(x)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(m2[1].running_mean, m[1].running_mean)
    torch.testing.assert_close(m2[1].running_var, m[1].running_var)
    if not train:
        assert not metrics.fallback_ops


def _attention_after_transpose(x, w):
    # llama/gpt2: q = (x @ w).view(b, s, h, d).transpose(1, 2), then a pointwise op (rotary)
    # before sdpa: eager's q keeps the transposed strides, and so does sdpa's output
    b, s, _ = x.shape
    q = (x @ w).view(b, s, 4, 8).transpose(1, 2) * 2.0
    return (torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(b, s, 32),)


def test_extern_argument_keeps_eager_strides_no_output_copy():
    x, w = torch.randn(2, 16, 32), torch.randn(32, 32)
    c = _compile(_attention_after_transpose, x, w)
    _check(c, _attention_after_transpose, x, w, tol=1e-5)  # binds the wrapper
    namespace = c.current_callable.__globals__
    real, copies = namespace["restride"], []

    def spy(t, size, stride):
        out = real(t, size, stride)
        if out is not t:
            copies.append((size, stride))
        return out

    namespace["restride"] = spy
    _check(c, _attention_after_transpose, x, w, tol=1e-5)
    assert copies == []


def test_eval_batch_norm_with_grad_matches_eager():
    # the decomposed eval batch_norm inside a joint graph: autograd's formula for the op
    # reads the running statistics, not the decomposition's saved ones
    import copy

    import torchkiln

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).eval()
    m[1].running_mean.uniform_(-1, 1)
    m[1].running_var.uniform_(0.5, 2)
    m2 = copy.deepcopy(m)
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    m(x).square().sum().backward()
    torchkiln.compile(m2)(x2).square().sum().backward()
    torch.testing.assert_close(x2.grad, x.grad, atol=1e-5, rtol=1e-4)
    for p, q in zip(m.parameters(), m2.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-4, rtol=1e-4)


def _kernel_count(c) -> int:
    import re
    return len(re.findall(r'extern "C" \w+ kernel\d+\(', c.kernel_source))


def test_recompute_from_inputs_fuses_with_a_later_reader():
    # hf_bert's backward: gelu(x) recomputed from a saved input for the weight gradient,
    # and gelu's backward reading x after the input-gradient matmul: one pass over x
    def fn(x, g, w):
        y = torch.nn.functional.gelu(x)
        dy = g @ w
        gw = g.t() @ y
        return gw, torch.ops.aten.gelu_backward(dy, x)

    x, g, w = torch.randn(16, 32), torch.randn(16, 8), torch.randn(8, 32)
    c = _compile(fn, x, g, w)
    assert _kernel_count(c) == 1
    _check(c, fn, x, g, w, tol=1e-4)


def test_deferred_node_runs_before_a_mutation_of_its_input():
    # y reads only the input: the scheduler defers it, but not past the input's mutation
    import torchkiln

    def fn(x):
        y = x * 2
        x.add_(1)
        return y

    x = torch.randn(4, 8)
    arg = x.clone()
    out = torchkiln.compile(fn)(arg)
    torch.testing.assert_close(out, x * 2)
    torch.testing.assert_close(arg, x + 1)
