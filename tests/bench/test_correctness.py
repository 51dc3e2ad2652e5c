"""The correctness check: equal results pass, planted errors and shape changes fail."""
import math

import torch

from torchkiln.bench.correctness import compare, tensors_of


def test_identical_results_match():
    ref = (torch.randn(4, 5), [torch.randn(3)], {"a": torch.ones(2)})
    verdict = compare(ref, ref)
    assert verdict.ok and verdict.max_abs_err == 0.0


def test_planted_error_is_a_mismatch_with_its_size():
    ref = torch.randn(8, 8)
    res = ref.clone()
    res[3, 4] += 0.5
    verdict = compare(ref, res)
    assert not verdict.ok
    assert math.isclose(verdict.max_abs_err, 0.5, rel_tol=1e-5)
    assert "1 of 1" in verdict.detail


def test_shape_and_count_changes_are_mismatches():
    assert not compare(torch.zeros(2, 3), torch.zeros(3, 2)).ok
    assert not compare((torch.zeros(2),), (torch.zeros(2), torch.zeros(2))).ok
    assert not compare(torch.zeros(2), torch.zeros(2, dtype=torch.float64)).ok


def test_float64_reference_accepts_reordering_noise_only():
    torch.manual_seed(0)
    exact = torch.randn(1000, dtype=torch.float64)
    ref = (exact + 1e-3 * torch.randn(1000, dtype=torch.float64)).float()  # eager: noisy float32
    res = (exact + 1e-3 * torch.randn(1000, dtype=torch.float64)).float()  # compiled: as noisy, differently
    assert not compare(ref, res).ok
    assert compare(ref, res, fp64_ref=lambda: exact).ok
    wrong = res + 0.1
    assert not compare(ref, wrong, fp64_ref=lambda: exact).ok


def test_nan_in_result_is_a_mismatch():
    ref = torch.zeros(3)
    assert not compare(ref, torch.tensor([0.0, float("nan"), 0.0])).ok


def test_model_output_objects_are_flattened():
    class Output:
        def __init__(self, *ts):
            self.ts = ts

        def to_tuple(self):
            return self.ts

    a, b = torch.randn(2), torch.randn(3)
    assert [t.shape for t in tensors_of(Output(a, b))] == [a.shape, b.shape]
