"""FSDP2 (``torch.distributed.fsdp.fully_shard``) under torchkiln.compile.

FSDP2 registers forward pre/post hooks on each sharded module that all-gather its
parameters and free them again (and, through autograd hooks, reduce-scatter the
gradients).  torch.compile graph-breaks at each hook and runs it eagerly: in torch
2.13 and later the hooks are wrapped by ``_fsdp_common._dynamo_disable``; in torch
2.11 and 2.12 by ``_fsdp_state.disable_if_config_true``, which disables them while
``torch._dynamo.config.skip_fsdp_hooks`` is True (the default; False is 2.11's
"traceable FSDP2", which torch later removed).  torchkiln does the same with both
wrappers: their code objects are registered with :func:`torchkiln.capture.api.skip_code`,
so a call to an FSDP hook is a graph break and a hook is never compiled as a frame;
the modules' own forward math is captured between the hooks.  The all-gathers and
reduce-scatters stay torch.distributed calls made by FSDP's eager code (not graph
nodes).

Under compiled autograd the backward is captured once per step structure: FSDP2's
pre-backward tensor hooks (unshard) are ``call_hook`` nodes and its
``RegisterPostBackwardFunction`` / ``RegisterPreBackwardFunction`` backwards
(reduce-scatter, reshard) are ``call_backward`` nodes, all run at runtime: their
classes are marked ``_torchkiln_opaque_backward``, since compiled autograd would
otherwise trace a Python backward by running it at capture time, which would run
FSDP's side effects once then and never again.  When the captured graph is compiled
these calls are graph breaks (the hooks are FSDP2 hooks), so the backward's math
compiles in pieces between them.
"""
from __future__ import annotations

from ..capture.api import skip_code

_REASON = "an FSDP2 hook (unshard/reshard/reduce-scatter; torch.compile skips it too): runs eagerly"

# module -> name of the decorator that wraps FSDP2's hooks there (a torch version has one of them)
_HOOK_WRAPPERS = {
    "torch.distributed.fsdp._fully_shard._fsdp_common": "_dynamo_disable",  # torch >= 2.13
    "torch.distributed.fsdp._fully_shard._fsdp_state": "disable_if_config_true",  # torch 2.11, 2.12
}


# module -> FSDP2's autograd Functions there whose backward must run, not be traced
_OPAQUE_BACKWARDS = {
    "torch.distributed.fsdp._fully_shard._fsdp_param_group": ("RegisterPostBackwardFunction",),
    "torch.distributed.fsdp._fully_shard._fsdp_state": ("RegisterPreBackwardFunction",),  # torch >= 2.13
}


def install() -> None:
    """Register FSDP2's hook wrappers as never captured once FSDP2 is imported (no-op
    where they are absent).  Importing ``torch.distributed.fsdp`` costs ~0.25 s, so
    ``import torchkiln`` does not: the registration runs when the user's program (or
    anything else) imports it, through a post-import hook."""
    from wrapt import register_post_import_hook

    for module_name, wrapper_name in _HOOK_WRAPPERS.items():
        register_post_import_hook(lambda module, name=wrapper_name: _register(module, name), module_name)
    for module_name, classes in _OPAQUE_BACKWARDS.items():
        register_post_import_hook(lambda module, names=classes: _mark_opaque(module, names), module_name)


def _register(module, wrapper_name: str) -> None:
    wrapper = getattr(module, wrapper_name, None)
    if wrapper is None:
        return
    skip_code(wrapper(lambda: None).__code__, _REASON)


def _mark_opaque(module, names: tuple) -> None:
    for name in names:
        cls = getattr(module, name, None)
        if cls is not None:
            cls._torchkiln_opaque_backward = True
