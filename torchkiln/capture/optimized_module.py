"""``OptimizedModule``: what ``torchkiln.compile(module)`` returns (mirrors torch's).

It wraps the original module (``_orig_mod``, registered as a submodule, so
``state_dict()`` keys carry the ``_orig_mod.`` prefix exactly as under torch.compile)
and passes attribute reads, writes, deletes and ``dir()`` through to it; parameters,
buffers, ``.to()``, ``train()``/``eval()`` act on the same tensors and flags.

A call runs the original module's ``forward`` through the compiled wrapper, cached on
``forward``'s code object (so instances of one class share entries, as with torch's
``inline_inbuilt_nn_modules``).  The module's own hooks run as ``Module.__call__`` runs
them, outside the forward graph, and each hook function is compiled as a frame of its
own: the frames torch.compile captures when its frame hook skips ``Module.__call__``.
Only legacy (non-full) backward hooks make the call captured from
``module(*args, **kwargs)`` instead (one frame per module class) so capture inlines
them.  Lazy modules are materialised eagerly first, as torch does.
"""
from __future__ import annotations

import types
import weakref
from typing import Any, Callable

import torch
from torch.nn.modules import module as _nn_module
from torch.nn.modules.lazy import LazyModuleMixin as _LazyModuleMixin

from .api import _DisabledContext


def _call_module(module, *args, **kwargs):
    return module(*args, **kwargs)


_call_module_per_class: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _call_module_for(cls: type) -> types.FunctionType:
    """A copy of ``_call_module`` with its own code object, one per module class."""
    fn = _call_module_per_class.get(cls)
    if fn is None:
        code = _call_module.__code__.replace(co_name=f"{cls.__name__}.__call__")
        fn = _call_module_per_class[cls] = types.FunctionType(code, _call_module.__globals__, code.co_name)
    return fn


def _has_hooks(mod: torch.nn.Module) -> bool:
    return bool(mod._forward_hooks or mod._forward_pre_hooks or mod._backward_hooks or mod._backward_pre_hooks
                or _nn_module._global_forward_hooks or _nn_module._global_forward_pre_hooks
                or _nn_module._global_backward_hooks or _nn_module._global_backward_pre_hooks)


def _call_with_hooks(context, mod: torch.nn.Module, forward: Callable, args: tuple, kwargs: dict):
    """``Module.__call__``'s hook protocol around ``forward``, each hook compiled.

    Forward pre-hooks (with and without kwargs) may replace the arguments, forward
    hooks the result; full backward (pre-)hooks are attached with
    ``torch.utils.hooks.BackwardHook`` as eager does.
    """
    g = _nn_module
    for hook_id, hook in (*g._global_forward_pre_hooks.items(), *mod._forward_pre_hooks.items()):
        if hook_id in mod._forward_pre_hooks_with_kwargs:
            new = context.wrap(hook)(mod, args, kwargs)
            if new is not None:
                if not (isinstance(new, tuple) and len(new) == 2):
                    raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                       f"but got {new}.")
                args, kwargs = new
        else:
            new = context.wrap(hook)(mod, args)
            if new is not None:
                args = new if isinstance(new, tuple) else (new,)
    full_backward_hooks, _ = mod._get_backward_hooks()
    backward_pre_hooks = mod._get_backward_pre_hooks()
    bw_hook = None
    if full_backward_hooks or backward_pre_hooks:
        bw_hook = torch.utils.hooks.BackwardHook(mod, full_backward_hooks, backward_pre_hooks)
        args = bw_hook.setup_input_hook(args)
    result = forward(*args, **kwargs)
    global_with_kwargs = getattr(g, "_global_forward_hooks_with_kwargs", {})
    for hook_id, hook in (*g._global_forward_hooks.items(), *mod._forward_hooks.items()):
        if hook_id in mod._forward_hooks_with_kwargs or hook_id in global_with_kwargs:
            new = context.wrap(hook)(mod, args, kwargs, result)
        else:
            new = context.wrap(hook)(mod, args, result)
        if new is not None:
            result = new
    if bw_hook is not None:
        result = bw_hook.setup_output_hook(result)
    return result


_forward_overrides: list[tuple[type, Callable]] = []


def register_forward_override(cls: type, make_forward: Callable) -> None:
    """Compile modules of ``cls`` (and subclasses) differently from capturing ``forward``.

    ``make_forward(context, mod)`` returns the callable run in place of the compiled
    ``forward`` (hooks of ``mod`` still run around it).  torchkiln.distributed uses it to
    run ``DistributedDataParallel.forward`` natively with its wrapped module compiled,
    as torch.compile's frame hook skips DDP's frame and captures the module's.
    """
    _forward_overrides.append((cls, make_forward))


