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

_FSDP_COMMON = "torch.distributed.fsdp._fully_shard._fsdp_common"


def install() -> None:
    """Register FSDP2's hook wrapper as never captured once FSDP2 is imported (no-op
    where it is absent).  Importing ``torch.distributed.fsdp`` costs ~0.25 s, so
    ``import torchkiln`` does not: the registration runs when the user's program (or
    anything else) imports it, through a post-import hook."""
    from wrapt import register_post_import_hook

    register_post_import_hook(_register, _FSDP_COMMON)


def _register(_fsdp_common) -> None:
    disable = getattr(_fsdp_common, "_dynamo_disable", None)
    if disable is None:
        return
    skip_code(disable(lambda: None).__code__,
              "an FSDP2 hook (unshard/reshard; torch.compile skips it too): runs eagerly")
