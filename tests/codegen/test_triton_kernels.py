"""The Triton kernel generator on hand-built IR (independent of lowering and scheduling).

Runs on CPU tensors under Triton's interpreter (tests/codegen/conftest.py sets
``TRITON_INTERPRET=1`` where there is no GPU) and on CUDA where a GPU exists.  Both the
persistent and the looped rendering of every reduction are checked, by lowering
``runtime.PERSISTENT_RNUMEL``.
"""
from __future__ import annotations

import math
import os

import pytest
import sympy
import torch
from torch.utils._sympy.functions import CeilDiv, FloorDiv, ModularIndexing, PythonMod

from torchkiln.codegen import ir

triton = pytest.importorskip("triton")
from torchkiln.codegen.triton import TritonGenerator, runtime  # noqa: E402
from torchkiln.codegen.triton.generator import interpreter_active  # noqa: E402
from torchkiln.codegen.triton.printer import texpr  # noqa: E402

f32, f16, i64 = torch.float32, torch.float16, torch.int64
x0, x1 = ir.index_vars("x", 2)
r0, r1 = ir.index_vars("r", 2)
s0 = sympy.Symbol("s0", integer=True, positive=True)
s1 = sympy.Symbol("s1", integer=True, positive=True)

DEVICES = [
    pytest.param("cpu", marks=pytest.mark.skipif(not interpreter_active(), reason="needs TRITON_INTERPRET=1 (no GPU)")),
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")),
]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(params=["persistent", "looped", "gpu_configs"])
def reduction_mode(request, monkeypatch):
    """Reductions rendered persistent, looped, or launched with the block sizes chosen for
    GPUs (including the wide-x tiles of outer reductions) even under the interpreter."""
    if request.param == "looped":
        monkeypatch.setattr(runtime, "PERSISTENT_RNUMEL", 0)
    if request.param == "gpu_configs":
        reduction_config, pointwise_config = runtime.reduction_config, runtime.pointwise_config
        monkeypatch.setattr(runtime, "reduction_config", lambda x, r, interpret, outer=False: reduction_config(x, r, False, outer))
        monkeypatch.setattr(runtime, "pointwise_config", lambda x, interpret: pointwise_config(x, False))
    return request.param


@pytest.mark.parametrize("outer", [False, True])
def test_reduction_configs_cover_the_row(outer):
    for interpret in (False, True):
        for x in (1, 3, 64, 1000, 100000):
            for r in (0, 1, 7, 64, 65, 1024, 1025, 5000):
                persistent, xb, rb, warps = runtime.reduction_config(x, r, interpret, outer)
                assert xb & (xb - 1) == 0 and rb & (rb - 1) == 0 and xb * rb <= 16384
                assert not persistent or rb >= r


def test_outer_reduction(device, reduction_mode):
    # out[x0] = sum over r0 of a[r0, x0]: contiguous in x, strided in r (a bias gradient)
    launch, gen = build(device, kernel("k", [s1], [s0], [ir.Loop(True, [ir.Reduce("t", "sum", L("a", s1 * r0 + x0), f32)]),
                                                         ir.Loop(False, [ir.Store("out", x0, ir.ReductionValue("t", f32))])],
                                       [("a", f32, False), ("out", f32, True)], [s0, s1]))
    assert "INTERPRET, True)" in gen.source()  # detected as an outer reduction
    for n, m in ((300, 70), (5, 3)):
        a = torch.randn(n, m, device=device)
        out = torch.empty(m, device=device)
        launch(a, out, n, m)
        torch.testing.assert_close(out, a.sum(0), atol=1e-4, rtol=1e-4)


def build(device, kernel_args, **kw):
    """Compile one kernel; returns its launcher."""
    k = ir.FusedKernel(device=torch.device(device), **kernel_args, **kw)
    gen = TritonGenerator(torch.device(device))
    fns = gen.compile_kernels([k])
    assert "@triton.jit" in gen.source()
    return fns[f"{k.name}_launch"], gen


def kernel(name, ranges, rranges, loops, buffers, size_args=()):
    return dict(name=name, ranges=list(ranges), reduction_ranges=list(rranges),
                index_vars=[x0, x1][: len(ranges)], reduction_vars=[r0, r1][: len(rranges)],
                loops=loops, buffers=[ir.BufferArg(*b) for b in buffers], size_args=list(size_args))


