"""Context managers capture understands: grad mode (``no_grad``, ``enable_grad``,
``set_grad_enabled``) and ``autocast``.

Entering one changes the global state during tracing too (so fake tensors see it) and
records the change in the graph, as TorchDynamo records ``torch._C._set_grad_enabled``;
the graph always ends in the state it started in.  ``WithExitVariable`` is the
``__exit__`` that BEFORE_WITH leaves on the stack; at a graph break inside the block
it is rebuilt by entering a real context manager.
"""
from __future__ import annotations

import torch

from .base import ConstantVariable, VariableTracker, unsupported


class GradModeVariable(VariableTracker):
    """``torch.no_grad()`` / ``enable_grad()`` / ``set_grad_enabled(mode)``."""

    def __init__(self, mode: bool, initial: bool, applied: bool = False):
        self.mode = mode
        self.initial = initial
        self.applied = applied  # set_grad_enabled(...) takes effect when called

    def python_type(self):
        return torch.set_grad_enabled if self.applied else (torch.no_grad if not self.mode else torch.enable_grad)

    def enter(self, tx):
        self.initial = torch.is_grad_enabled() if not self.applied else self.initial
        set_grad(tx, self.mode)
        return WithExitVariable(self)

    def exit(self, tx):
        set_grad(tx, self.initial)

    def make_real(self):
        return torch.set_grad_enabled(self.mode) if self.applied else (torch.enable_grad() if self.mode else torch.no_grad())

    def reconstruct(self, cg):
        mode = self.mode
        return lambda rt: torch.enable_grad() if mode else torch.no_grad()

    def call_function(self, tx, args, kwargs):
        """``@torch.no_grad()`` applied to a function: a function running in this mode."""
        if self.applied or len(args) != 1 or kwargs:
            unsupported("calling a grad-mode context object")
        return GradModeFunctionVariable(self.mode, args[0])

    def call_method(self, tx, name, args, kwargs):
        if name == "__enter__":
            self.enter(tx)
            return ConstantVariable(None)
        if name == "__exit__":
            self.exit(tx)
            return ConstantVariable(None)
        unsupported(f"grad-mode context .{name}")


class GradModeFunctionVariable(VariableTracker):
    """A function decorated inside the frame with ``torch.no_grad()`` /
    ``torch.enable_grad()``: the mode is entered around the inlined call and restored
    after it, as the real decorator's ``with`` block does."""

    rebuilt_once = True  # one object per run of the transformed code (identity)

    def __init__(self, mode: bool, fn_vt):
        self.mode = mode
        self.fn_vt = fn_vt

    def call_function(self, tx, args, kwargs):
        ctx = GradModeVariable(self.mode, torch.is_grad_enabled())
        exit_vt = ctx.enter(tx)
        tx.root.active_contexts.append(ctx)
        result = self.fn_vt.call_function(tx, args, kwargs)
        exit_vt.call_function(tx, [], {})
        return result

    def reconstruct(self, cg):
        fn, mode = cg.recipe(self.fn_vt), self.mode
        return lambda rt: (torch.enable_grad() if mode else torch.no_grad())(fn(rt))


class AutocastVariable(VariableTracker):
    """``torch.autocast(device_type, dtype=..., enabled=...)``."""

    def __init__(self, args: dict):
        self.args = args
        self.real = None

    def enter(self, tx):
        self.real = torch.autocast(**self.args)
        self.real.__enter__()
        self.node = tx.output.create_node("call_function", torch.amp.autocast_mode._enter_autocast,
                                          tuple(self.args.get(k) for k in ("device_type", "dtype", "enabled",
                                                                          "cache_enabled")), {})
        return WithExitVariable(self)

    def exit(self, tx):
        self.real.__exit__(None, None, None)
        tx.output.create_node("call_function", torch.amp.autocast_mode._exit_autocast, (self.node,), {})

    def make_real(self):
        return torch.autocast(**self.args)


class WithExitVariable(VariableTracker):
    """The bound ``__exit__`` of an entered context manager tracker."""

    def __init__(self, ctx):
        self.ctx = ctx

    def call_function(self, tx, args, kwargs):
        tx.exit_context(self)
        self.ctx.exit(tx)
        return ConstantVariable(None)

    def reconstruct(self, cg):
        return cg.reenter(self.ctx)


def set_grad(tx, mode: bool) -> None:
    if torch.is_grad_enabled() != mode:
        tx.output.create_node("call_function", torch._C._set_grad_enabled, (mode,), {})
    torch._C._set_grad_enabled(mode)
