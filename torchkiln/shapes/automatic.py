"""Automatic dynamic shapes (``torch._dynamo.config.automatic_dynamic_shapes``).

A frame is first captured with static sizes.  When a later call misses the cache
because tensor sizes changed (and nothing else), the dims that changed are remembered
per source (``L['x']`` -> {0}) and the recompile makes them symbolic, so one more
graph serves every later size.  The state lives per code object until
``torchkiln.reset()``.
"""
from __future__ import annotations

from .policy import DynamicPolicy


class FrameShapeState:
    """Dims that automatic dynamic has made symbolic for one code object."""

    __slots__ = ("dynamic_dims",)

    def __init__(self) -> None:
        self.dynamic_dims: dict[str, set[int]] = {}

    def note_size_failures(self, failures: dict[str, set[int]] | None) -> None:
        """Record the dims of a size-only guard failure (None: other guards failed too)."""
        for source, dims in (failures or {}).items():
            self.dynamic_dims.setdefault(source, set()).update(dims)

    def policy(self, assume_static: bool) -> DynamicPolicy:
        """The policy for the next capture of this frame."""
        return DynamicPolicy(assume_static=assume_static,
                             dynamic_dims={k: set(v) for k, v in self.dynamic_dims.items()})
