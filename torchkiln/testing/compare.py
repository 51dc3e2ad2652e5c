"""Judging a compiled result against eager's, with float64 eager re-judging rounding noise.

Used by tests/codegen/test_opinfo.py and the differential fuzzer (:mod:`.fuzz`).
"""
from __future__ import annotations

import math

import torch

# (rtol, atol) per compared dtype, as torch.testing.assert_close's defaults.
TOLERANCES = {torch.float64: (1e-7, 1e-7), torch.float32: (1.3e-6, 1e-5), torch.bfloat16: (1.6e-2, 1e-5),
              torch.float16: (1e-3, 1e-5), torch.complex64: (1.3e-6, 1e-5), torch.complex128: (1e-7, 1e-7)}


class Mismatch(AssertionError):
    """A compiled result that differs from eager's beyond rounding noise."""


def compare_outputs(name, eager, res, ref=None, shape_only=False) -> None:
    """Raises :class:`Mismatch` unless ``res`` (torchkiln's) matches ``eager``.

    Recurses through lists/tuples.  Tensors must agree in type, shape and dtype; then
    (unless ``shape_only``, for random or uninitialised outputs) integer and bool values
    exactly, floating ones within the dtype's ``TOLERANCES``, or else element by element
    no farther from ``ref`` (eager run in float64; ``None``: eager itself) than twice
    eager's own error plus the tolerance.
    """
    if isinstance(eager, torch.Tensor):
        if not isinstance(res, torch.Tensor):
            raise Mismatch(f"{name}: eager gives a tensor, torchkiln {type(res).__name__}")
        if eager.shape != res.shape or eager.dtype != res.dtype:
            raise Mismatch(f"{name}: eager {eager.dtype}{list(eager.shape)}, torchkiln {res.dtype}{list(res.shape)}")
        if shape_only or eager.numel() == 0:
            return
        if eager.layout != torch.strided:
            eager, res = eager.to_dense(), res.to_dense()
            ref = ref.to_dense() if isinstance(ref, torch.Tensor) else ref
        if not (eager.is_floating_point() or eager.is_complex()):
            if not torch.equal(eager, res):
                bad = (eager != res).nonzero()[:3].tolist()
                raise Mismatch(f"{name}: {eager.dtype} values differ at {bad}")
            return
        rtol, atol = TOLERANCES.get(eager.dtype, (1.3e-6, 1e-5))
        if torch.allclose(res, eager, rtol=rtol, atol=atol, equal_nan=True):
            return
        if not isinstance(ref, torch.Tensor) or ref.shape != eager.shape:
            ref = eager
        ref = ref.to(torch.complex128 if ref.is_complex() else torch.float64)
        e64, r64 = eager.to(ref.dtype), res.to(ref.dtype)
        err_eager, err_res = (e64 - ref).abs(), (r64 - ref).abs()
        allowed = 2 * err_eager.nan_to_num(0) + atol + rtol * ref.abs().nan_to_num(0, posinf=0, neginf=0)
        same_nonfinite = (e64 == r64) | (e64.isnan() & r64.isnan())
        bad = ~same_nonfinite & ~(err_res <= allowed)
        if bad.any():
            where = bad.nonzero()[0].tolist()
            raise Mismatch(f"{name}: {int(bad.sum())} of {bad.numel()} values wrong, e.g. at {where}: "
                           f"eager {e64[tuple(where)].item()}, torchkiln {r64[tuple(where)].item()}, "
                           f"float64 {ref[tuple(where)].item()}")
        return
    if isinstance(eager, (list, tuple)):
        if not isinstance(res, (list, tuple)) or len(res) != len(eager):
            raise Mismatch(f"{name}: eager {type(eager).__name__} of {len(eager)}, torchkiln {res!r:.80}")
        refs = ref if isinstance(ref, (list, tuple)) and len(ref) == len(eager) else [None] * len(eager)
        for i, (e, r, f) in enumerate(zip(eager, res, refs)):
            compare_outputs(f"{name}[{i}]", e, r, f, shape_only)
        return
    if isinstance(eager, float) and isinstance(res, float):
        if not (math.isclose(eager, res, rel_tol=1e-6, abs_tol=1e-6) or (math.isnan(eager) and math.isnan(res))):
            raise Mismatch(f"{name}: eager {eager}, torchkiln {res}")
        return
    if eager is None or isinstance(eager, (int, bool, str, torch.dtype, torch.Size)):
        if eager != res:
            raise Mismatch(f"{name}: eager {eager!r}, torchkiln {res!r}")
        return
    if type(eager) is not type(res):
        raise Mismatch(f"{name}: eager {type(eager).__name__}, torchkiln {type(res).__name__}")
