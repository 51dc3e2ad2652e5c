"""``copy.deepcopy`` / ``copy.copy`` of plain-data objects (configs) inside the frame.

transformers' ``get_text_config()`` deep-copies the model config on every forward of an
encoder-decoder model (T5).  A deep copy of an object that holds only Python data (no
tensors, modules, functions or file handles, up to a size limit) is made for real while
tracing; it is private to the frame, so its methods (``to_dict``, ``__setattr__``,
``delattr``) run for real on it.  A guard compares the source object's ``__dict__`` with
the state copied (any later change of the config recompiles).  The transformed code
rebuilds it, if it escapes the graph, as a fresh deep copy of its final state per call.
"""
from __future__ import annotations

import copy
import types

import torch

from .base import ConstantVariable, VariableTracker, unsupported

MAX_ITEMS = 2000


def _plain(value, seen, budget) -> bool:
    """Whether ``value`` holds only plain Python data (bounded walk)."""
    budget[0] -= 1
    if budget[0] < 0:
        return False
    if value is None or isinstance(value, (bool, int, float, str, bytes, complex, torch.dtype, torch.device)):
        return True
    if id(value) in seen:
        return True
    seen.add(id(value))
    if isinstance(value, (torch.Tensor, torch.nn.Module, types.FunctionType, types.MethodType, types.ModuleType,
                          type)):
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_plain(v, seen, budget) for v in value)
    if isinstance(value, dict):
        return all(_plain(k, seen, budget) and _plain(v, seen, budget) for k, v in value.items())
    cls = type(value)
    if cls.__module__ == "builtins" or "__slots__" in cls.__dict__ or not hasattr(value, "__dict__"):
        return False
    return all(_plain(v, seen, budget) for v in vars(value).values())


def is_plain_data(value) -> bool:
    return _plain(value, set(), [MAX_ITEMS])


class PrivateCopyVariable(VariableTracker):
    """An object deep-copied during tracing, seen by nothing outside the frame."""

    rebuilt_once = True

    def __init__(self, value):
        self.value = value

    def python_type(self):
        return type(self.value)

    def var_getattr(self, tx, name):
        from .builder import wrap_constant_like

        try:
            attr = getattr(self.value, name)
        except AttributeError:
            unsupported(f"AttributeError: '{type(self.value).__name__}' object has no attribute '{name}'")
        if isinstance(attr, types.MethodType) and attr.__self__ is self.value:
            return PrivateMethodVariable(self, name)
        if is_plain_data(attr):
            return wrap_constant_like(tx, copy.deepcopy(attr) if isinstance(attr, (list, dict, set)) else attr)
        unsupported(f"attribute {name} of a deep-copied object that is not plain data")

    def call_method(self, tx, name, args, kwargs):
        return PrivateMethodVariable(self, name).call_function(tx, args, kwargs)

    def store_attr(self, tx, name, value_vt):
        if not value_vt.is_python_constant():
            unsupported("storing a non-constant into a deep-copied object")
        setattr(self.value, name, value_vt.as_python_constant())

    def delete_attr(self, tx, name):
        try:
            delattr(self.value, name)
        except Exception as e:  # noqa: BLE001
            unsupported(f"delattr on a deep-copied object raised {type(e).__name__}: {e}")

    def reconstruct(self, cg):
        value = self.value
        return lambda rt: copy.deepcopy(value)


class PrivateMethodVariable(VariableTracker):
    """A method of a private copy: runs for real on constant arguments."""

    def __init__(self, owner, name):
        self.owner = owner
        self.name = name

    def call_function(self, tx, args, kwargs):
        from .builder import wrap_constant_like

        if not all(a.is_python_constant() for a in args) or not all(v.is_python_constant() for v in kwargs.values()):
            unsupported("a method of a deep-copied object with non-constant arguments")
        try:
            result = getattr(self.owner.value, self.name)(*[a.as_python_constant() for a in args],
                                                          **{k: v.as_python_constant() for k, v in kwargs.items()})
        except Exception as e:  # noqa: BLE001
            unsupported(f"{self.name} of a deep-copied object raised {type(e).__name__}: {e}")
        if result is self.owner.value:
            return self.owner
        if not is_plain_data(result):
            unsupported(f"{self.name} of a deep-copied object returned a non-data value")
        return wrap_constant_like(tx, result)


def deepcopy_handler(tx, args, kwargs):
    """``copy.deepcopy(x)``: constants and constant containers are copied as trackers;
    a pre-existing plain-data object becomes a private copy guarded on its state."""
    from .builder import wrap_constant_like

    if len(args) != 1 or kwargs:
        unsupported("copy.deepcopy with a memo argument")
    vt = args[0]
    if isinstance(vt, ConstantVariable):
        return vt
    value = getattr(vt, "value", None)
    source = getattr(vt, "source", None)
    from .user_defined import UserDefinedObjectVariable

    if any(key[0] == id(vt) for key in tx.output.side_effects.attr_values):
        unsupported("copy.deepcopy of an object with attribute writes pending in this frame")
    if isinstance(vt, UserDefinedObjectVariable) and source is not None and \
            getattr(type(value), "__deepcopy__", None) is None and is_plain_data(value):
        g = tx.output.guards
        g.add(f"{source}.__dict__ == {g.const(copy.deepcopy(value.__dict__))}")
        return PrivateCopyVariable(copy.deepcopy(value))
    if isinstance(vt, PrivateCopyVariable):
        return PrivateCopyVariable(copy.deepcopy(vt.value))
    if vt.is_python_constant() and not isinstance(vt, UserDefinedObjectVariable):
        constant = vt.as_python_constant()
        if is_plain_data(constant):
            return wrap_constant_like(tx, copy.deepcopy(constant))
    unsupported(f"copy.deepcopy of {vt}")


def register() -> None:
    from .functions import register_call_handler

    register_call_handler(copy.deepcopy, deepcopy_handler)