def L(buf, index, dtype=f32, indirect=()):
    return ir.Load(buf, index, dtype, tuple(indirect))


def Op(name, *args, dtype=f32):
    return ir.Op(name, tuple(args), dtype)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU, Triton compiles for real")
def test_interpreter_is_on_without_gpu():
    """tests/conftest.py turns the interpreter on before triton is imported; if something
    imported triton first, the CPU Triton tests would silently skip."""
    assert os.environ.get("TRITON_INTERPRET") == "1" and interpreter_active()


def test_pointwise_broadcast_dynamic(device):
    # out[x0, x1] = sin(a[x0, x1]) * b[x1] + 1, a: (s0, s1)
    val = Op("add", Op("mul", Op("sin", L("a", s1 * x0 + x1)), L("b", x1)), ir.Constant(1.0, f32))
    launch, _ = build(device, kernel("k", [s0, s1], [], [ir.Loop(False, [ir.Store("out", s1 * x0 + x1, val)])],
                                     [("a", f32, False), ("b", f32, False), ("out", f32, True)], [s0, s1]))
    for n, m in ((3, 5), (7, 130), (1, 1)):
        a, b = torch.randn(n, m, device=device), torch.randn(m, device=device)
        out = torch.empty(n, m, device=device)
        launch(a, b, out, n, m)
        torch.testing.assert_close(out, a.sin() * b + 1)


def test_zero_size_launch_is_a_noop(device):
    launch, _ = build(device, kernel("k", [s0], [], [ir.Loop(False, [ir.Store("out", x0, L("a", x0))])],
                                     [("a", f32, False), ("out", f32, True)], [s0]))
    launch(torch.empty(0, device=device), torch.empty(0, device=device), 0)


def test_half_loads_compute_in_float_and_round_on_store(device):
    v = Op("exp", L("a", x0, f16), dtype=f16)
    launch, gen = build(device, kernel("k", [s0], [], [ir.Loop(False, [ir.Store("out", x0, v)])],
                                       [("a", f16, False), ("out", f16, True)], [s0]))
    a = torch.randn(100, device=device, dtype=f16)
    out = torch.empty_like(a)
    launch(a, out, 100)
    assert ".to(tl.float32)" in gen.source()
    torch.testing.assert_close(out, a.exp(), atol=1e-2, rtol=1e-2)


def softmax_kernel(rows, cols):
    ld = L("a", cols * x0 + r0)
    e = Op("exp", Op("sub", ld, ir.ReductionValue("mx", f32)))
    loops = [
        ir.Loop(True, [ir.Reduce("mx", "max", ld, f32), ir.Reduce("am", "argmax", ld, i64, index=r0)]),
        ir.Loop(True, [ir.Reduce("sm", "sum", e, f32)]),
        ir.Loop(True, [ir.Store("out", cols * x0 + r0, Op("truediv", e, ir.ReductionValue("sm", f32)))]),
        ir.Loop(False, [ir.Store("idx", x0, ir.ReductionValue("am", i64)),
                        ir.Store("lse", x0, Op("add", Op("log", ir.ReductionValue("sm", f32)), ir.ReductionValue("mx", f32)))]),
    ]
    return kernel("softmax", [rows], [cols], loops,
                  [("a", f32, False), ("out", f32, True), ("idx", i64, True), ("lse", f32, True)], [s0, s1])


def test_softmax_argmax_logsumexp(device, reduction_mode):
    launch, gen = build(device, softmax_kernel(s0, s1))
    for n, m in ((4, 6), (3, 1500), (33, 17)):
        a = torch.randn(n, m, device=device)
        out, idx, lse = torch.empty_like(a), torch.empty(n, dtype=i64, device=device), torch.empty(n, device=device)
        launch(a, out, idx, lse, n, m)
        torch.testing.assert_close(out, a.softmax(-1))
        torch.testing.assert_close(idx, a.argmax(-1))
        torch.testing.assert_close(lse, a.logsumexp(-1))
    assert "for roffset in range(0, rnumel, RBLOCK)" in gen.source()


