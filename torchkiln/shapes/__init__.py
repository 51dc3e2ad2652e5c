"""The dynamic-shapes policy: which tensor dims capture makes symbolic.

``mark_dynamic`` / ``mark_static`` annotate a tensor
(:mod:`.marks`); :class:`~.policy.DynamicPolicy` is what capture asks per tensor dim; :class:`~.automatic.FrameShapeState` implements automatic dynamic
(after a recompile caused by sizes, the dims that changed become symbolic), as
``torch._dynamo`` does by default.  Symbolic sizes themselves live in capture's
``ShapeEnv``.
"""
from __future__ import annotations

from .automatic import FrameShapeState
from .marks import mark_dynamic, mark_static
from .policy import DynamicPolicy

__all__ = ["DynamicPolicy", "FrameShapeState", "mark_dynamic", "mark_static"]
