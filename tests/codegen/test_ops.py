"""Op-correctness suite for the code generator, against eager PyTorch.

Every case runs on three "device paths":

- ``cpp``: CPU tensors through the C++/OpenMP kernels (``codegen.config.cpu_backend="cpp"``);
- ``triton``: CPU tensors through the Triton kernels, run by Triton's interpreter
  (``cpu_backend="triton"``; tests/conftest.py sets ``TRITON_INTERPRET=1`` before triton
  is imported, where there is no GPU); a representative subset, float32 only, since the
  interpreter is slow;
- ``cuda``: CUDA tensors through real Triton kernels (only where a GPU exists).

and along three routes into the code generator:

- ``test_forward``: ``make_fx`` (core-ATen decompositions) + ``compile_fx_inner``, so that
  codegen is exercised on its own;
- ``test_backward``: ``torchkiln.aot.aot_function`` with ``compile_fx_inner`` as the
  forward and backward compiler, gradients compared with eager's;
- ``test_compile``: the public path, ``torchkiln.compile(fn, backend="inductor")``,
  forward and backward, input mutation and outputs aliasing inputs.

A compile that fell back to eager (torchkiln warns when it does) fails the test: a
silent fallback would make the suite vacuous.
"""
from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln.testing import CompileCounterWithBackend

codegen = pytest.importorskip("torchkiln.codegen")

f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
HAS_CUDA = torch.cuda.is_available()
try:
    import triton  # noqa: F401

    from torchkiln.codegen.triton.generator import interpreter_active

    # Triton on CPU tensors runs under the interpreter (tests/conftest.py turns it on)
    HAS_TRITON = interpreter_active()
except ImportError:
    HAS_TRITON = False

PATHS = [
    pytest.param("cpp", id="cpp"),
    pytest.param("triton", id="triton", marks=pytest.mark.skipif(not HAS_TRITON, reason="needs triton with TRITON_INTERPRET=1 (no GPU)")),
    pytest.param("cuda", id="cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")),
]
TOL = {f32: dict(atol=1e-4, rtol=1e-4), f16: dict(atol=1e-2, rtol=1e-2), bf16: dict(atol=4e-2, rtol=4e-2)}


# ---------------------------------------------------------------------------------------
# input specifications


@dataclasses.dataclass(frozen=True)
class T:
    """A random tensor input: ``shape``, value kind, optional dtype override and layout.

    ``kind``: "randn", "pos" (in [0.5, 2)), "unit" (in (-0.9, 0.9)), "int" (0..9),
    "bool", "idx:N" (int64 indices in [0, N)), "perm:N" (distinct indices in [0, N)).  ``layout``: "contig", "t" (the transpose
    of a contiguous tensor, shape given after transposing), "slice" (every other column
    of a wider tensor), "expand" (stride 0 in dim 0).
    """

    shape: tuple
    kind: str = "randn"
    dtype: torch.dtype | None = None
    layout: str = "contig"
    grad: bool = True

    def make(self, device, dtype, gen):
        dt = self.dtype or dtype
        if self.kind.startswith(("idx:", "perm:")):
            dt = torch.int64
        elif self.kind == "int":
            dt = self.dtype or torch.int64
        elif self.kind == "bool":
            dt = torch.bool
        base_shape = list(self.shape)
        if self.layout == "t":
            base_shape = base_shape[::-1]
        elif self.layout == "slice":
            base_shape[-1] = base_shape[-1] * 2
        elif self.layout == "expand":
            base_shape[0] = 1
        x = self._values(base_shape, dt, gen).to(device)
        if self.layout == "t":
            x = x.permute(*reversed(range(x.dim())))
        elif self.layout == "slice":
            x = x[..., ::2]
        elif self.layout == "expand":
            x = x.expand(*self.shape)
        return x

    def _values(self, shape, dt, gen):
        k = self.kind
        if k.startswith("idx:"):
            return torch.randint(0, int(k[4:]), shape, generator=gen, dtype=torch.int64)
        if k.startswith("perm:"):  # distinct indices (index_put without accumulate)
            return torch.randperm(int(k[5:]), generator=gen)[: shape[0]]
        if k == "int":
            return torch.randint(0, 10, shape, generator=gen).to(dt)
        if k == "bool":
            return torch.randint(0, 2, shape, generator=gen).bool()
        x = torch.randn(shape, generator=gen, dtype=torch.float32)
        if k == "pos":
            x = torch.rand(shape, generator=gen) * 1.5 + 0.5
        elif k == "unit":
            x = torch.rand(shape, generator=gen) * 1.8 - 0.9
        return x.to(dt)

    @property
    def differentiable(self):
        return self.grad and self.kind in ("randn", "pos", "unit") and (self.dtype is None or self.dtype.is_floating_point)


