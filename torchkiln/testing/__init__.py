"""Test helpers with the names of ``torch._dynamo.testing``."""
from __future__ import annotations

import math

import torch

from ..backends import lookup_backend


class CompileCounter:
    """A backend that counts frames and ops and runs the graph eagerly.

    ``frame_count``: graphs compiled; ``op_count``: call_function/call_method/
    call_module nodes over all of them.
    """

    def __init__(self) -> None:
        self.frame_count = 0
        self.op_count = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.frame_count += 1
        for node in gm.graph.nodes:
            if node.op in ("call_function", "call_method", "call_module"):
                self.op_count += 1
        return gm.forward

    def clear(self) -> None:
        self.frame_count = 0
        self.op_count = 0


class CompileCounterWithBackend(CompileCounter):
    """Like :class:`CompileCounter`, but compiles each graph with another backend."""

    def __init__(self, backend) -> None:
        super().__init__()
        self.backend = backend
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm, example_inputs):
        super().__call__(gm, example_inputs)
        self.graphs.append(gm)
        return lookup_backend(self.backend)(gm, example_inputs)


class EagerAndRecordGraphs:
    """A backend that keeps every graph it is given and runs it eagerly."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def same(ref, res, fp64_ref=None, cos_similarity=False, tol=1e-4, equal_nan=False, exact_dtype=True) -> bool:
    """Whether ``res`` matches ``ref`` within ``tol``, recursing through containers.

    Tensors compare with ``torch.allclose(rtol=tol, atol=tol)``; floats with
    ``math.isclose``; anything else with ``==``.
    """
    if isinstance(ref, (list, tuple, torch.nn.ParameterList, torch.Size)):
        if not isinstance(res, (list, tuple, torch.nn.ParameterList, torch.Size)) or len(ref) != len(res):
            return False
        return all(same(a, b, None, cos_similarity, tol, equal_nan, exact_dtype) for a, b in zip(ref, res))
    if isinstance(ref, dict):
        if not isinstance(res, dict) or set(ref) != set(res):
            return False
        return all(same(ref[k], res[k], None, cos_similarity, tol, equal_nan, exact_dtype) for k in ref)
    if hasattr(ref, "to_tuple") and hasattr(res, "to_tuple"):  # transformers ModelOutput
        return same(ref.to_tuple(), res.to_tuple(), None, cos_similarity, tol, equal_nan, exact_dtype)
    if isinstance(ref, torch.Tensor):
        if not isinstance(res, torch.Tensor):
            return False
        if ref.is_sparse:
            ref, res = ref.to_dense(), res.to_dense()
        if exact_dtype and ref.dtype != res.dtype:
            return False
        if ref.shape != res.shape:
            return False
        if ref.dtype == torch.bool:
            return bool(torch.equal(ref, res))
        ref_f, res_f = ref.detach().double(), res.detach().double()
        if cos_similarity:
            sim = torch.nn.functional.cosine_similarity(ref_f.flatten(), res_f.flatten(), dim=0, eps=1e-6)
            return bool(sim >= 0.99)
        return bool(torch.allclose(ref_f, res_f, rtol=tol, atol=tol, equal_nan=equal_nan))
    if isinstance(ref, float):
        if not isinstance(res, (int, float)):
            return False
        if math.isnan(ref):
            return equal_nan and math.isnan(res)
        return math.isclose(ref, res, rel_tol=tol, abs_tol=tol)
    return ref == res


def rand_strided(size, stride, dtype=torch.float32, device="cpu", extra_size=0) -> torch.Tensor:
    """A random tensor of ``size`` and ``stride`` over a storage just large enough."""
    needed = sum((s - 1) * st for s, st in zip(size, stride)) + 1 + extra_size
    if any(s == 0 for s in size):
        needed = 0
    if dtype.is_floating_point or dtype.is_complex:
        buffer = torch.randn(needed, dtype=dtype, device=device)
    elif dtype == torch.bool:
        buffer = torch.randint(0, 2, (needed,), device=device).bool()
    else:
        buffer = torch.randint(0, 100, (needed,), dtype=dtype, device=device)
    return torch.as_strided(buffer, size, stride)
