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

Under compiled autograd DDP's C++ reducer cannot work: its hooks on the parameters'
``AccumulateGrad`` nodes are C++ lambdas the engine cannot capture, and the engine
refuses them ("not compatible with C++ DDP Reducer").  torch.compile's answer is DDP's
Python reducer (``torch._dynamo.config.optimize_ddp = "python_reducer"``, read by
``DistributedDataParallel.__init__``): no C++ reducer hooks, no bucketing; each parameter's
post-accumulate-grad hook divides its gradient by the world size and all-reduces it with
a functional collective.  torchkiln reads no torch._dynamo setting, so it switches a DDP
module it meets to that mode itself (:func:`use_python_reducer`): when compiled autograd
is on for the call (the compiled function's ``config.compiled_autograd`` or an active
``torchkiln.compiled_autograd.enable``) or ``torchkiln.config.optimize_ddp ==
"python_reducer"``.  As in torch's mode, DDP's forward is then the wrapped module's alone
(no buffer broadcast, no ``_DDPSink``); the graph is not split at buckets.
"""
from __future__ import annotations

import weakref
from typing import Callable

from torch.nn.parallel import DistributedDataParallel

from ..capture.api import skip_code
from ..capture.optimized_module import OptimizedModule, register_forward_override

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


def wants_python_reducer(context=None) -> bool:
    """Whether a DDP module met now must use the Python reducer: compiled autograd is on
    for this call (``context``: the compile context whose function runs), or
    ``config.optimize_ddp == "python_reducer"``."""
    from ..compiled_autograd import state
    from ..config import config

    return (config.optimize_ddp == "python_reducer" or state.enabled_depth > 0
            or bool(getattr(context, "compiled_autograd", False)))


def use_python_reducer(ddp: DistributedDataParallel) -> None:
    """Switch ``ddp`` to DDP's Python reducer (what its constructor does when
    ``torch._dynamo.config.optimize_ddp == "python_reducer"``): remove the C++ reducer's
    ``AccumulateGrad`` hooks, then register DDP's own post-accumulate-grad hooks, which
    all-reduce each gradient (a functional collective; compiled autograd runs them after
    the gradient is accumulated).  Idempotent.  Raises ``RuntimeError`` on a DDP without
    that mode's methods (checked on torch 2.11 and 2.13-2.15)."""
    if ddp._use_python_reducer:
        return
    if not (hasattr(ddp, "_register_accum_grad_hook") and hasattr(ddp, "_remove_autograd_hooks")):
        raise RuntimeError("torchkiln: this torch's DistributedDataParallel has no Python reducer; "
                           "DDP cannot run under compiled autograd")
    ddp._remove_autograd_hooks()
    ddp._use_python_reducer = True
    ddp._register_accum_grad_hook()


def ddp_forward(context, ddp: DistributedDataParallel) -> Callable:
    """The forward of a compiled DDP module: DDP's forward natively, ``ddp.module`` compiled."""

    def forward(*args, **kwargs):
        return run_ddp_forward(context, ddp, args, kwargs)

    return forward


def run_ddp_forward(context, ddp: DistributedDataParallel, args, kwargs):
    """``ddp.forward(*args, **kwargs)`` run natively with ``ddp.module`` compiled in
    ``context`` (captured code calling it graph-breaks here: see :func:`install`)."""
    if not ddp._use_python_reducer and wants_python_reducer(context):
        use_python_reducer(ddp)
    modules = ddp._modules
    inner = modules["module"]
    modules["module"] = _compiled_module(ddp, context)
    try:
        return ddp.forward(*args, **kwargs)
    finally:
        modules["module"] = inner


def _wrap_backend_for_ddp(backend):
    from ..config import config

    ddp = active_ddp_module()
    if ddp is None:
        return backend
    if wants_python_reducer():  # DDP(torchkiln.compile(m)) under compiled autograd: no split, as torch's
        use_python_reducer(ddp)
        return backend
    if not config.optimize_ddp:
        return backend
    from .ddp_optimizer import DDPOptimizer

    return DDPOptimizer(ddp, backend)


def install() -> None:
    """Register the DDP forward override and the bucket-splitting backend wrapper with capture."""
    from wrapt import register_post_import_hook

    register_forward_override(DistributedDataParallel, ddp_forward)
    skip_code(run_ddp_forward.__code__, "DistributedDataParallel.forward runs natively (its module is compiled)")
    # when capture's graph builder is first imported (not at ``import torchkiln``: it loads ShapeEnv)
    register_post_import_hook(lambda output_graph: output_graph.register_backend_wrapper(_wrap_backend_for_ddp),
                              "torchkiln.capture.output_graph")
