"""Per-tensor dynamic/static marks (mirrors ``torch._dynamo.mark_dynamic``/``mark_static``).

The marks are plain attributes on the tensor, read by ``DynamicPolicy`` (:mod:`.policy`):
``_torchkiln_dynamic_dims`` (a set of dims made symbolic), ``_torchkiln_dim_ranges``
(dim -> (min, max) given to ``mark_dynamic``) and ``_torchkiln_static_dims`` (dims kept
static even under ``dynamic=True``).
"""
from __future__ import annotations

import torch


def _dims(t: torch.Tensor, index) -> list[int]:
    dims = list(index) if isinstance(index, (list, tuple)) else [index]
    out = []
    for d in dims:
        if not isinstance(d, int):
            raise TypeError(f"dim must be an int, got {type(d).__name__}")
        if not -t.dim() <= d < t.dim():
            raise IndexError(f"dim {d} out of range for a tensor of {t.dim()} dims")
        out.append(d % t.dim())
    return out


def mark_dynamic(t: torch.Tensor, index, *, min: int | None = None, max: int | None = None) -> None:
    """Make dim(s) ``index`` of ``t`` symbolic from the first capture.

    ``index`` is an int or a list of ints; ``min``/``max`` bound the size (inclusive).
    Mirrors ``torch._dynamo.mark_dynamic``.  Raises ``TypeError`` for a non-tensor or
    non-int dim and ``IndexError`` for a dim out of range.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mark_dynamic expects a tensor, got {type(t).__name__}")
    dims = _dims(t, index)
    if not hasattr(t, "_torchkiln_dynamic_dims"):
        t._torchkiln_dynamic_dims = set()
        t._torchkiln_dim_ranges = {}
    for d in dims:
        t._torchkiln_dynamic_dims.add(d)
        if min is not None or max is not None:
            t._torchkiln_dim_ranges[d] = (min, max)
        getattr(t, "_torchkiln_static_dims", set()).discard(d)


def mark_static(t: torch.Tensor, index=None) -> None:
    """Keep dim(s) ``index`` of ``t`` static (all dims when ``index`` is None).

    Mirrors ``torch._dynamo.mark_static``: wins over ``dynamic=True`` and automatic
    dynamic.  Raises ``TypeError`` for a non-tensor.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mark_static expects a tensor, got {type(t).__name__}")
    dims = range(t.dim()) if index is None else _dims(t, index)
    if not hasattr(t, "_torchkiln_static_dims"):
        t._torchkiln_static_dims = set()
    for d in dims:
        t._torchkiln_static_dims.add(d)
        getattr(t, "_torchkiln_dynamic_dims", set()).discard(d)
