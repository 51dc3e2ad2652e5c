"""``super()`` objects and other small trackers."""
from __future__ import annotations

import types

from .base import VariableTracker, unsupported
from .user_defined import bind_class_attr


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
        start = mro.index(self.cls) + 1 if self.cls in mro else 0
        for base in mro[start:]:
            if name in base.__dict__:
                attr = base.__dict__[name]
                if obj_is_class:
                    if isinstance(attr, classmethod):
                        from .functions import BoundMethodVariable, UserFunctionVariable

                        return BoundMethodVariable(UserFunctionVariable(attr.__func__), self.obj_vt)
                    return bind_class_attr(tx, attr, None, owner, None)
                if isinstance(attr, types.FunctionType) or isinstance(attr, (staticmethod, classmethod, property)):
                    return bind_class_attr(tx, attr, self.obj_vt, owner, None)
                if base is object or base.__module__ == "builtins":
                    unsupported(f"super().{name} on a builtin base")
                return bind_class_attr(tx, attr, self.obj_vt, owner, None)
        unsupported(f"super() has no attribute {name}")
