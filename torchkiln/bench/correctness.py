"""Compare a compiled result with eager's, with float32 tolerances.

A result matches when every tensor is close to eager's (``rtol = atol = tol``).  When
it is not, and a float64 reference is available, the result still matches if its
error against the float64 reference is at most twice eager's own float32 error (plus
``tol / 10``): reordered float32 arithmetic (fused reductions, other matmul blocking)
legitimately differs from eager by more than ``tol`` in deep models, but is not less
accurate.  This mirrors the accuracy check of PyTorch's benchmark runner.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree


@dataclasses.dataclass
class Verdict:
    ok: bool
    max_abs_err: float
    detail: str = ""


def tensors_of(value: Any) -> list[torch.Tensor]:
    """Every tensor in ``value`` (tuples, lists, dicts, transformers ``ModelOutput``), in order."""
    if hasattr(value, "to_tuple") and not isinstance(value, torch.Tensor):
        value = value.to_tuple()
    leaves, _ = pytree.tree_flatten(value)
    out = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            out.append(leaf)
        elif hasattr(leaf, "to_tuple"):
            out.extend(tensors_of(leaf))
    return out


def _structure_problem(ref: list[torch.Tensor], res: list[torch.Tensor]) -> str:
    if len(ref) != len(res):
        return f"{len(res)} tensors instead of {len(ref)}"
    for i, (a, b) in enumerate(zip(ref, res)):
        if a.shape != b.shape:
            return f"tensor {i}: shape {tuple(b.shape)} instead of {tuple(a.shape)}"
        if a.dtype != b.dtype:
            return f"tensor {i}: dtype {b.dtype} instead of {a.dtype}"
    return ""


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean((a.double() - b.double()) ** 2))) if a.numel() else 0.0


def max_abs_error(ref: list[torch.Tensor], res: list[torch.Tensor]) -> float:
    err = 0.0
    for a, b in zip(ref, res):
        if a.numel():
            diff = (a.detach().double() - b.detach().double()).abs()
            both_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
            err = max(err, float(diff.masked_fill(both_inf, 0.0).nan_to_num(float("inf")).max()))
    return err


def compare(ref: Any, res: Any, fp64_ref: Callable[[], Any] | None = None, tol: float = 1e-4) -> Verdict:
    """Whether ``res`` matches the eager result ``ref``.

    ``fp64_ref``, called only when the plain tolerance check fails, returns the same
    computation in float64.  Shapes, dtypes and the number of tensors must agree.
    """
    ref_t, res_t = [t.detach() for t in tensors_of(ref)], [t.detach() for t in tensors_of(res)]
    problem = _structure_problem(ref_t, res_t)
    if problem:
        return Verdict(False, float("inf"), problem)
    err = max_abs_error(ref_t, res_t)
    bad = [i for i, (a, b) in enumerate(zip(ref_t, res_t))
           if not torch.allclose(a.double(), b.double(), rtol=tol, atol=tol, equal_nan=True)]
    if not bad:
        return Verdict(True, err)
    if fp64_ref is not None:
        hi_t = tensors_of(fp64_ref())
        if len(hi_t) == len(ref_t) and all(
            _rmse(res_t[i], hi_t[i]) <= 2.0 * _rmse(ref_t[i], hi_t[i]) + tol / 10 for i in bad
        ):
            return Verdict(True, err, "within float64-reference tolerance")
    return Verdict(False, err, f"{len(bad)} of {len(ref_t)} tensors differ (first: tensor {bad[0]})")
