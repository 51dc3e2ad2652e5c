"""``super()`` objects and other small trackers."""
from __future__ import annotations

import types

import torch

from .base import VariableTracker, unsupported
from .user_defined import bind_class_attr, record_lookup


class SuperVariable(VariableTracker):
    """``super(cls, obj)``: attribute lookup starts after ``cls`` in the MRO of ``obj``."""

    def __init__(self, cls, obj_vt):
        self.cls = cls
        self.obj_vt = obj_vt

    def var_getattr(self, tx, name):
        from .user_defined import UserDefinedClassVariable

        obj_is_class = isinstance(self.obj_vt, UserDefinedClassVariable)
        owner = self.obj_vt.value if obj_is_class else self.obj_vt.python_type()
        mro = owner.__mro__
        record_lookup(owner, name)
        start = mro.index(self.cls) + 1 if self.cls in mro else 0
        for base in mro[start:]:
            record_lookup(base, name)  # the lookup starts past self.cls: each dict it reads
            if name in base.__dict__:
                attr = base.__dict__[name]
                if attr is torch.nn.Module.__call__ and not obj_is_class:
                    return ModuleCallVariable(self.obj_vt)
                if obj_is_class:
                    if isinstance(attr, classmethod):
                        from .functions import BoundMethodVariable, UserFunctionVariable

                        return BoundMethodVariable(UserFunctionVariable(attr.__func__), self.obj_vt)
                    return bind_class_attr(tx, attr, None, owner, None)
                if isinstance(attr, types.FunctionType) or isinstance(attr, (staticmethod, classmethod, property)):
                    return bind_class_attr(tx, attr, self.obj_vt, owner, None)
                if attr is object.__init__:
                    return NoOpVariable()
                if base is object or base.__module__ == "builtins":
                    real = getattr(self.obj_vt, "value", None)
                    if name in _READ_ONLY and real is not None and not isinstance(real, type):
                        return NativeCallVariable(attr.__get__(real))
                    unsupported(f"super().{name} on a builtin base")
                return bind_class_attr(tx, attr, self.obj_vt, owner, None)
        unsupported(f"super() has no attribute {name}")


_READ_ONLY = {"get", "__getitem__", "keys", "values", "items", "__len__", "__contains__", "copy", "__repr__",
              "__str__", "__hash__", "__eq__", "__ne__"}


class NativeCallVariable(VariableTracker):
    """A read-only builtin method of a real object (``dict.get`` of a dict subclass),
    called natively on constant arguments."""

    def __init__(self, fn):
        self.fn = fn

    def call_function(self, tx, args, kwargs):
        from .builder import wrap_constant_like

        if not all(a.is_python_constant() for a in args) or not all(v.is_python_constant() for v in kwargs.values()):
            unsupported("builtin method with non-constant arguments")
        return wrap_constant_like(tx, self.fn(*[a.as_python_constant() for a in args],
                                              **{k: v.as_python_constant() for k, v in kwargs.items()}))


class ModuleCallVariable(VariableTracker):
    """``super().__call__`` reaching ``torch.nn.Module.__call__`` (hooks + forward)."""

    def __init__(self, module_vt):
        self.module_vt = module_vt

    def call_function(self, tx, args, kwargs):
        return self.module_vt.call_module(tx, args, kwargs)


class NoOpVariable(VariableTracker):
    """A call with no effect (``super().__init__()`` reaching ``object.__init__``)."""

    def call_function(self, tx, args, kwargs):
        from .base import ConstantVariable

        return ConstantVariable(None)
