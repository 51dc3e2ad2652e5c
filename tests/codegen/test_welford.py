"""The ``welford`` reduction: var / var_mean / std and the norms built on them, against eager.

``_var_mean`` lowers to one ``welford`` Reduce (mean and M2 in one pass over the data).
Checked on the C++ path (per-lane Welford state under ``omp simd``, tail lanes, the tiled
column path) and the Triton path (interpreter on CPU; persistent and looped renderings,
the looped one forced by lowering ``runtime.PERSISTENT_RNUMEL`` and reached naturally by
a row longer than it), forward through ``make_fx`` + ``compile_fx_inner`` and backward
through ``aot_function``.  Eager PyTorch is the oracle; ``codegen.config.debug`` makes a
compile failure raise instead of silently running eagerly.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln import codegen
from torchkiln.codegen import ir, metrics
from torchkiln.codegen.decompositions import decompositions

f32, f64, f16, bf16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
TOL = {f32: dict(atol=1e-4, rtol=1e-4), f64: dict(atol=1e-9, rtol=1e-9), f16: dict(atol=1e-2, rtol=1e-2),
       bf16: dict(atol=4e-2, rtol=4e-2)}

try:
    import triton  # noqa: F401

    from torchkiln.codegen.triton import runtime
    from torchkiln.codegen.triton.generator import interpreter_active

    HAS_TRITON = interpreter_active()
except ImportError:
    HAS_TRITON = False

# eager warns for var of fewer elements than the correction (the zero-size cases)
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0")

TRITON = pytest.mark.skipif(not HAS_TRITON, reason="needs triton with TRITON_INTERPRET=1 (no GPU)")
PATHS = [pytest.param("cpp", id="cpp"), pytest.param("triton", id="triton", marks=TRITON),
         pytest.param("triton_looped", id="triton_looped", marks=TRITON)]


@pytest.fixture
def path_config(request, monkeypatch):
    """``codegen.config`` for a path; ``triton_looped`` renders every reduction looped."""
    def enter(path):
        if path == "triton_looped":
            monkeypatch.setattr(runtime, "PERSISTENT_RNUMEL", 0)
        return codegen.config.patch(cpu_backend="cpp" if path == "cpp" else "triton", debug=True)

    return enter


def _compile(fn, xs, path_config, path):
    gm = make_fx(fn, decomposition_table=decompositions(), tracing_mode="fake")(*xs)
    fakes = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    with path_config(path):
        compiled = codegen.compile_fx_inner(gm, fakes)
        out = compiled(*xs)
    assert isinstance(compiled, codegen.compile_fx.CompiledGraph), "fell back to eager"
    return compiled, out


def _check(fn, xs, path_config, path, tol=None):
    """Compile ``fn`` (returning a tuple) for ``path``; compare with eager; return the kernels."""
    ref = fn(*xs)
    compiled, out = _compile(fn, xs, path_config, path)
    assert len(out) == len(ref)
    for a, b in zip(ref, out):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        torch.testing.assert_close(b, a, equal_nan=True, **(tol or TOL.get(a.dtype, dict(atol=0, rtol=0))))
    return compiled


def _reduces(compiled):
    return [s for k in compiled.kernels for lp in k.loops for s in lp.body if isinstance(s, ir.Reduce)]


def _randn(*shape, dtype=f32, offset=0.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=f64) + offset).to(dtype)


# ------------------------------------------------------------------ forward

FORWARD = {
    # name: (fn, input shape); shapes exercise whole lane chunks, tail lanes only, both
    "var_last": (lambda x: (x.var(-1),), (6, 200)),
    "var_mean_keepdim": (lambda x: tuple(torch.var_mean(x, -1, keepdim=True)), (5, 70)),
    "var_correction0": (lambda x: (x.var(1, correction=0),), (4, 33)),
    "var_correction2": (lambda x: (torch.var(x, 1, correction=2),), (4, 9)),
    "std": (lambda x: (x.std(-1), x.std(0, keepdim=True)), (7, 65)),
    "var_all": (lambda x: (x.var(), torch.var_mean(x, correction=0)[1]), (9, 31)),
    "var_dim0_column": (lambda x: tuple(torch.var_mean(x, 0)), (37, 40)),
    "var_middle": (lambda x: (x.var(1),), (3, 19, 5)),
    "var_outer_inner": (lambda x: tuple(torch.var_mean(x, (0, 2), keepdim=True)), (4, 3, 70)),
    "var_and_sum": (lambda x: (x.var(-1), x.sum(-1), x.amax(-1)), (5, 100)),
    "single_element": (lambda x: (x.var(-1), x.var(-1, correction=0), torch.var_mean(x, -1)[1]), (3, 1)),
    "size1_other_reductions": (lambda x: (x.sum(-1), x.amax(-1), x.argmax(-1), (x > 0).any(-1), x.prod(1)), (3, 1)),
    "zero_size_dim": (lambda x: tuple(torch.var_mean(x, 1)) + (x.var(1, keepdim=True),), (3, 0)),
    "zero_size_outer": (lambda x: tuple(torch.var_mean(x, -1)), (0, 5)),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(FORWARD))
def test_forward(name, path, path_config):
    fn, shape = FORWARD[name]
    _check(fn, [_randn(*shape)], path_config, path)


@pytest.mark.parametrize("path", PATHS)
def test_one_welford_reduce(path, path_config):
    """var_mean is one welford Reduce (not two sums), printed in str(kernel)."""
    compiled = _check(lambda x: tuple(torch.var_mean(x, -1)), [_randn(4, 100)], path_config, path)
    reduces = _reduces(compiled)
    assert [r.reduction_type for r in reduces] == ["welford"]
    assert f"{ir.welford_mean(reduces[0].name)}, {ir.welford_m2(reduces[0].name)} = welford(" in str(compiled.kernels[0])


@pytest.mark.parametrize("n", [500, 3000])
@pytest.mark.parametrize("path", PATHS)
def test_big_offset(path, n, path_config):
    """x = 1e4 + randn: the sum-of-squares formula loses every digit of the variance in
    float32; Welford keeps it (compared with float64).  Triton: 500 is persistent, 3000
    looped (longer than ``runtime.PERSISTENT_RNUMEL``)."""
    x = _randn(8, n, offset=1e4)
    ref = x.double().var(-1)
    _, (var, mean) = _compile(lambda x: tuple(torch.var_mean(x, -1)), [x], path_config, path)
    torch.testing.assert_close(var.double(), ref, rtol=2e-3, atol=0)
    torch.testing.assert_close(mean.double(), x.double().mean(-1), rtol=1e-6, atol=0)
    naive = (x * x).mean(-1) - x.mean(-1) ** 2  # float32 sum of squares: nowhere near
    assert not torch.allclose(naive.double() * n / (n - 1), ref, rtol=0.1)


def test_triton_row_longer_than_persistent_limit(path_config):
    if not HAS_TRITON:
        pytest.skip("needs triton with TRITON_INTERPRET=1 (no GPU)")
    n = runtime.PERSISTENT_RNUMEL * 2 + 37  # the launcher picks the looped kernel
    assert not runtime.reduction_config(2, n, True)[0]
    _check(lambda x: tuple(torch.var_mean(x, 1, correction=0)), [_randn(2, n, offset=50.0)], path_config, "triton")


@pytest.mark.parametrize("dtype", [f16, bf16, f64])
@pytest.mark.parametrize("path", ["cpp", pytest.param("triton", marks=TRITON)])
def test_dtypes(dtype, path, path_config):
    """float16/bfloat16 accumulate in float32 (outputs rounded once), float64 in float64."""
    x = _randn(6, 130, dtype=dtype, offset=3.0)
    compiled = _check(lambda x: tuple(torch.var_mean(x, -1)) + (x.std(0),), [x], path_config, path)
    assert {r.dtype for r in _reduces(compiled)} == {f64 if dtype == f64 else f32}


def test_cpp_source_is_vectorized(path_config):
    """Row welfords run in lanes under omp simd; column welfords take the tiled path."""
    compiled = _check(lambda x: (x.var(-1),), [_randn(4, 300)], path_config, "cpp")
    assert "KILN_WELFORD_LANES" in compiled.kernel_source and "#pragma omp simd" in compiled.kernel_source
    compiled = _check(lambda x: (x.var(0),), [_randn(300, 40)], path_config, "cpp")
    assert "xb +=" in compiled.kernel_source and "KILN_WELFORD_LANES" not in compiled.kernel_source


def test_cpp_short_inner_rows_two_pass(path_config):
    """batch_norm-like reductions (several dims, innermost short) run as two passes on
    C++ (mean, then squared deviations); still exact for big offsets."""
    x = _randn(16, 3, 6, 5, offset=1e4)
    compiled, (var, mean) = _compile(lambda x: tuple(torch.var_mean(x, (0, 2, 3))), [x], path_config, "cpp")
    assert "_sum +=" in compiled.kernel_source and "KILN_WELFORD_LANES" not in compiled.kernel_source
    torch.testing.assert_close(var.double(), x.double().var((0, 2, 3)), rtol=2e-3, atol=0)
    torch.testing.assert_close(mean.double(), x.double().mean((0, 2, 3)), rtol=1e-6, atol=0)


def test_cpp_welford_with_argmax_in_one_loop(path_config):
    """A welford sharing its reduction loop with argmax runs the scalar Welford update."""
    compiled = _check(lambda x: (x.var(-1), x.argmax(-1)), [_randn(5, 77)], path_config, "cpp")
    kinds = {r.reduction_type for r in _reduces(compiled)}
    assert kinds == {"welford", "argmax"}


# ------------------------------------------------------------------ norms, forward and backward

NORMS = {
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), (6, 100), 100),
    "layer_norm_2d": (lambda x, w, b: F.layer_norm(x, x.shape[-2:], w.view(1, -1).expand(x.shape[-2:]),
                                                   b.view(1, -1).expand(x.shape[-2:])), (3, 4, 21), 21),
    "batch_norm": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (6, 4, 5, 3), 4),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), (3, 6, 7, 5), 6),
    "var_std": (lambda x, w, b: x.var(-1) * w[0] + x.std(0).sum() * b[0], (5, 70), 2),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(NORMS))
def test_norm_forward(name, path, path_config):
    fn, shape, c = NORMS[name]
    _check(lambda *a: (fn(*a),), [_randn(*shape, offset=5.0), _randn(c, seed=1), _randn(c, seed=2)], path_config, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(NORMS))
def test_norm_backward(name, path, path_config):
    from torchkiln.aot import aot_function

    fn, shape, c = NORMS[name]
    xs = [_randn(*shape, offset=5.0), _randn(c, seed=1), _randn(c, seed=2)]
    ref_in = [x.clone().requires_grad_() for x in xs]
    ref = fn(*ref_in)
    go = _randn(*ref.shape, seed=3)
    ref_grads = torch.autograd.grad(ref, ref_in, go)
    before = metrics.eager_fallbacks
    with path_config(path):
        compiled = aot_function(fn, fw_compiler=codegen.compile_fx_inner, bw_compiler=codegen.compile_fx_inner,
                                decompositions=decompositions())
        res_in = [x.clone().requires_grad_() for x in xs]
        res = compiled(*res_in)
        grads = torch.autograd.grad(res, res_in, go)
    assert metrics.eager_fallbacks == before
    torch.testing.assert_close(res, ref, atol=1e-4, rtol=1e-4)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, atol=2e-4, rtol=2e-4)


def test_layer_norm_stays_one_kernel(path_config):
    """Welford keeps layer_norm's forward in one fused kernel (one reduction loop)."""
    before = metrics.generated_kernel_count
    compiled = _check(lambda x, w, b: (F.layer_norm(x, (64,), w, b),), [_randn(8, 64), _randn(64), _randn(64)],
                      path_config, "cpp")
    assert metrics.generated_kernel_count - before == 1
    assert [lp.reduction for lp in compiled.kernels[0].loops] == [True, True]


@pytest.mark.parametrize("path", ["cpp", pytest.param("triton", marks=TRITON)])
def test_dynamic_sizes(path):
    """torchkiln.compile(dynamic=True): one graph serves rows of every length (whole lane
    chunks, tail lanes only, both) and multi-dim reductions with a symbolic inner size."""
    import warnings

    import torchkiln

    def fn(x, y):
        return torch.var_mean(x, -1), F.layer_norm(x, x.shape[-1:]), y.var((0, 2), correction=0)

    torchkiln.reset()
    with codegen.config.patch(cpu_backend="cpp" if path == "cpp" else "triton"):
        compiled = torchkiln.compile(fn, dynamic=True)
        for i, (n, m) in enumerate([(100, 9), (7, 70), (128, 3), (130, 65)]):
            xs = [_randn(3, n, offset=100.0, seed=i), _randn(5, 2, m, offset=100.0, seed=i + 10)]
            with warnings.catch_warnings(record=True) as log:
                warnings.simplefilter("always")
                out = compiled(*xs)
            assert not [str(w.message) for w in log if "torchkiln" in str(w.message) or "torchkiln" in str(w.filename)]
            torch.testing.assert_close(out, fn(*xs), atol=1e-4, rtol=1e-4)
    torchkiln.reset()