def test_reduction_types_and_nan(device, reduction_mode):
    # per row: prod, min (NaN propagates), argmin (first NaN wins), any, all, int sum
    ld = L("a", 8 * x0 + r0)
    red = [ir.Reduce("p", "prod", ld, f32), ir.Reduce("mn", "min", ld, f32),
           ir.Reduce("amn", "argmin", ld, i64, index=r0),
           ir.Reduce("an", "any", Op("gt", ld, ir.Constant(1.0, f32), dtype=torch.bool), torch.bool),
           ir.Reduce("al", "all", Op("gt", ld, ir.Constant(-1.0, f32), dtype=torch.bool), torch.bool),
           ir.Reduce("si", "sum", L("b", 8 * x0 + r0, i64), i64)]
    outs = [("p", f32), ("mn", f32), ("amn", i64), ("an", torch.bool), ("al", torch.bool), ("si", i64)]
    stores = [ir.Store(f"o_{n}", x0, ir.ReductionValue(n, dt)) for n, dt in outs]
    launch, _ = build(device, kernel("k", [s0], [8], [ir.Loop(True, red), ir.Loop(False, stores)],
                                     [("a", f32, False), ("b", i64, False)] + [(f"o_{n}", dt, True) for n, dt in outs], [s0]))
    a = torch.randn(5, 8, device=device)
    a[1, 3] = float("nan")
    a[1, 6] = float("nan")
    b = torch.randint(-100, 100, (5, 8), device=device)
    res = {n: torch.empty(5, dtype=dt, device=device) for n, dt in outs}
    launch(a, b, *res.values(), 5)
    torch.testing.assert_close(res["p"], a.prod(-1), equal_nan=True)
    torch.testing.assert_close(res["mn"], a.amin(-1), equal_nan=True)
    torch.testing.assert_close(res["amn"], a.argmin(-1))
    torch.testing.assert_close(res["an"], (a > 1).any(-1))
    torch.testing.assert_close(res["al"], (a > -1).all(-1))
    torch.testing.assert_close(res["si"], b.sum(-1))


def test_full_reduction_two_reduced_dims(device, reduction_mode):
    # out[] = sum over (r0, r1) of a[r0, r1] where a is (s0, 7) transposed in memory
    val = L("a", r0 + s0 * r1)  # a^T stored column-major
    launch, _ = build(device, kernel("k", [], [s0, 7], [ir.Loop(True, [ir.Reduce("t", "sum", val, f32)]),
                                                        ir.Loop(False, [ir.Store("out", 0, ir.ReductionValue("t", f32))])],
                                     [("a", f32, False), ("out", f32, True)], [s0]))
    a = torch.randn(7, 300, device=device)
    out = torch.empty((), device=device)
    launch(a, out, 300)
    torch.testing.assert_close(out, a.sum(), atol=1e-3, rtol=1e-4)


def test_masked_constant_pad(device):
    # out[x0] = a[x0 - 2] if 2 <= x0 < s0 + 2 else -1.5 ; out has s0 + 5 elements
    cond = Op("logical_and", Op("ge", ir.IndexValue(x0, i64), ir.Constant(2, i64), dtype=torch.bool),
              Op("lt", ir.IndexValue(x0, i64), ir.IndexValue(s0 + 2, i64), dtype=torch.bool), dtype=torch.bool)
    val = ir.Masked(cond, L("a", x0 - 2), -1.5, f32)
    launch, _ = build(device, kernel("k", [s0 + 5], [], [ir.Loop(False, [ir.Store("out", x0, val)])],
                                     [("a", f32, False), ("out", f32, True)], [s0]))
    a = torch.randn(9, device=device)
    out = torch.empty(14, device=device)
    launch(a, out, 9)
    torch.testing.assert_close(out, torch.nn.functional.pad(a, (2, 3), value=-1.5))


def test_indirect_gather_and_atomic_scatter(device):
    i0 = sympy.Symbol("i0", integer=True)
    ind = ir.Indirect(i0, L("idx", x0, i64), sympy.Integer(10))
    gather = ir.Store("out", 4 * x0 + x1, L("w", 4 * i0 + x1, f32, [ind]))
    scatter = ir.Store("acc", 4 * i0 + x1, L("src", 4 * x0 + x1), mode="atomic_add", indirect=(ind,))
    launch, _ = build(device, kernel("k", [s0, 4], [], [ir.Loop(False, [gather, scatter])],
                                     [("idx", i64, False), ("w", f32, False), ("src", f32, False),
                                      ("out", f32, True), ("acc", f32, True)], [s0]))
    idx = torch.tensor([0, 3, -1, 3, 9, -10], device=device)  # negative indices wrap; duplicates accumulate
    w, src = torch.randn(10, 4, device=device), torch.randn(6, 4, device=device)
    out, acc = torch.empty(6, 4, device=device), torch.zeros(10, 4, device=device)
    launch(idx, w, src, out, acc, 6)
    torch.testing.assert_close(out, w[idx])
    torch.testing.assert_close(acc, torch.zeros(10, 4, device=device).index_put((idx,), src, accumulate=True))


