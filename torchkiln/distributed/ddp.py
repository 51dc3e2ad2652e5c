"""``torchkiln.compile(DDP(model))``: DDP's own forward runs natively, its module compiled.

torch.compile's frame hook skips the frames of ``torch.nn.parallel.distributed`` and
captures the frame of the wrapped module's forward, which DDP calls inside
``_inside_ddp_forward()`` (so ``DistributedDataParallel._get_active_ddp_module()`` names
the DDP module while it compiles).  torchkiln has no frame hook; the same split is made
by :func:`ddp_forward`: for the duration of the call, ``ddp.module`` is an
``OptimizedModule`` of the wrapped module compiled in the caller's context, and
``DistributedDataParallel.forward`` (reducer preparation, buffer sync, ``_DDPSink`` for
unused parameters) runs as eager code.  ``DDP(torchkiln.compile(model))`` needs no help:
DDP calls the compiled module inside its forward.
"""
from __future__ import annotations

import weakref
from typing import Callable

from torch.nn.parallel import DistributedDataParallel

from ..capture.optimized_module import OptimizedModule, register_forward_override
from ..capture.output_graph import register_backend_wrapper

# ddp module -> {context: OptimizedModule of ddp.module}
_compiled_modules: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def active_ddp_module() -> DistributedDataParallel | None:
    """The DDP module whose forward is running on this thread (None outside a DDP forward)."""
    return DistributedDataParallel._get_active_ddp_module()


def _compiled_module(ddp: DistributedDataParallel, context) -> OptimizedModule:
    inner = ddp._modules["module"]
    per_context = _compiled_modules.setdefault(ddp, {})
    compiled = per_context.get(context)
    if compiled is None or compiled._orig_mod is not inner:
        compiled = per_context[context] = OptimizedModule(inner, context)
    return compiled


def ddp_forward(context, ddp: DistributedDataParallel) -> Callable:
    """The forward of a compiled DDP module: DDP's forward natively, ``ddp.module`` compiled."""

    def forward(*args, **kwargs):
        modules = ddp._modules
        inner = modules["module"]
        modules["module"] = _compiled_module(ddp, context)
        try:
            return ddp.forward(*args, **kwargs)
        finally:
            modules["module"] = inner

    return forward


def _wrap_backend_for_ddp(backend):
    from ..config import config

    if not config.optimize_ddp:
        return backend
    ddp = active_ddp_module()
    if ddp is None:
        return backend
    from .ddp_optimizer import DDPOptimizer

    return DDPOptimizer(ddp, backend)


def install() -> None:
    """Register the DDP forward override and the bucket-splitting backend wrapper with capture."""
    register_forward_override(DistributedDataParallel, ddp_forward)
    register_backend_wrapper(_wrap_backend_for_ddp)
