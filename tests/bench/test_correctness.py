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


def test_perturbed_floor_accepts_flips_of_ill_conditioned_tensors_only():
    # tensor 0 is well conditioned (perturbed runs land where eager does); tensor 1 is
    # discontinuous (a ReLU tie): perturbed runs of 16 ulps move it as far as `res` is
    torch.manual_seed(0)
    exact = [torch.randn(100, dtype=torch.float64), torch.randn(100, dtype=torch.float64)]
    ref = [t.float() for t in exact]
    flipped = [ref[0], ref[1] + 0.05 * torch.randn(100)]
    calls = []

    def perturbed(ulps, seed):
        calls.append(ulps)
        noise = 0.05 if ulps >= 16 else 0.0
        return [ref[0], ref[1] + noise * torch.randn(100, generator=torch.Generator().manual_seed(seed))]

    assert not compare(ref, flipped, fp64_ref=lambda: exact).ok
    verdict = compare(ref, flipped, fp64_ref=lambda: exact, perturbed_ref=perturbed)
    assert verdict.ok and verdict.ulps == 16 and 0 < verdict.noise_ratio <= 1
    assert set(calls) == {4, 16}
    wrong = [flipped[0] + 1e-3, flipped[1]]  # a real error in the well-conditioned tensor
    verdict = compare(ref, wrong, fp64_ref=lambda: exact, perturbed_ref=perturbed)
    assert not verdict.ok and "tensor 0:" in verdict.detail and verdict.noise_ratio > 1


class _ReluTie(torch.nn.Module):
    """One hidden unit's pre-activation is exactly 0 in float32 and float64 (a tie):
    any reordering or perturbation decides its ReLU mask."""

    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(64, 3, bias=False)
        self.out = torch.nn.Linear(3, 1)
        with torch.no_grad():
            w = torch.randint(-8, 8, (3, 64)).float() / 8
            w[0, 32:] = -w[0, :32]
            self.hidden.weight.copy_(w)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))


def test_bench_references_flag_injected_error_but_not_a_relu_tie():
    from torchkiln.bench.models import Workload
    from torchkiln.bench.run import _fp64_reference, _perturbed_reference, _Step

    torch.manual_seed(0)
    model = _ReluTie()
    half = torch.randint(1, 8, (1, 32)).float() / 4
    work = Workload(model, (torch.cat([half, half], 1),), loss_fn=lambda out: out.sum())
    ref = _Step(model, model, work, "training", "cpu").first()  # (loss, grads of hidden, out.w, out.b)
    assert ref[1][0].abs().max() == 0  # the tie's mask is 0 in eager
    fp64, perturbed = _fp64_reference(model, work, "training", "cpu"), _perturbed_reference(model, work, "training", "cpu")
    tie = list(ref)
    tie[1] = ref[1].clone()
    tie[1][0] = model.out.weight[0, 0].detach() * work.args[0][0]  # the other side of the tie
    assert not compare(ref, tie, fp64).ok
    verdict = compare(ref, tie, fp64, perturbed_ref=perturbed)
    assert verdict.ok and verdict.ulps in (4, 16)
    wrong = list(tie)
    wrong[2] = tie[2] * 1.001  # a real error in a tensor no perturbation moves
    assert not compare(ref, wrong, fp64, perturbed_ref=perturbed).ok
    wrong = list(tie)
    wrong[1] = tie[1] * 2  # an error far above the tie's own noise
    assert not compare(ref, wrong, fp64, perturbed_ref=perturbed).ok