@dataclasses.dataclass
class Case:
    name: str
    fn: Callable
    inputs: tuple
    dtypes: tuple = (f32,)
    grad: bool = True  # run test_backward
    triton: bool = False  # part of the interpreter subset
    tol: dict | None = None
    exact: bool = False  # compare bit for bit (integer/bool/index results)


CASES: list[Case] = []


def case(name, fn, *inputs, **kw):
    CASES.append(Case(name, fn, inputs, **kw))


A = T((4, 6))
B = T((6,))
HALF = (f32, f16, bf16)

# -- pointwise: unary math
case("sin", torch.sin, A, dtypes=HALF, triton=True)
case("cos", torch.cos, A)
case("exp", torch.exp, A, triton=True)
case("log", torch.log, T((4, 6), "pos"), dtypes=HALF)
case("sqrt", torch.sqrt, T((4, 6), "pos"))
case("rsqrt", torch.rsqrt, T((4, 6), "pos"), triton=True)
case("tanh", torch.tanh, A, dtypes=HALF)
case("sigmoid", torch.sigmoid, A, triton=True)
case("relu", torch.relu, A, dtypes=HALF)
case("gelu", F.gelu, A, dtypes=HALF, triton=True)
case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), A)
case("silu", F.silu, A)
case("abs_neg", lambda x: -x.abs(), A)
case("reciprocal", torch.reciprocal, T((4, 6), "pos"))
case("erf", torch.erf, A, triton=True)
case("log1p_expm1", lambda x: torch.log1p(x.abs()) + torch.expm1(x), A)
case("pow_scalar", lambda x: x.pow(3) + x.pow(2.0), A, triton=True)
case("pow_frac", lambda x: x.pow(0.5), T((4, 6), "pos"))
case("atan_asin", lambda x: torch.atan(x) + torch.asin(x), T((4, 6), "unit"))
case("rounding", lambda x: (torch.floor(x), torch.ceil(x), torch.round(x), torch.trunc(x), torch.sign(x)), A, grad=False, triton=True)
case("affine", lambda x: x * 2.5 + 1, A, dtypes=HALF)
case("nan_inputs", lambda x: (torch.sign(x.log()), torch.relu(x.log()), torch.clamp(x.log(), -1, 1), x.log().amax(-1)),
     A, grad=False, triton=True)

# -- pointwise: binary with broadcasting
case("add_bcast", torch.add, A, B, dtypes=HALF, triton=True)
case("sub_bcast2", torch.sub, T((4, 1)), T((1, 6)), triton=True)
case("mul_3d_bcast", torch.mul, T((2, 3, 4)), T((3, 1)))
case("div", torch.div, A, T((4, 6), "pos"), dtypes=HALF)
case("max_min", lambda a, b: (torch.maximum(a, b), torch.minimum(a, b)), A, B)
case("pow_tensor", torch.pow, T((4, 6), "pos"), A)
case("atan2", torch.atan2, A, A)
case("remainder_fmod", lambda a, b: (torch.remainder(a, b), torch.fmod(a, b)), A, T((4, 6), "pos"), grad=False)
case("add_alpha", lambda a, b: torch.add(a, b, alpha=-0.5), A, A)
case("scalar_tensor_ops", lambda a: (a + 1) * (2 - a) / 3, A)

# -- where, clamp, masked_fill
case("where", lambda x, y: torch.where(x > 0, x, y), A, A, triton=True)
case("where_scalar", lambda x: torch.where(x > 0, x, 0.0), A)
case("clamp", lambda x: torch.clamp(x, -0.5, 0.5), A, dtypes=HALF, triton=True)
case("clamp_min_max", lambda x: x.clamp_min(0.1) + x.clamp_max(-0.1), A)
case("clamp_tensor", lambda x, lo, hi: torch.clamp(x, lo, hi), A, T((6,), "unit"), T((6,), "pos"))
case("masked_fill", lambda x: x.masked_fill(x < 0, -1.0), A)
case("nan_to_num", lambda x: torch.nan_to_num(torch.log(x)), A, grad=False)

