"""Float reductions over long dims are about as accurate as eager's (cascade summation,
blocked Welford: codegen/cpp/cascade.py; Kahan-compensated looped Triton sums).

Each case has ~2**20 elements offset by 100, where a float32 accumulator taking every
point of its lane (or column) in turn was clearly off (before the fix: multi-dim sums
84x eager's error, column sums 1e5x, var over rows 80x, over columns 4000x); the bound is
4x eager's error or 16 float32 steps of the result, whichever is larger.
``benchmarks/reduction_accuracy.py`` measures the 2**24-element cases by hand."""
from __future__ import annotations

import pytest
import torch

import torchkiln


def _rand(*shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return (torch.rand(*shape, generator=g) + 100).to(dtype)


CASES = {
    "sum_multi": (lambda x: x.sum((1, 2)), (2, 2**17, 4)),
    "sum_multi_outer": (lambda x: x.sum((0, 1)), (4, 2**17, 2)),  # tiled: reduction dims outside the kept one
    "sum_cols": (lambda x: x.sum(0), (2**19, 2)),
    "mean_cols": (lambda x: x.mean(0), (2**19, 2)),
    "var_rows": (lambda x: x.var(1), (2, 2**19)),  # Welford lanes
    "var_multi": (lambda x: x.var((1, 2)), (2, 2**17, 4)),  # two passes (short inner rows)
    "var_cols": (lambda x: x.var(0), (2**19, 2)),  # tiled Welford
    "bf16_sum_to_f32": (lambda x: x.sum((1, 2), dtype=torch.float32), (2, 2**17, 4), torch.bfloat16),
}


def _check(fn, x, dynamic):
    torchkiln.reset()
    ref = fn(x.double())
    eager_err = (fn(x).double() - ref).abs().max().item()
    out = torchkiln.compile(fn, dynamic=dynamic)(x)
    err = (out.double() - ref).abs().max().item()
    bound = max(4 * eager_err, 16 * torch.finfo(torch.float32).eps * ref.abs().max().item())
    assert err <= bound, (err, eager_err, bound)


@pytest.mark.parametrize("name", list(CASES))
def test_long_reduction_accuracy(name):
    fn, shape, *dtype = CASES[name]
    _check(fn, _rand(*shape, dtype=dtype[0] if dtype else torch.float32), dynamic=False)


@pytest.mark.parametrize("name", ["sum_multi", "sum_cols", "var_rows"])
def test_long_reduction_accuracy_dynamic(name):  # symbolic sizes: always blocked
    fn, shape = CASES[name]
    _check(fn, _rand(*shape), dynamic=True)


def test_cascaded_sums_keep_inf_and_nan():
    x = _rand(2**13, 2)
    x[5, 0], x[7, 1] = float("inf"), float("nan")
    for fn in (lambda t: t.sum(0), lambda t: t.reshape(2, 2**12, 2).sum((1, 2)), lambda t: t.var(0)):
        torchkiln.reset()
        torch.testing.assert_close(torchkiln.compile(fn)(x), fn(x), equal_nan=True)


def test_column_sums_within_a_block():
    # a tiled column sum gives each column one float accumulator: 4096 rows in one block
    # (cascade.CASCADE) were 13x eager's error; blocks of COLUMN_CASCADE rows: ~1x
    x = _rand(4096, 256)
    for fn in (lambda t: t.sum(0), lambda t: (t * t).sum(0)):
        torchkiln.reset()
        ref = fn(x.double())
        err, eager_err = ((f(x).double() - ref).abs().max().item() for f in (torchkiln.compile(fn), fn))
        assert err <= max(4 * eager_err, torch.finfo(torch.float32).eps * ref.abs().max().item()), (err, eager_err)


def test_welford_lanes_of_values_far_from_zero():
    # C++ Welford lanes hold float states: of rand() + 100 (mean / std = 350) var(1) over
    # 4096-point rows was 115x eager's error (eager accumulates in double); lanes of the
    # values minus the row's first one: ~5x.  The mean comes from the values' sum (the
    # shifted lane means gave randn's var_mean mean 194x eager's error; ~4x now)
    # (the tiled column welford likewise: var(0) over 4096 rows 175x -> 5.8x)
    inf, nan = float("inf"), float("nan")
    for dim in (1, 0):
        for x in (_rand(64, 4096), torch.randn(64, 4096, generator=torch.Generator().manual_seed(1))):
            x = x if dim == 1 else x.t().contiguous()
            torchkiln.reset()
            out = torchkiln.compile(lambda t: torch.var_mean(t, dim))(x)
            for res, eager, ref in zip(out, torch.var_mean(x, dim), torch.var_mean(x.double(), dim)):
                err, eager_err = (res.double() - ref).abs().max().item(), (eager.double() - ref).abs().max().item()
                assert err <= 12 * eager_err, (dim, err, eager_err)
        x = _rand(5, 5000)
        x[0, 5], x[1, 0], x[2, 0], x[3, 4999] = inf, nan, inf, -inf  # first values inf/NaN: the shift
        x = x if dim == 1 else x.t().contiguous()
        torchkiln.reset()
        for res, eager in zip(torchkiln.compile(lambda t: torch.var_mean(t, dim))(x), torch.var_mean(x, dim)):
            torch.testing.assert_close(res, eager, equal_nan=True)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_sum_of_ones_after_a_large_value(backend, backend_device):
    # Triton's looped sums: lane 0 of a 2048-wide tile takes 2**24 then 1.0, which a
    # float32 lane drops; the Kahan compensation keeps it (eager: exact).  ("cpp" is
    # Triton on CUDA; C++ blocks are plain float sums, which drop these ones.)
    if backend == "cpp" and backend_device == "cpu":
        pytest.skip("C++ kernels sum each block in float")
    x = torch.ones(2**17, 2, device=backend_device)
    x[0], x[1] = 2.0**24, 0.0  # exact: 2**24 + 2**17 - 2; a plain float lane was 63 short, eager 14
    exact = 2.0**24 + 2**17 - 2
    for fn, arg in ((lambda t: t.sum(0), x), (lambda t: t.sum(1), x.t().contiguous())):
        torchkiln.reset()
        out = torchkiln.compile(fn)(arg)
        assert max(abs(v - exact) for v in out.tolist()) <= 2, (out.tolist(), fn(arg).tolist())  # 1 step
    z = torch.ones(4096, 2, device=backend_device)
    z[3, 1], z[9, 0] = float("inf"), float("nan")
    torchkiln.reset()
    torch.testing.assert_close(torchkiln.compile(lambda t: t.sum(1))(z.t().contiguous()), z.sum(0), equal_nan=True)



@pytest.mark.parametrize("backend", ["triton"])
def test_triton_looped_welford_long_lanes(backend, backend_device, monkeypatch):
    # each lane of a looped Triton Welford takes rnumel / RBLOCK points: 8192 in a 2**24
    # row with the GPU's 2048-wide tiles (not split under dynamic shapes), 2**19 in a column
    # with 32-row tiles.  2-wide tiles give 1024 points a lane here: float32 lane states
    # were 38x eager's error on var and 7.5x on the mean (rand() + 100); chunks merged
    # into float64 states, of values shifted by the lane's first one: 1.0x
    if backend_device != "cpu":
        pytest.skip("block sizes forced for the interpreter")
    from torchkiln.codegen.triton import runtime

    monkeypatch.setattr(runtime, "reduction_config", lambda x, r, interpret, outer=False: (False, 2, 2, 1))
    x = _rand(2, 2**11)
    torchkiln.reset()
    out = torchkiln.compile(lambda t: torch.var_mean(t, 1))(x)
    for res, eager, ref in zip(out, torch.var_mean(x, 1), torch.var_mean(x.double(), 1)):
        err, eager_err = (res.double() - ref).abs().max().item(), (eager.double() - ref).abs().max().item()
        assert err <= max(4 * eager_err, torch.finfo(torch.float32).eps * ref.abs().max().item()), (err, eager_err)


def test_scalar_welford_beside_an_argmax():
    # (fixed) a welford beside an argmax runs the scalar (not lane) loop, whose float running
    # mean rounded at the values' magnitude: var(1) of rand() + 100 over 2**16 points was
    # 320x eager's error (2**20 points: 12700x); its states are double now, as eager's (1.0x)
    x = _rand(2, 2**16)
    for fn in (lambda t: (t.var(1), t.argmax(1)), lambda t: (torch.var_mean(t, 1)[1], t.argmin(1))):
        torchkiln.reset()
        ref = fn(x.double())[0]
        out, eager = torchkiln.compile(fn)(x), fn(x)
        err, eager_err = ((r[0].double() - ref).abs().max().item() for r in (out, eager))
        assert err <= max(4 * eager_err, torch.finfo(torch.float32).eps * ref.abs().max().item()), (err, eager_err)
        assert torch.equal(out[1], eager[1])