@pytest.mark.parametrize("expr,py", [
    (FloorDiv(s0 - 7, 2), lambda a, b: (a - 7) // 2),
    (PythonMod(s0 - 7, 3), lambda a, b: (a - 7) % 3),
    (ModularIndexing(s0 * 5 + s1, 2, 4), lambda a, b: ((a * 5 + b) // 2) % 4),
    (CeilDiv(s0, 2), lambda a, b: -(-a // 2)),
    (sympy.Min(s0, s1) + sympy.Max(s0 - 10, s1), lambda a, b: min(a, b) + max(a - 10, b)),
    (sympy.Abs(s0 - s1), lambda a, b: abs(a - b)),
])
def test_printer_integer_semantics(device, expr, py):
    launch, _ = build(device, kernel("k", [3], [], [ir.Loop(False, [ir.Store("out", x0, ir.IndexValue(expr, i64))])],
                                     [("out", i64, True)], [s0, s1]))
    for a, b in ((3, 11), (20, 4), (7, 7)):
        out = torch.empty(3, dtype=i64, device=device)
        launch(out, a, b)
        assert out.tolist() == [py(a, b)] * 3, (texpr(expr), a, b, out.tolist())


def test_printer_math_on_sizes(device):
    from torch.utils._sympy.functions import FloorToInt, OpaqueUnaryFn_sqrt, ToFloat

    expr = FloorToInt(OpaqueUnaryFn_sqrt(ToFloat(s0)) * 10)
    launch, _ = build(device, kernel("k", [2], [], [ir.Loop(False, [ir.Store("out", x0, ir.IndexValue(expr, i64))])],
                                     [("out", i64, True)], [s0]))
    out = torch.empty(2, dtype=i64, device=device)
    launch(out, 17)
    assert out.tolist() == [math.floor(math.sqrt(17) * 10)] * 2


def test_kernel_source_is_cached_on_disk(device, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    build(device, kernel("k_cached", [s0], [], [ir.Loop(False, [ir.Store("out", x0, Op("cos", L("a", x0)))])],
                         [("a", f32, False), ("out", f32, True)], [s0]))
    files = list((tmp_path / "triton").glob("*.py"))
    assert len(files) == 1 and "def k_cached_launch" in files[0].read_text()


def test_compile_fx_inner_dispatches_to_triton(device):
    """Through codegen's device dispatch: the wrapper launches ``<kernel>_launch`` and the
    kernel source (what ``TORCHKILN_LOGS=output_code`` prints) is the ``@triton.jit`` module."""
    from torch.fx.experimental.proxy_tensor import make_fx

    import torchkiln.codegen as codegen
    from torchkiln.codegen.decompositions import decompositions

    x = torch.randn(6, 40, device=device)
    gm = make_fx(lambda x: (torch.softmax(x.sin(), -1),), decomposition_table=decompositions(), tracing_mode="fake")(x)
    fakes = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    with codegen.config.patch(cpu_backend="triton", debug=True):
        compiled = codegen.compile_fx_inner(gm, fakes)
    assert "_launch(" in compiled.source and "@triton.jit" in compiled.kernel_source
    torch.testing.assert_close(compiled(x)[0], torch.softmax(x.sin(), -1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_kernel_reads_cpu_scalar_tensor():
    # eager allows cuda_tensor * cpu_0dim_tensor; the launcher copies the CPU operand over
    val = Op("mul", L("a", x0), L("c", 0))
    launch, _ = build("cuda", kernel("k", [s0], [], [ir.Loop(False, [ir.Store("out", x0, val)])],
                                     [("a", f32, False), ("c", f32, False), ("out", f32, True)], [s0]))
    a, c = torch.randn(10, device="cuda"), torch.tensor(3.0)
    out = torch.empty(10, device="cuda")
    launch(a, c, out, 10)
    torch.testing.assert_close(out, a * c.cuda())