# -- type conversions
case("to_half", lambda x: x.to(torch.float16), A, grad=False, tol=TOL[f16])
case("to_bf16_and_back", lambda x: x.to(torch.bfloat16).float() * 2, A, tol=TOL[bf16])
case("to_int", lambda x: (x * 4).to(torch.int32), A, grad=False, exact=True, triton=True)
case("int_to_float", lambda x: x.float() / 3, T((4, 6), "int"), grad=False)
case("bool_to_float", lambda x: x.float() + 1, T((4, 6), "bool"), grad=False)
case("to_double", lambda x: x.double().exp(), A)

# -- comparisons and logic
case("compare", lambda a, b: (a < b, a <= b, a == b, a != b, a >= 0.5), A, B, grad=False, exact=True, triton=True)
case("logical", lambda a, b: (a & b, a | b, ~a, torch.logical_xor(a, b)), T((4, 6), "bool"), T((4, 6), "bool"), grad=False, exact=True)
case("isnan_isinf", lambda x: (torch.isnan(x.log()), torch.isinf(1 / x)), A, grad=False, exact=True)

# -- integer arithmetic
case("int_ops", lambda a, b: (a + b, a * b, a - 3, torch.div(a - 5, 2 * b - 9, rounding_mode="floor"), (a - 5) % (2 * b - 9),
                             torch.div(a - 5, 2 * b - 9, rounding_mode="trunc"), torch.fmod(a - 5, 2 * b - 9), a.abs() - b.neg()),
     T((4, 6), "int"), T((4, 6), "int"), grad=False, exact=True, triton=True)
case("int_bitwise", lambda a, b: (a & b, a | b, a ^ b, a << 1, a >> 1), T((4, 6), "int"), T((4, 6), "int"), grad=False, exact=True)

case("small_int_dtypes", lambda a: ((a.to(torch.uint8) * 40 + 7), (a.to(torch.int8) - 100), a.to(torch.int32).sum(1),
                                     a.to(torch.int16).amax(0)), T((4, 6), "int"), grad=False, exact=True, triton=True)
case("to_bool", lambda x: (x.to(torch.bool), (x > 0).to(torch.float16)), T((4, 6), "int", dtype=torch.int64), grad=False, exact=True)

# -- reductions
R = T((3, 5, 7))
case("sum_all", lambda x: x.sum(), R, dtypes=HALF, triton=True)
case("sum_dim", lambda x: x.sum(1), R, triton=True)
case("sum_dims_keepdim", lambda x: x.sum((0, 2), keepdim=True), R)
case("sum_last", lambda x: x.sum(-1), R, dtypes=HALF)
case("sum_large", lambda x: x.sum(-1), T((4, 3000)), triton=True)  # looped reduction
case("sum_int", lambda x: x.sum(1), T((4, 6), "int"), grad=False, exact=True)
case("mean", lambda x: x.mean(-1), R, dtypes=HALF, triton=True)
case("mean_all", lambda x: x.mean(), R)
case("prod", lambda x: x.prod(1), T((3, 5, 4), "pos"))
case("amax_amin", lambda x: (x.amax(1), x.amin(-1, keepdim=True)), R, dtypes=HALF, triton=True)
case("max_dim", lambda x: x.max(1), R)
case("argmax_argmin", lambda x: (x.argmax(1), x.argmin(-1), x.argmax()), R, grad=False, exact=True, triton=True)
case("var_std", lambda x: (x.var(-1), x.std(1, keepdim=True), x.var(0, correction=0)), R, triton=True)
case("var_mean", lambda x: torch.var_mean(x, dim=-1), R, dtypes=(f32, bf16))
case("var_large", lambda x: x.var(-1), T((2, 3000)), triton=True)
case("any_all", lambda x: ((x > 0).any(1), (x > -2).all(-1), (x > 1).any()), R, grad=False, exact=True, triton=True)
case("logsumexp", lambda x: torch.logsumexp(x, -1), R)
case("norm", lambda x: torch.linalg.vector_norm(x, dim=-1), R)
case("reduce_noncontig", lambda x: x.sum(0), T((6, 4), layout="t"), triton=True)
case("reduce_then_pointwise", lambda x: (x - x.mean(-1, keepdim=True)) * 2, R, triton=True)
case("cumsum", lambda x: x.cumsum(1), A)

