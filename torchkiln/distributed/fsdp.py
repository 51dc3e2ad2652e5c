"""FSDP2 (``torch.distributed.fsdp.fully_shard``) under torchkiln.compile.

FSDP2 registers forward pre/post hooks on each sharded module that all-gather its
parameters and free them again (and, through autograd hooks, reduce-scatter the
gradients).  In torch 2.11 to 2.13 these hooks are wrapped by FSDP's
``_dynamo_disable``, so torch.compile graph-breaks at each hook and runs it eagerly.
torchkiln does the same: the wrapper's code object is registered with
:func:`torchkiln.capture.api.skip_code`, so a call to an FSDP hook is a graph break and
a hook is never compiled as a frame; the modules' own forward math is captured between
the hooks.  The all-gathers and reduce-scatters stay torch.distributed calls made by
FSDP's eager code (not graph nodes); tracing them as collectives needs FSDP's
"traceable" mode and compiled autograd for the backward hooks (issue 13).
"""
from __future__ import annotations

from ..capture.api import skip_code


def install() -> None:
    """Register FSDP2's hook wrapper as never captured (no-op where FSDP2 is absent)."""
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_common
    except ImportError:
        return
    disable = getattr(_fsdp_common, "_dynamo_disable", None)
    if disable is None:
        return
    skip_code(disable(lambda: None).__code__,
              "an FSDP2 hook (unshard/reshard; torch.compile skips it too): runs eagerly")
