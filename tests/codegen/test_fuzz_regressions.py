"""Reproducers found by the differential fuzzer (torchkiln.testing.fuzz), each shrunk,
plus a short fixed-seed fuzz run.  Each ``fn`` compiled with the default backend must
match eager on ``make_inputs()``: outputs, the inputs' final values, exception type."""
import torch

from torchkiln.testing.fuzz import check_program, run

CI_SEEDS = range(0, 20)


def test_short_fuzz_run():
    count, failures = run(CI_SEEDS, shrink_budget_s=0.0, log=lambda m: None)
    assert count == len(CI_SEEDS)
    assert not failures, [(seed, failure, p.source()) for seed, failure, p in failures]


def test_seed_10_mutated_offset_input_returned_as_view():
    # found by torchkiln.testing.fuzz (seed 10): a view of an input mutated in the graph
    # was regenerated with the graph copy's storage offset (0), not the input's (1)
    def make_inputs():
        torch.manual_seed(10)
        a1 = torch.randn((9, 1)).to(torch.float32)[1:]
        return [a1]

    def fn(a1):
        v2 = a1.clamp_(-1, 1)
        v7 = a1.t()
        return (v7, )

    check_program(make_inputs, fn)


def test_seed_100130_mutated_strided_input_reshaped():
    # found by torchkiln.testing.fuzz (seed 100130): same bug, strided input
    def make_inputs():
        torch.manual_seed(100130)
        a0 = torch.randn((1, 6)).to(torch.float32)[:, ::3]
        return [a0]

    def fn(a0):
        v0 = a0.add_(1)
        v1 = a0.reshape(-1)
        return (v1, )

    check_program(make_inputs, fn)


def test_seed_100019_reduction_over_size_one_dims_only():
    # found by torchkiln.testing.fuzz (seed 100019): a reduction whose reduced dims are all
    # of size 1 made a kernel with a reduction loop but no reduction range (codegen error)
    def make_inputs():
        torch.manual_seed(100019)
        a0 = torch.randint(-5, 6, (1, 0, 0), dtype=torch.int32)
        return [a0]

    def fn(a0):
        v1 = torch.where(a0 > 0, a0, 0)
        v5 = v1.amin(-3, keepdim=True)
        return (v5, )

    check_program(make_inputs, fn)

    def make_inputs2():
        return [torch.randn(1, 3, 4)]

    def fn2(a0):
        return (a0.amin(0, keepdim=True) + 1, a0.sum(0), a0.var(0, correction=0))

    check_program(make_inputs2, fn2)


def test_seed_100028_fill_of_expanded_input():
    # found by torchkiln.testing.fuzz (seeds 100028, 100078): fill_/zero_ of an expanded
    # input (eager writes the one shared element) raised in the write-back copy_
    def make_inputs():
        torch.manual_seed(100028)
        a1 = torch.randint(-5, 6, (1, 1, 1), dtype=torch.int32).expand([1, 1, 8])
        return [a1]

    def fn(a1):
        v3 = a1.fill_(3)
        return (v3, )

    check_program(make_inputs, fn)

    def make_inputs2():
        return [torch.randint(-5, 6, (1, 1, 1, 1), dtype=torch.int64).expand([1, 1, 2, 1])]

    def fn2(a1):
        v0 = a1.zero_()
        return (v0, )

    check_program(make_inputs2, fn2)


def test_view_as_complex_and_conj_outputs():
    # the OpInfo sweep's silent mismatches: view_as_complex gave float32, ihfft lost _conj
    def make_inputs():
        return [torch.randn(3, 2), torch.randn(6)]

    def fn(x, y):
        return (torch.view_as_complex(x), torch.fft.ihfft(y), torch.fft.ifft(y))

    check_program(make_inputs, fn)


def test_linalg_error_check_stays_in_the_graph():
    # OpInfo sweep: aten._linalg_check_errors (an effectful op with no output) made AOT
    # fall back; it is now a plain graph node kept from DCE, so singular inputs still raise
    import pytest
    import torchkiln

    def f(a):
        return torch.linalg.inv(a) * 2

    a = torch.randn(3, 3, dtype=torch.float64) + 3 * torch.eye(3, dtype=torch.float64)
    check_program(lambda: [a], f)
    torchkiln.reset()
    with pytest.raises(torch.linalg.LinAlgError):
        torchkiln.compile(f, dynamic=False)(torch.zeros(3, 3, dtype=torch.float64))


def test_isinf_signbit_isfinite_of_integers():
    # OpInfo sweep: isinf on int64 failed to build (__builtin_isinf of an integer)
    def f(a):
        return torch.isinf(a), torch.signbit(a), torch.isfinite(a)

    check_program(lambda: [torch.tensor([1, -2, 3])], f)


def test_seed_400098_buffer_reused_under_an_extern_view():
    # found by torchkiln.testing.fuzz (seed 400098): view.dtype (an extern view of buf0)
    # stayed alive as an output while buf0's storage was reused by the next kernel
    def make_inputs():
        torch.manual_seed(400098)
        a2 = torch.randint(0, 4, (5,))
        return [a2]

    def fn(a2):
        v5 = torch.where(a2 > 0, a2, a2.narrow(0, 0, 1))
        v6 = v5.view(v5.dtype)
        v7 = torch.take(v6, a2)
        return (v7, v6, )

    check_program(make_inputs, fn)


def test_seed_400122_reshape_of_zero_size_tensor():
    # found by torchkiln.testing.fuzz (seeds 400122, 400123): a reshape of a tensor with
    # zero elements divided by a zero stride while lowering (graph fell back to eager)
    def make_inputs():
        torch.manual_seed(400122)
        a1 = torch.randn((0, 0, 0, 0)).to(torch.float32)[2:]
        return [a1]

    def fn(a1):
        v5 = a1.to(torch.float32)
        v6 = v5.flatten(0, 1)
        return (v6, )

    check_program(make_inputs, fn)

    def make_inputs2():
        torch.manual_seed(400123)
        a0 = torch.randn((1, 1, 0, 1)).to(torch.float32).expand([0, 0, 0, 0])
        a1 = torch.randint(0, 4, (0,))
        return [a0, a1]

    def fn2(a0, a1):
        v1 = a1.any(0)
        v2 = torch.pow(v1, a0)
        v3 = torch.nan_to_num(v2)
        v7 = v3.flatten()
        return (v7, )

    check_program(make_inputs2, fn2)


def test_seed_400245_extern_result_restrided_to_an_expanded_layout():
    # found by torchkiln.testing.fuzz (seed 400245): view.dtype of an expanded value came
    # back dense; copying it into the expanded (stride 0) layout raised in copy_
    def make_inputs():
        torch.manual_seed(400245)
        a0 = torch.randn(()).to(torch.float32)
        return [a0]

    def fn(a0):
        v0 = (a0 * a0)
        v1 = (a0 + 1)
        v2 = v1.reshape(-1)
        v3 = v2.expand([2])
        v4 = v3.view(v3.dtype)
        v5 = torch.sigmoid(v4)
        v6 = torch.pow(v5, v0)
        v7 = v6.amax(0, keepdim=True)
        return (v7, v4, )

    check_program(make_inputs, fn)