case("float64_reduce", lambda x: (x.double().sum(-1), x.double().var(0)), R, triton=True)

# -- softmax family, layer_norm
case("softmax", lambda x: torch.softmax(x, -1), R, dtypes=HALF, triton=True)
case("softmax_dim0", lambda x: torch.softmax(x, 0), R)
case("log_softmax", lambda x: torch.log_softmax(x, -1), R, dtypes=(f32, bf16), triton=True)
case("softmax_large", lambda x: torch.softmax(x, -1), T((2, 2500)), triton=True)
case("layer_norm", lambda x, w, b: F.layer_norm(x, (7,), w, b), R, T((7,)), T((7,)), dtypes=HALF, triton=True)
case("layer_norm_2d", lambda x: F.layer_norm(x, (5, 7)), R)
case("layer_norm_gelu", lambda x, w, b: F.gelu(F.layer_norm(x, (7,), w, b)), R, T((7,)), T((7,)), triton=True)
case("attention_mask_softmax", lambda s: torch.softmax(s.masked_fill(~torch.ones(5, 5, dtype=torch.bool, device=s.device).tril(), float("-inf")), -1),
     T((2, 5, 5)), dtypes=(f32, bf16), triton=True)
case("rms_norm_manual", lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, R, T((7,)))

# -- views
case("reshape", lambda x: x.reshape(6, 4) + 1, A, triton=True)
case("permute", lambda x: x.permute(2, 0, 1) * 2, R, triton=True)
case("expand", lambda x: x.expand(3, 4, 6) + 1, A)
case("slice_step", lambda x: x[:, 1:5:2] * 2, A, triton=True)
case("slice_neg", lambda x: x[-3:, :-1] + 1, A)
case("select", lambda x: (x[1] * 2, x[:, 2] + 1, x[..., -1] - 1), R)
case("transpose", lambda x: x.transpose(0, 1) + 1, A, triton=True)
case("as_strided", lambda x: torch.as_strided(x, (3, 3), (6, 2), 1) * 2, A)
case("squeeze_unsqueeze", lambda x: x.unsqueeze(1).squeeze(1).unsqueeze(-1) * 3, A)
case("flatten_view_noncontig", lambda x: x.t().reshape(-1) * 2, A)
case("unbind_split_chunk", lambda x: (x.unbind(0)[1] * 2, x.split(2, 1)[2] + 1, x.chunk(2, 0)[0].sum()), A)
case("narrow_diag", lambda x: (x.narrow(1, 2, 3) + 1, torch.diagonal(x) * 2), A)

# -- non-contiguous, broadcast (stride 0) and zero-size inputs
case("input_transposed", lambda x, y: x * y + 1, T((4, 6), layout="t"), A, triton=True)
case("input_sliced", lambda x: x.exp() + 1, T((4, 6), layout="slice"), triton=True)
case("input_expanded", lambda x: (x * 2).sum(0), T((4, 6), layout="expand"))
case("zero_size", lambda x: (x.sin() + 1, x.sum(0), x.sum(1)), T((0, 6)), triton=True)
case("zero_size_softmax", lambda x: torch.softmax(x, -1), T((0, 6)))

# -- gather / scatter / index / index_put / embedding / index_select
case("gather", lambda x, i: torch.gather(x, 1, i), A, T((4, 3), "idx:6"), triton=True)
case("scatter", lambda x, i, s: x.scatter(1, i, s), A, T((4, 1), "idx:6"), T((4, 1)))
case("scatter_add", lambda x, i, s: x.scatter_add(0, i, s), A, T((3, 6), "idx:4"), T((3, 6)))
case("scatter_reduce_amax", lambda x, i, s: x.scatter_reduce(0, i, s, "amax"), A, T((3, 6), "idx:4"), T((3, 6)), grad=False)
case("index", lambda x, i: x[i] * 2, A, T((5,), "idx:4"), triton=True)
case("index_dim1", lambda x, i: x[:, i] + 1, A, T((3,), "idx:6"))
case("index_2d", lambda x, i, j: x[i, j], A, T((5,), "idx:4"), T((5,), "idx:6"))
case("index_put", lambda x, i, v: x.index_put((i,), v), A, T((2,), "perm:4"), T((2, 6)))
case("index_put_acc", lambda x, i, v: x.index_put((i,), v, accumulate=True), A, T((5,), "idx:4"), T((5, 6)))
case("embedding", lambda i, w: F.embedding(i, w), T((3, 5), "idx:10"), T((10, 4)), triton=True)
case("index_select", lambda x, i: torch.index_select(x, 1, i) * 2, A, T((4,), "idx:6"))

