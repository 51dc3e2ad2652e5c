"""Functionalization helpers: wrap fake tensors as ``FunctionalTensor`` and ask them
what happened to them (data mutation, metadata mutation, ``set_()``).

Everything here runs inside an active ``FunctionalTensorMode``; the C++ wrapper
records mutations so that the traced graph contains only out-of-place ATen ops, and
views are replayed from their bases (``reapply_views``), as torch.compile's
functionalization does.
"""
from __future__ import annotations

import contextlib

import torch
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
from torch.multiprocessing.reductions import StorageWeakRef


def to_fun(x):
    """Wrap a tensor as a FunctionalTensor (needs an active FunctionalTensorMode)."""
    return FunctionalTensor.to_functional(x) if isinstance(x, torch.Tensor) else x


def from_fun(x):
    """The current (synced) value behind a FunctionalTensor; other values unchanged."""
    if not isinstance(x, FunctionalTensor):
        return x
    torch._sync(x)
    return torch._from_functional_tensor(x.elem)


def has_data_mutation(f_arg: FunctionalTensor) -> bool:
    torch._sync(f_arg)
    return bool(torch._functionalize_has_data_mutation(f_arg.elem))


def mutations_hidden_from_autograd(f_arg: FunctionalTensor) -> bool:
    """True when every data mutation happened under ``no_grad``/inference mode."""
    return bool(torch._functionalize_are_all_mutations_under_no_grad_or_inference_mode(f_arg.elem))


def has_storage_mutation(f_arg: FunctionalTensor, arg: torch.Tensor) -> bool:
    """Whether ``set_()`` swapped the storage of the input ``arg``."""
    if not torch._functionalize_was_storage_changed(f_arg.elem):
        return False
    after = torch._from_functional_tensor(f_arg.elem)
    return StorageWeakRef(arg.untyped_storage()) != StorageWeakRef(after.untyped_storage())


def has_metadata_mutation(f_arg: FunctionalTensor, arg: torch.Tensor) -> bool:
    """Whether sizes, strides or storage offset of ``arg`` changed (``t_()``, ``as_strided_``...)."""
    if not torch._functionalize_has_metadata_mutation(f_arg.elem):
        return False
    after = torch._from_functional_tensor(f_arg.elem)
    return (arg.shape, arg.stride(), arg.storage_offset()) != (after.shape, after.stride(), after.storage_offset())


# Ops torch marks as ordered side effects only so that functionalization keeps them
# (effect tokens); traced without tokens they stay plain graph nodes, kept from dead-code
# elimination by ``is_checked_op`` (an error check with no output: singular matrices).
CHECK_OPS = ("aten::_linalg_check_errors",)


def is_checked_op(node) -> bool:
    """Whether an FX node is an error check that must stay in the graph."""
    return node.op == "call_function" and getattr(node.target, "_name", None) in CHECK_OPS


def _aliasing_prim(func) -> bool:
    """A ``prims`` view (``broadcast_in_dim``, ``collapse_view``, ``split_dim``...): its
    output aliases its input, which torch's functionalization rejects for non-ATen ops."""
    return (getattr(func, "namespace", None) == "prims" and hasattr(func, "impl_aten")
            and any(r.alias_info is not None for r in func._schema.returns))


class _FunctionalMode(FunctionalTensorMode):
    """Functionalization that also takes the ``torch._refs`` decompositions: an aliasing
    prim runs its ATen implementation (views functionalization knows) instead of failing
    (torch.compile fails there: "Found a custom (non-ATen) operator whose output has alias
    annotations")."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if _aliasing_prim(func):
            with self:
                return func.impl_aten(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


@contextlib.contextmanager
def functional_mode():
    """``FunctionalTensorMode`` with the ``CHECK_OPS`` traced as plain ops (no tokens),
    and aliasing ``prims`` views run as their ATen implementation."""
    from torch._library.simple_registry import singleton

    holders = [singleton.find(name).effect for name in CHECK_OPS]
    saved = [h._effect for h in holders]
    for h in holders:
        h._effect = None
    try:
        with _FunctionalMode():
            yield
    finally:
        for h, e in zip(holders, saved):
            h._effect = e
