"""Trackers for torch functions, ``torch.nn.functional``, ops and Tensor methods.

A call records one graph node after running on fake tensors; a call that returns no
tensor (``torch.is_tensor``, ``torch.finfo``) is folded to a constant.  Functions
libraries branch on — ``torch.compiler.is_compiling()`` and its aliases — fold to
True while capturing, ``torch.jit.is_scripting()`` / ``is_tracing()`` to False.
"""
from __future__ import annotations

import types

import torch

from .base import ConstantVariable, ValueVariable, unsupported


def _maybe(path):
    obj = torch
    try:
        for part in path.split(".")[1:]:
            obj = getattr(obj, part)
    except AttributeError:
        return None
    return obj


_IS_COMPILING = {id(f) for f in (
    _maybe("torch.compiler.is_compiling"),  # boundary: ok
    _maybe("torch.compiler.is_dynamo_compiling"),  # boundary: ok
    _maybe("torch._dynamo.is_compiling"),  # boundary: ok
    _maybe("torch._dynamo.external_utils.is_compiling"),  # boundary: ok
    _maybe("torch._utils.is_compiling"),
) if f is not None}
_FALSE = {id(f) for f in (torch.jit.is_scripting, torch.jit.is_tracing, torch._C._get_tracing_state,
                          _maybe("torch.fx._symbolic_trace.is_fx_tracing"),
                          _maybe("torch.compiler.is_exporting")) if f is not None}  # boundary: ok
_FOLD = {id(f) for f in (torch.finfo, torch.iinfo, torch.get_default_dtype, torch.is_grad_enabled,
                         torch.is_autocast_enabled, torch.promote_types, torch.can_cast,
                         torch.is_inference_mode_enabled, torch.cuda.is_available, torch.device,
                         torch.get_autocast_dtype if hasattr(torch, "get_autocast_dtype") else None,
                         torch._C._get_cublas_allow_tf32, torch.are_deterministic_algorithms_enabled,
                         torch.is_deterministic_algorithms_warn_only_enabled)}
_BREAK = {id(f) for f in (torch.manual_seed, torch.seed, torch.set_default_dtype, torch.use_deterministic_algorithms,
                          torch.set_num_threads, torch.save, torch.load, torch.set_printoptions,
                          torch.nn.Parameter, torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)}


def is_torch_function(value) -> bool:
    """Whether ``value`` is a torch function/op that becomes one graph call."""
    if isinstance(value, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        return True
    if isinstance(value, type) or isinstance(value, types.ModuleType):
        return False
    if not callable(value):
        return False
    if isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType, types.FunctionType,
                          types.MethodDescriptorType, types.WrapperDescriptorType, types.MethodWrapperType)):
        module = getattr(value, "__module__", None) or ""
        if isinstance(value, (types.MethodDescriptorType, types.WrapperDescriptorType)):
            return getattr(value, "__objclass__", None) in (torch._C.TensorBase, torch.Tensor)
        if isinstance(value, types.FunctionType) and getattr(value, "__qualname__", "").startswith("Tensor."):
            return True
        if module.startswith(("torch.nn.modules", "torch.utils", "torch.fx", "torch.distributed", "torch.testing",
                              "torch.autograd.function", "torch.overrides", "torch._C._dynamo", "torch._dynamo")):
            return False
        return module == "torch" or module.startswith(("torch.", "torch._C"))
    return False


class TorchVariable(ValueVariable):
    """A torch function, ``torch.nn.functional`` function, ATen op or Tensor method."""

    def reconstruct(self, cg):
        value = self.value
        return lambda rt: value

    def var_getattr(self, tx, name):
        from .builder import wrap_constant_like

        return wrap_constant_like(tx, getattr(self.value, name))

    def call_function(self, tx, args, kwargs):
        fn = self.value
        if id(fn) in _IS_COMPILING:
            return ConstantVariable(True)
        if id(fn) in _FALSE:
            return ConstantVariable(None if fn is torch._C._get_tracing_state else False)
        if fn is torch._C._set_grad_enabled or fn is torch.set_grad_enabled:
            from .ctx_manager import GradModeVariable, set_grad

            mode = args[0].as_python_constant()
            initial = torch.is_grad_enabled()
            set_grad(tx, mode)
            return GradModeVariable(mode, initial, applied=True)
        name = getattr(fn, "__name__", "")
        if id(fn) in _BREAK or name.startswith(("set_", "_set_")) or "autocast" in name or name.endswith("_nesting"):
            unsupported(f"call to {getattr(fn, '__qualname__', fn)} (changes global state; not traceable)")
        if id(fn) in _FOLD:
            value = fn(*[a.as_python_constant() for a in args], **{k: v.as_python_constant() for k, v in kwargs.items()})
            from .builder import wrap_constant_like

            return wrap_constant_like(tx, value)
        if fn is torch.is_tensor or fn is torch.overrides.is_tensor_like:
            from .tensor import TensorVariable

            return ConstantVariable(isinstance(args[0], TensorVariable))
        return tx.output.call_function(tx, fn, args, kwargs)

    def __repr__(self):
        return f"TorchVariable({getattr(self.value, '__name__', self.value)})"