# -- cat, stack, pad
case("cat", lambda a, b: torch.cat([a, b * 2], 0), A, T((2, 6)), triton=True)
case("cat_dim1", lambda a, b: torch.cat([a.sin(), b], 1) + 1, A, T((4, 3)))
case("stack", lambda a, b: torch.stack([a, b], -1), A, A)
case("constant_pad", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), A, triton=True)
case("negative_pad", lambda x: F.pad(x, (-1, 1)), A)
case("reflect_pad", lambda x: F.pad(x, (2, 2), mode="reflect"), T((2, 3, 6)))

# -- extern kernels
case("mm", torch.mm, T((4, 5)), T((5, 3)), triton=True)
case("mm_epilogue", lambda a, b: torch.relu(a @ b + 1), T((4, 5)), T((5, 3)), dtypes=(f32, bf16), triton=True)
case("bmm", torch.bmm, T((2, 4, 5)), T((2, 5, 3)))
case("addmm", torch.addmm, T((3,)), T((4, 5)), T((5, 3)))
case("linear", F.linear, T((2, 4, 5)), T((3, 5)), T((3,)))
case("matmul_bcast", torch.matmul, T((2, 4, 5)), T((5, 3)))
case("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1), T((2, 3, 6, 6)), T((4, 3, 3, 3)), T((4,)), triton=True)
case("conv1d_stride", lambda x, w: F.conv1d(x, w, stride=2), T((2, 3, 9)), T((4, 3, 3)))
case("sort", lambda x: torch.sort(x, -1), A, triton=True)
case("sort_desc_values", lambda x: torch.sort(x, 0, descending=True).values * 2, A)
case("topk", lambda x: torch.topk(x, 3, -1), A)
case("topk_smallest", lambda x: torch.topk(x, 2, 0, largest=False).values + 1, A)

CASE_BY_NAME = {c.name: c for c in CASES}
assert len(CASE_BY_NAME) == len(CASES), "duplicate case names"


def _params(select: Callable[[Case], bool], dtypes: Callable[[Case], tuple] = lambda c: c.dtypes):
    out = []
    for c in CASES:
        if not select(c):
            continue
        for dt in dtypes(c):
            for p in PATHS:
                path = p.values[0]
                if path == "triton" and not c.triton:
                    continue
                if path == "triton" and dt != f32:
                    continue  # the interpreter subset runs float32 only
                out.append(pytest.param(c.name, dt, path, id=f"{c.name}-{str(dt)[6:]}-{path}", marks=p.marks))
    return out


# ---------------------------------------------------------------------------------------
# harness


def _device(path):
    return "cuda" if path == "cuda" else "cpu"


@functools.cache
def _decompositions():
    """The decomposition table compile_fx uses (falls back to core ATen's)."""
    try:
        from torchkiln.codegen.decompositions import decompositions
    except ImportError:
        from torch._decomp import core_aten_decompositions

        return core_aten_decompositions()
    return decompositions()


def _backend_config(path):
    return codegen.config.patch(cpu_backend="triton" if path == "triton" else "cpp")


def _make_inputs(c: Case, dtype, path, requires_grad=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    xs = [spec.make(_device(path), dtype, gen) for spec in c.inputs]
    if requires_grad:
        xs = [x.detach().requires_grad_(spec.differentiable) if spec.differentiable else x for x, spec in zip(xs, c.inputs)]
    return xs


def _fresh(xs):
    """New leaves over the same storage (strides kept), for an independent autograd graph."""
    return [x.detach().requires_grad_(x.requires_grad) for x in xs]


def _clone(xs):
    """Copies, for functions that mutate their inputs."""
    return [x.detach().clone() for x in xs]


def _as_tuple(out):
    if isinstance(out, torch.Tensor):
        return (out,)
    return tuple(out)


def _assert_same(ref, res, c: Case, dtype):
    ref, res = _as_tuple(ref), _as_tuple(res)
    assert len(ref) == len(res)
    tol = c.tol or TOL[dtype]
    for a, b in zip(ref, res):
        assert isinstance(b, torch.Tensor), type(b)
        assert a.shape == b.shape, (a.shape, b.shape)
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        assert a.device == b.device, (a.device, b.device)
        if c.exact or not a.dtype.is_floating_point:
            torch.testing.assert_close(b, a, atol=0, rtol=0, equal_nan=True)
        else:
            torch.testing.assert_close(b, a, equal_nan=True, **tol)


class _NoFallback(warnings.catch_warnings):
    """Fails if torchkiln warned (it warns once when a compile falls back to eager)."""

    def __init__(self):
        super().__init__(record=True)

    def __enter__(self):
        self.log = super().__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        super().__exit__(*exc)
        ours = [w for w in self.log if "torchkiln" in str(w.filename) or "torchkiln" in str(w.message)]
        assert not ours, "torchkiln fell back / warned: " + "; ".join(str(w.message) for w in ours)
        return False


def _grads(outs, inputs, seed=1):
    outs = [o for o in _as_tuple(outs) if o.requires_grad]
    gen = torch.Generator().manual_seed(seed)
    gos = [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.device, o.dtype) for o in outs]
    diff = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    return torch.autograd.grad(outs, diff, gos, allow_unused=True)


# ---------------------------------------------------------------------------------------
# tests


@pytest.mark.parametrize("name,dtype,path", _params(lambda c: True))
def test_forward(name, dtype, path):
    """make_fx (ATen graph, fake tensors) + compile_fx_inner vs eager."""
    c = CASE_BY_NAME[name]
    xs = _make_inputs(c, dtype, path)
    ref = c.fn(*_fresh(xs))

    def graph_fn(*args):
        return _as_tuple(c.fn(*args))

    gm = make_fx(graph_fn, decomposition_table=_decompositions(), tracing_mode="fake")(*xs)
    fakes = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    with _backend_config(path), _NoFallback():
        compiled = codegen.compile_fx_inner(gm, fakes)
        res = compiled(*_fresh(xs))
        res2 = compiled(*_fresh(xs))  # a second call reuses the compiled kernels
    _assert_same(ref, res, c, dtype)
    _assert_same(ref, res2, c, dtype)


# Backward: float32, plus the last reduced-precision dtype of a case (bfloat16 where listed),
# to keep the suite's compile count (and CI time) down.
@pytest.mark.parametrize("name,dtype,path", _params(lambda c: c.grad and any(s.differentiable for s in c.inputs),
                                                    lambda c: tuple(dict.fromkeys((c.dtypes[0], c.dtypes[-1])))))
def test_backward(name, dtype, path):
    """aot_function with compile_fx_inner for forward and backward vs eager autograd."""
    aot = pytest.importorskip("torchkiln.aot")
    c = CASE_BY_NAME[name]
    xs = _make_inputs(c, dtype, path, requires_grad=True)
    ref_in = _fresh(xs)
    ref = c.fn(*ref_in)
    ref_grads = _grads(ref, ref_in)

    with _backend_config(path), _NoFallback():
        compiled = aot.aot_function(
            lambda *a: _as_tuple(c.fn(*a)),
            fw_compiler=codegen.compile_fx_inner,
            bw_compiler=codegen.compile_fx_inner,
            decompositions=_decompositions(),
        )
        res_in = _fresh(xs)
        res = compiled(*res_in)
        res_grads = _grads(res, res_in)
    _assert_same(ref, res, c, dtype)
    assert len(ref_grads) == len(res_grads)
    for g_ref, g_res in zip(ref_grads, res_grads):
        if g_ref is None:
            assert g_res is None or not g_res.any()
            continue
        _assert_same(g_ref, g_res, c, dtype)


# The public path: a representative subset of the cases, plus mutation and aliasing.
COMPILE_SUBSET = ["sin", "add_bcast", "where", "to_int", "sum_dim", "var_std", "argmax_argmin", "softmax",
                  "layer_norm_gelu", "permute", "slice_step", "input_transposed", "zero_size", "gather",
                  "index_put_acc", "embedding", "cat", "constant_pad", "mm_epilogue", "conv2d", "sort", "topk"]


def _compiled(fn):
    """``torchkiln.compile(fn)`` with a frame counter; builtins (``torch.sin``) get a
    Python frame around them, since capture compiles Python frames."""
    counter = CompileCounterWithBackend("inductor")
    torchkiln.reset()

    def frame(*args):
        return fn(*args)

    return torchkiln.compile(frame, backend=counter), counter


@pytest.mark.parametrize("name,dtype,path", _params(lambda c: c.name in COMPILE_SUBSET, lambda c: (f32,)))
def test_compile(name, dtype, path):
    """torchkiln.compile(backend="inductor"): forward, and backward where differentiable."""
    c = CASE_BY_NAME[name]
    wants_grad = c.grad and any(s.differentiable for s in c.inputs)
    xs = _make_inputs(c, dtype, path, requires_grad=wants_grad)
    ref_in = _fresh(xs)
    ref = c.fn(*ref_in)
    with _backend_config(path), _NoFallback():
        fn, counter = _compiled(c.fn)
        res_in = _fresh(xs)
        res = fn(*res_in)
        assert counter.frame_count >= 1, "nothing was compiled"
        _assert_same(ref, res, c, dtype)
        if wants_grad:
            _assert_same(_grads(ref, ref_in), _grads(res, res_in), c, dtype)


def _mutate_add(x):
    x.add_(1)
    return x * 2


def _mutate_index(x, y):
    x[0] = y.sum()
    y.mul_(2)
    return x + y


def _mutate_view(x):
    x.view(-1)[:3].fill_(0.5)
    return x.sin()


MUTATION_CASES = {
    "add_": (_mutate_add, [T((4, 6), grad=False)]),
    "setitem_and_mul_": (_mutate_index, [T((4, 6), grad=False), T((6,), grad=False)]),
    "mutate_through_view": (_mutate_view, [T((4, 6), grad=False)]),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(MUTATION_CASES))
def test_input_mutation(name, path):
    """Mutations of inputs inside the compiled function are visible to the caller."""
    fn, specs = MUTATION_CASES[name]
    c = Case(name, fn, tuple(specs))
    xs = _make_inputs(c, f32, path)
    ref_in = _clone(xs)
    ref = fn(*ref_in)
    with _backend_config(path), _NoFallback():
        cfn, counter = _compiled(fn)
        res_in = _clone(xs)
        res = cfn(*res_in)
        assert counter.frame_count >= 1
    _assert_same(ref, res, c, f32)
    for a, b in zip(ref_in, res_in):
        _assert_same(a, b, c, f32)


ALIAS_CASES = {
    "view_flat": lambda x: x.view(-1),
    "t": lambda x: x.t(),
    "slice": lambda x: x[1:],
    "alias_and_compute": lambda x: (x.t(), x.sin()),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(ALIAS_CASES))
def test_output_aliases_input(name, path):
    """An output that is a view of an input is a view of the caller's tensor, as in eager."""
    fn = ALIAS_CASES[name]
    c = Case(name, fn, (A,))
    (x,) = _make_inputs(c, f32, path)
    ref = fn(x.clone())
    with _backend_config(path), _NoFallback():
        cfn, counter = _compiled(fn)
        res = cfn(x)
        assert counter.frame_count >= 1
    _assert_same(ref, res, c, f32)
    alias = _as_tuple(res)[0]
    assert alias.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert alias.stride() == _as_tuple(ref)[0].stride()


@pytest.mark.parametrize("path", PATHS)
def test_noncontiguous_output_strides(path):
    """Outputs get eager's strides (a permuted result stays permuted)."""
    fn = lambda x: x.permute(1, 0) * 2  # noqa: E731
    c = Case("strides", fn, (A,))
    (x,) = _make_inputs(c, f32, path)
    gm = make_fx(lambda a: (fn(a),), decomposition_table=_decompositions(), tracing_mode="fake")(x)
    fakes = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    with _backend_config(path), _NoFallback():
        (res,) = codegen.compile_fx_inner(gm, fakes)(x)
    ref = fn(x)
    _assert_same(ref, res, c, f32)
    assert res.stride() == ref.stride()
