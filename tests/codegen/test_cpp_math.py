"""The C++ prelude's inline float math (exp, erf, tanh, sigmoid): error bounds against a
float64 reference over the whole float range, and the special values eager gives."""
import math

import pytest
import torch

import torchkiln

INF, NAN = float("inf"), float("nan")
SPECIALS = [0.0, -0.0, INF, -INF, NAN, 1e-30, -1e-30, 1e-42, -1e-42, 0.5, -0.75, 3.99, 4.0, 4.01, 8.99, 9.0,
            9.01, 88.72, 88.7229, 89.5, -87.4, -100.0, -103.9, -104.5, 1e30, -1e30]

# name, op, reference in float64, range checked, allowed error in float ulps
CASES = [
    ("exp", torch.exp, torch.exp, (-110.0, 95.0), 1.0),
    ("erf", torch.erf, torch.erf, (-6.0, 6.0), 6.0),
    ("tanh", torch.tanh, torch.tanh, (-12.0, 12.0), 5.0),
    ("sigmoid", torch.sigmoid, torch.sigmoid, (-80.0, 80.0), 3.0),
]


def _ulps(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """|got - ref| in units of the float32 spacing at ref (the smallest subnormal below 2^-126)."""
    ref32 = ref.float()
    spacing = (torch.nextafter(ref32.abs(), torch.tensor(INF)) - ref32.abs()).double()
    spacing = spacing.clamp_min(2.0 ** -149)
    err = (got.double() - ref).abs() / spacing
    overflow = ref32.isinf()  # beyond float's range the result must be that infinity
    return torch.where(overflow, torch.where(got == ref32, 0.0, INF).double(), err)


@pytest.mark.parametrize("name,op,ref,bounds,max_ulps", CASES, ids=[c[0] for c in CASES])
def test_inline_math_error_bound(name, op, ref, bounds, max_ulps):
    lo, hi = bounds
    x = torch.cat([torch.linspace(lo, hi, 200_003), torch.linspace(-1, 1, 100_001)])
    compiled = torchkiln.compile(lambda t: op(t), backend="inductor")
    got = compiled(x)
    want = ref(x.double())
    err = _ulps(got, want)
    worst = int(err.argmax())
    assert err.max().item() <= max_ulps, f"{name}({x[worst].item()!r}) = {got[worst].item()!r}, want {want[worst].item()!r}"


@pytest.mark.parametrize("name,op", [(c[0], c[1]) for c in CASES], ids=[c[0] for c in CASES])
def test_inline_math_special_values(name, op):
    x = torch.tensor(SPECIALS * 3)  # long enough for the vector loop, not just its scalar tail
    got = torchkiln.compile(lambda t: op(t), backend="inductor")(x)
    want = op(x.double()).float()
    both_nan = got.isnan() & want.isnan()
    same = (got == want) | both_nan | ((got - want).abs() <= 1e-6 * want.abs().clamp_min(1e-30))
    # denormal results may lose their last bits; eager rounds them the same way to <= 1e-38
    same |= (want.abs() < 1.2e-38) & ((got - want).abs() < 1e-44)
    # float's own sigmoid(-88.72..) underflows exp(88.72..) to inf, as eager does
    if name == "sigmoid":
        same |= (got == op(x)) & (x.abs() > 80)
    bad = [(x[i].item(), got[i].item(), want[i].item()) for i in range(len(x)) if not same[i]]
    assert not bad, bad[:5]
    assert math.copysign(1.0, got[1].item()) == math.copysign(1.0, want[1].item())  # sign of -0 kept
