"""The C++ code generator's own decisions: fusion (kernel counts), buffer reuse,
wrapper printing, dynamic sizes reusing kernels, the on-disk .so cache across
processes, counted fallbacks.  Eager PyTorch is the oracle for every result."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln.codegen import compile_fx_inner, config, metrics
from torchkiln.codegen.cpp.kernel import CppKernel
from torchkiln.codegen.decompositions import decompositions
from torchkiln.utils.counters import counters


def compile_and_check(fn, *args, tracing_mode="real", atol=1e-5):
    gm = make_fx(fn, decomposition_table=decompositions(), tracing_mode=tracing_mode)(*args)
    metrics.reset()
    with config.patch(debug=True):
        compiled = compile_fx_inner(gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])
    out = compiled(*args)
    ref = fn(*args)
    for a, b in zip(out, ref):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, atol=atol, rtol=atol, equal_nan=True)
    return compiled


def test_pointwise_chain_is_one_kernel():
    c = compile_and_check(lambda x, y: (((x * 2).sin() + y).relu() - 1,), torch.randn(8, 16), torch.randn(16))
    assert metrics.generated_kernel_count == 1
    assert "#pragma omp simd" in c.kernel_source


def test_softmax_is_one_kernel_with_three_loops():
    c = compile_and_check(lambda x: (torch.softmax(x, -1),), torch.randn(4, 33))
    assert metrics.generated_kernel_count == 1
    (kernel,) = c.kernels
    assert [lp.reduction for lp in kernel.loops].count(True) == 3


def test_layer_norm_gelu_fuses_into_one_kernel():
    ln = torch.nn.functional.layer_norm
    fn = lambda x, w, b: (torch.nn.functional.gelu(ln(x, (32,), w, b)),)  # noqa: E731
    compile_and_check(fn, torch.randn(6, 32), torch.randn(32), torch.randn(32))
    assert metrics.generated_kernel_count == 1


def test_sibling_reductions_share_a_kernel():
    compile_and_check(lambda x: (x.sum(-1), x.amax(-1), x.argmin(-1)), torch.randn(5, 7))
    assert metrics.generated_kernel_count == 1


def test_mm_is_an_extern_kernel_between_fused_kernels():
    c = compile_and_check(lambda x, w: ((x.relu() @ w).tanh(),), torch.randn(4, 8), torch.randn(8, 3))
    assert metrics.generated_kernel_count == 2
    assert metrics.extern_kernel_count == 1
    assert "aten.mm" in c.source or "_c" in c.source


def test_views_are_index_rewrites():
    fn = lambda x: ((x.t()[1:, ::2] * 3).unsqueeze(0).expand(2, -1, -1),)  # noqa: E731
    c = compile_and_check(fn, torch.randn(6, 5))
    assert metrics.generated_kernel_count == 1
    assert "as_strided" not in c.source


def test_output_alias_of_input_is_a_view():
    x = torch.randn(3, 4)
    c = compile_and_check(lambda a: (a.t(), a.view(-1)), x)
    out = c(x)
    assert out[0].data_ptr() == x.data_ptr() and out[1].data_ptr() == x.data_ptr()
    assert metrics.generated_kernel_count == 0


def test_dead_buffers_are_freed_and_reused():
    def fn(x, w):
        a = (x + 1) @ w
        b = (a.sin() + 1) @ w
        c = (b.cos() + 1) @ w
        return (c,)

    c = compile_and_check(fn, torch.randn(8, 8), torch.randn(8, 8))
    assert "del " in c.source
    assert "# reuse" in c.source


def test_wrapper_binds_symbols_and_kernels_take_sizes():
    x = torch.randn(5, 8)
    c = compile_and_check(lambda a: ((a * 2).sum(0),), x, tracing_mode="symbolic")
    assert ".size(0)" in c.source
    for n in (3, 11):
        y = torch.randn(n, 8)
        torch.testing.assert_close(c(y)[0], (y * 2).sum(0))


def test_output_code_log(capfd):
    from torchkiln.utils.logging import set_logs

    set_logs("output_code")
    try:
        compile_and_check(lambda x: (x.exp(),), torch.randn(3))
    finally:
        set_logs()
    err = capfd.readouterr().err
    assert "def call(" in err and 'extern "C"' in err


def test_fallback_is_counted():
    compile_and_check(lambda x: (torch.erfinv(x * 0.5).sin(),), torch.rand(16))
    assert metrics.fallback_ops["aten.erfinv.default"] == 1
    assert metrics.generated_kernel_count == 2


def test_no_implicit_fallback_raises():
    gm = make_fx(lambda x: (torch.erfinv(x),))(torch.rand(4))
    with config.patch(implicit_fallbacks=False, debug=True):
        with pytest.raises(NotImplementedError):
            compile_fx_inner(gm, [torch.rand(4)])


def test_failed_compile_falls_back_to_eager_with_warning():
    gm = make_fx(lambda x: (torch.erfinv(x),))(torch.rand(4))
    x = torch.rand(4)
    with config.patch(implicit_fallbacks=False):
        with pytest.warns(UserWarning, match="fell back to eager"):
            compiled = compile_fx_inner(gm, [x])
    torch.testing.assert_close(compiled(x)[0], torch.erfinv(x))


def test_half_and_bfloat16_accumulate_in_float():
    for dt in (torch.float16, torch.bfloat16):
        x = torch.randn(4, 300).to(dt)
        compile_and_check(lambda a: (a.sum(-1), (a * 2).amax(-1)), x, atol=3e-2)


def test_nan_propagates_through_max_and_argmax():
    x = torch.randn(3, 9)
    x[1, 4] = float("nan")
    c = compile_and_check(lambda a: (a.amax(-1), a.argmax(-1), torch.maximum(a, a * 0)), x)
    assert torch.isnan(c(x)[0][1])


def test_so_cache_is_reused_by_another_process(tmp_path):
    script = textwrap.dedent("""
        import torch
        from torch.fx.experimental.proxy_tensor import make_fx
        from torchkiln.codegen import compile_fx_inner
        from torchkiln.utils.counters import counters
        x = torch.randn(7, 3)
        gm = make_fx(lambda a: ((a * 3.5).cos(),))(x)
        out = compile_fx_inner(gm, [x])(x)[0]
        assert torch.allclose(out, (x * 3.5).cos(), atol=1e-6)
        print("HITS", counters["inductor"]["cpp_cache_hit"], "MISSES", counters["inductor"]["cpp_cache_miss"])
    """)
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(tmp_path))
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert "HITS 0 MISSES 1" in first.stdout, first.stderr[-2000:]
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert "HITS 1 MISSES 0" in second.stdout, second.stderr[-2000:]
    assert list((tmp_path / "cpp").glob("*.so"))


def test_cache_hit_counted_in_process():
    x = torch.randn(9)
    gm = make_fx(lambda a: (a.abs() + 7.25,))(x)
    compile_fx_inner(gm, [x])
    before = counters["inductor"]["cpp_cache_hit"]
    compile_fx_inner(gm, [x])
    assert counters["inductor"]["cpp_cache_hit"] == before + 1


def test_column_reductions_are_tiled_and_correct():
    x = torch.randn(37, 2 * CppKernel.TILE + 45)  # two whole tiles and a partial one
    x[3, 5] = float("nan")
    c = compile_and_check(lambda a: (a.sum(0), (a * 2).amax(0), a.var(0), a.mean(0, keepdim=True)), x, atol=1e-4)
    assert f"xb += {CppKernel.TILE}" in c.kernel_source


def test_scatter_and_index_put_lower_to_kernels():
    x, i, v = torch.randn(6, 4), torch.tensor([0, 2, 2, 5]), torch.randn(4, 4)
    compile_and_check(lambda a, idx, val: (torch.index_put(a, (idx,), val, accumulate=True) * 2,
                                           a.scatter_add(0, idx.view(4, 1).expand(4, 4), val),
                                           torch.slice_scatter(a, val[:3], 0, 1, 6, 2),
                                           a[idx] * val), x, i, v)
    assert not metrics.fallback_ops


def test_copy_into_input_is_a_kernel_store():
    def fn(a, b):
        torch.ops.aten.copy_.default(a, b * 2)
        return (b + 1,)

    x, y = torch.randn(5), torch.randn(5)
    gm = make_fx(fn)(x.clone(), y)
    compiled = compile_fx_inner(gm, [x, y])
    out = compiled(x, y)
    torch.testing.assert_close(x, y * 2)
    torch.testing.assert_close(out[0], y + 1)


def test_graph_constants_become_wrapper_globals():
    compile_and_check(lambda a: (a + torch.tensor([1.0, 2.0, 3.0]),), torch.randn(2, 3))


def test_dynamic_dimension_reuses_one_set_of_kernels():
    import torchkiln
    from torchkiln.testing import CompileCounterWithBackend

    torchkiln.reset()
    counter = CompileCounterWithBackend("inductor")
    fn = torchkiln.compile(lambda x: torch.softmax(x * 2, -1).sum(0), backend=counter, dynamic=True)
    metrics.reset()
    for n in (5, 9, 17):
        x = torch.randn(n, 12)
        torch.testing.assert_close(fn(x), torch.softmax(x * 2, -1).sum(0))
    assert counter.frame_count == 1
    assert metrics.graphs_compiled == 1


def test_softmax_stores_exp_once_and_reloads_it():
    c = compile_and_check(lambda x: (torch.softmax(x, -1),), torch.randn(5, 40))
    kernels = c.kernel_source.split('extern "C" void kernel', 1)[1]
    assert kernels.count("kiln::exp(") == 1


def test_inputs_with_other_strides_than_traced_are_read_correctly():
    x = torch.randn(4, 8)
    gm = make_fx(lambda a: (a * 2 + 1,))(x)
    compiled = compile_fx_inner(gm, [x])
    for y in (torch.randn(8, 4).t(), torch.ones(1).expand(4, 8), torch.randn(4, 16)[:, ::2]):
        torch.testing.assert_close(compiled(y)[0], y * 2 + 1)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def test_inner_cat_mask_splits_the_vector_loop():
    # rotate_half's cat along the innermost dim: two branch-free loops (x3 < 16, x3 >= 16)
    # instead of one loop of masked loads, which GCC does not vectorize
    fn = lambda x, c, s: (x * c + _rotate_half(x) * s,)  # noqa: E731
    c = compile_and_check(fn, torch.randn(2, 3, 5, 32), torch.randn(5, 32), torch.randn(5, 32))
    assert "= 16; x3 < 32; x3++)" in c.kernel_source


def test_inner_split_points_from_padding_and_offsets():
    # constant_pad_nd: mask ``x - 2 >= 0 and x - 2 < 7`` -> three stretches; and a cat of
    # three pieces with an odd extent
    x = torch.randn(3, 7)
    c = compile_and_check(lambda t: (torch.nn.functional.pad(t, (2, 3), value=1.5) * 2,), x)
    assert "= 2; x1 < 9; x1++)" in c.kernel_source
    a, b, d = torch.randn(4, 3), torch.randn(4, 5), torch.randn(4, 1)
    compile_and_check(lambda p, q, r: (torch.cat([p, q.exp(), r], -1) + 1,), a, b, d)


def test_inner_segments_limits_and_comparisons():
    from torchkiln.codegen.cpp.kernel import inner_segments, substitute
    from torchkiln.codegen.ir import Constant, IndexValue, Masked, Op, Store
    import sympy

    x = sympy.Symbol("x3", integer=True)
    iv = IndexValue(x, torch.int64)
    lt = Op("lt", (iv, Constant(16, torch.int64)), torch.bool)
    gt = Op("gt", (Constant(3, torch.int64), IndexValue(x - 5, torch.int64)), torch.bool)  # x < 8
    body = Op("where", (lt, Constant(1.0, torch.float32), Constant(2.0, torch.float32)), torch.float32)
    st = Store("buf0", x, Masked(gt, body, 0.0, torch.float32))
    segs = inner_segments([st], x, 32)
    assert [(lo, hi) for lo, hi, _ in segs] == [(0, 8), (8, 16), (16, 32)]
    for lo, hi, known in segs:
        assert known[lt] == Constant(hi <= 16, torch.bool) and known[gt] == Constant(hi <= 8, torch.bool)
        out = substitute(st.value, known)
        assert out.mask == known[gt] and out.body.args[0] == known[lt]
    assert inner_segments([st], x, sympy.Symbol("s0", integer=True)) is None  # symbolic extent
    assert inner_segments([st], x, 8) is None  # no cut inside the range