class OptimizedModule(torch.nn.Module):
    """A compiled ``nn.Module``; ``_orig_mod`` is the module it wraps.

    Built by ``torchkiln.compile(mod)`` / ``torchkiln.optimize(...)(mod)``; compiling an
    ``OptimizedModule`` again wraps the same ``_orig_mod``.  Pickles and deep-copies
    (the copy compiles afresh on its first call).
    """

    _opt_mod_attributes = {"_orig_mod", "_torchkiln_context", "_torchkiln_forward", "forward", "__dict__",
                           "_super_module_initialized"}

    def __init__(self, mod: torch.nn.Module, context) -> None:
        # _orig_mod first: attribute access on self reads it (also inside Module.__init__).
        object.__setattr__(self, "_orig_mod", mod)
        self._super_module_initialized = False
        super().__init__()
        self._super_module_initialized = True
        self._orig_mod = mod  # registers the submodule
        self._torchkiln_context = context
        self._torchkiln_forward = (None, None)  # (forward function, its compiled wrapper)

    def __call__(self, *args, **kwargs):
        # Global hooks fire once, for the original module (torch fires them for the
        # wrapper too and warns); hooks registered on the wrapper itself still run.
        if self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or self._backward_pre_hooks:
            return super().__call__(*args, **kwargs)
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        mod = self.__dict__["_modules"]["_orig_mod"]
        context = self.__dict__["_torchkiln_context"]
        if isinstance(context, _DisabledContext):
            native = self.__dict__["_torchkiln_forward"][1]
            if native is None:
                native = context.wrap(mod.__call__)
                self.__dict__["_torchkiln_forward"] = (None, native)
            return native(*args, **kwargs)
        if isinstance(mod, _LazyModuleMixin) and hasattr(mod, "_initialize_hook"):  # a lazy module not yet materialised
            mod._infer_parameters(mod, args, kwargs)
        hooked = _has_hooks(mod)
        if hooked and mod._get_backward_hooks()[1]:  # legacy non-full backward hooks
            return context.wrap(_call_module_for(type(mod)))(mod, *args, **kwargs)
        for cls, make_forward in _forward_overrides:
            if isinstance(mod, cls):
                forward = make_forward(context, mod)
                return _call_with_hooks(context, mod, forward, args, kwargs) if hooked else forward(*args, **kwargs)
        fwd = mod.forward
        func = fwd.__func__ if isinstance(fwd, types.MethodType) and fwd.__self__ is mod else fwd
        cached_func, compiled = self.__dict__["_torchkiln_forward"]
        if cached_func is not func:
            compiled = context.wrap(func)
            self.__dict__["_torchkiln_forward"] = (func, compiled)
        if func is not fwd:
            compiled = types.MethodType(compiled, mod)
        if hooked:
            return _call_with_hooks(context, mod, compiled, args, kwargs)
        return compiled(*args, **kwargs)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """``Module.zero_grad``, done by the original module when the wrapper has no
        parameter of its own: the same parameters, without the wrapper's level of the
        module walk and its attribute lookups forwarded to ``_orig_mod`` (~7 us a training
        step of a 16-parameter model, where torch's ``OptimizedModule`` pays them)."""
        d = self.__dict__
        if not d["_parameters"] and len(d["_modules"]) == 1:
            return d["_modules"]["_orig_mod"].zero_grad(set_to_none)
        return super().zero_grad(set_to_none)

    def __reduce__(self):
        return (self.__class__, (self._orig_mod, self._torchkiln_context))

    def __len__(self) -> int:
        return len(self._orig_mod)

    @property
    def training(self) -> bool:
        return self._orig_mod.training

    @training.setter
    def training(self, value: bool) -> None:
        # Module.__init__ sets the default; the flag lives on the original module.
        if self._super_module_initialized:
            self._orig_mod.training = value

    def __getattr__(self, name: str) -> Any:
        if name == "_orig_mod":
            return self._modules["_orig_mod"]
        return getattr(self._orig_mod, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(type(self), name) or name in OptimizedModule._opt_mod_attributes:
            return super().__setattr__(name, value)
        return setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        if hasattr(type(self), name) or name in OptimizedModule._opt_mod_attributes:
            return super().__delattr__(name)
        return delattr(self._orig_mod, name)

    def __dir__(self) -> list[str]:
        orig = self._orig_mod.__dir__()
        return orig + [a for a in super().__dir__() if a not in orig]
