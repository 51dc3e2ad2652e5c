"""The variable-tracker protocol and the trackers for Python constants and NULL.

A tracker stands for one Python value during symbolic interpretation.  ``source`` (a
string like ``L['x']``) says where a pre-existing value lives, so guards and the
transformed code can read it again.  Operations a tracker cannot model raise
:class:`torchkiln.exc.Unsupported`, which becomes a graph break.
"""
from __future__ import annotations

import enum
import types

import torch

from ...exc import Unsupported


def unsupported(msg: str):
    raise Unsupported(msg)


class VariableTracker:
    """Base class: ``python_type``, constants, attribute access, calls, iteration."""

    source: str | None = None

    def python_type(self):
        unsupported(f"python_type of {type(self).__name__}")

    def is_python_constant(self) -> bool:
        try:
            self.as_python_constant()
            return True
        except Unsupported:
            return False

    def as_python_constant(self):
        unsupported(f"{self} is not a constant")

    def var_getattr(self, tx, name: str) -> "VariableTracker":
        unsupported(f"getattr {type(self).__name__}.{name}")

    def call_function(self, tx, args: list, kwargs: dict) -> "VariableTracker":
        unsupported(f"call {self}")

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> "VariableTracker":
        if name == "__getattribute__" and len(args) == 1:
            return self.var_getattr(tx, args[0].as_python_constant())
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def unpack_var_sequence(self, tx) -> list:
        unsupported(f"iterate over {self}")

    def has_unpack_var_sequence(self, tx) -> bool:
        try:
            self.unpack_var_sequence(tx)
            return True
        except Unsupported:
            return False

    def truth(self, tx) -> bool:
        """``bool(value)`` as a Python bool, or Unsupported (data-dependent)."""
        return True

    def reconstruct(self, cg):
        """A recipe ``rt -> value`` rebuilding this value at run time (see codegen)."""
        if self.source is not None:
            return cg.from_source(self.source)
        unsupported(f"cannot reconstruct {self}")

    def __repr__(self):
        return f"{type(self).__name__}()"


class ValueVariable(VariableTracker):
    """A tracker standing for one known Python object, ``value`` (read from ``source``)."""

    def __init__(self, value, source=None):
        self.value = value
        self.source = source

    def python_type(self):
        return type(self.value)

    def as_python_constant(self):
        return self.value

    def is_python_constant(self):
        return True


class ConstantVariable(ValueVariable):
    """An immutable Python value: None, bool, int, float, str, bytes, dtype, device,
    slice, Ellipsis, enum members, types and other values treated as constants."""

    def truth(self, tx):
        return bool(self.value)

    def var_getattr(self, tx, name):
        from .user_defined import record_lookup

        record_lookup(type(self.value), name)
        prop = next((k.__dict__[name] for k in type(self.value).__mro__ if name in k.__dict__), None)
        if type(prop) is property and hasattr(prop.fget, "__code__"):  # a Python property (an enum's): inlined
            from .functions import UserFunctionVariable

            return UserFunctionVariable(prop.fget).call_function(tx, [self], {})
        if isinstance(self.value, enum.Enum):
            return self._enum_getattr(tx, name, prop)
        try:
            attr = getattr(self.value, name)
        except AttributeError:
            unsupported(f"{type(self.value).__name__} has no attribute {name}")
        from .builder import wrap_constant_like

        return wrap_constant_like(tx, attr)

    def _enum_getattr(self, tx, name, found):
        """``member.name`` of an enum member: members are shared, mutable objects, so only
        what cannot change is read now: ``name``/``value``, methods, classmethods and
        staticmethods.  An attribute stored on the member or a plain class attribute is
        read through its source and guarded (EQUALS_MATCH; its tracker when mutable, so
        writes reach the real object); a descriptor whose ``__get__`` is Python code (it
        may compute a new value on every read, as CPython calls it on every read) and a
        sourceless non-constant attribute are graph breaks."""
        member, dtype = self.value, type(found)
        if isinstance(found, types.DynamicClassAttribute) and name in ("name", "value"):
            return ConstantVariable(getattr(member, name))
        if isinstance(found, (types.FunctionType, classmethod, staticmethod)) or (
                found is not None and hasattr(dtype, "__get__") and dtype.__module__ == "builtins"
                and not isinstance(found, (property, types.DynamicClassAttribute))):
            from .builder import wrap_constant_like

            return wrap_constant_like(tx, getattr(member, name))
        if found is not None and hasattr(dtype, "__get__"):
            unsupported(f"{type(member).__name__}.{name}: an enum attribute served by a {dtype.__name__} descriptor")
        if name not in getattr(member, "__dict__", {}) and found is None:
            unsupported(f"{type(member).__name__} has no attribute {name}")
        value = getattr(member, name)
        from .builder import is_constant, wrap

        if self.source is not None:
            from ..source import attr_source

            return wrap(tx, value, attr_source(self.source, name))
        if is_constant(value) and not isinstance(value, enum.Enum) or value is None:
            g = tx.output.guards
            g.constant_match(f"{g.const(member)}.{name}" if name.isidentifier() and not name.startswith("__")
                             else f"getattr({g.const(member)}, {name!r})", value)
            return ConstantVariable(value)
        if isinstance(value, enum.Enum):
            g = tx.output.guards
            g.add(f"getattr({g.const(member)}, {name!r}) is {g.const(value)}")
            return ConstantVariable(value)
        unsupported(f"{type(member).__name__}.{name}: a mutable attribute of an enum member read without a source")

    def call_method(self, tx, name, args, kwargs):
        """A method of a builtin immutable type (``str.upper``, ``int.bit_length``,
        ``tuple.index`` ...) on plain constant arguments runs now, its result a constant;
        anything else is looked up and called as an attribute: a Python method (an enum's
        or a ``str`` subclass's own) is inlined, so its side effects happen at run time,
        on every call; a C method of another type is a graph break."""
        method = pure_method(self.value, name)
        if method is not None and name in ("format", "__mod__", "format_map") and isinstance(self.value, str):
            from .tensor import specialize_symbolic  # "{}".format(n) of a SymInt: its guarded value

            args = [specialize_symbolic(a) for a in args]
            kwargs = {k: specialize_symbolic(v) for k, v in kwargs.items()}
        if method is not None and all(is_plain_arg(a) for a in args) and all(is_plain_arg(v) for v in kwargs.values()):
            try:
                result = method(self.value, *[a.as_python_constant() for a in args],
                                **{k: v.as_python_constant() for k, v in kwargs.items()})
            except Exception as e:  # noqa: BLE001 - raised again when the call runs natively
                unsupported(f"{type(self.value).__name__}.{name} raised {type(e).__name__}: {e}")
            from .builder import wrap_constant_like

            return wrap_constant_like(tx, result)
        if name == "format" and isinstance(self.value, str):
            unsupported("str.format with arguments that are not plain constants")
        return super().call_method(tx, name, args, kwargs)

    def unpack_var_sequence(self, tx):
        if isinstance(self.value, (str, bytes, range)):
            return [ConstantVariable(v) for v in self.value]
        unsupported(f"iterate over {type(self.value).__name__}")

    def reconstruct(self, cg):
        value = self.value
        return lambda rt: value

    def __repr__(self):
        return f"ConstantVariable({self.value!r})"


_PURE_TYPES = (str, bytes, int, float, complex, bool, type(None), tuple, frozenset, range, slice, torch.dtype,
               torch.device, torch.layout, torch.memory_format)


def pure_method(value, name: str):
    """The C method ``name`` of ``value``'s type when a builtin immutable type defines it
    (looked up along the MRO, so a subclass's own Python override is not it), else None.
    Such a method only reads its object and its arguments."""
    for klass in type(value).__mro__:
        attr = klass.__dict__.get(name)
        if attr is not None:
            if klass in _PURE_TYPES and not hasattr(attr, "__code__"):
                return getattr(klass, name)
            return None
    return None


def is_plain_constant(value) -> bool:
    """Whether ``value`` is made only of builtin immutable values (and lists, dicts and sets
    of them), of exact types: no user code runs when a C function reads, hashes, compares
    or formats it."""
    cls = type(value)
    if cls in (tuple, list, set, frozenset):
        return all(is_plain_constant(v) for v in value)
    if cls is dict:
        return all(is_plain_constant(k) and is_plain_constant(v) for k, v in value.items())
    if cls is slice:
        return all(is_plain_constant(v) for v in (value.start, value.stop, value.step))
    return cls in _PURE_TYPES or value is Ellipsis or value is NotImplemented


def is_plain_arg(vt) -> bool:
    return vt.is_python_constant() and is_plain_constant(vt.as_python_constant())


class MethodVariable(VariableTracker):
    """``obj.name``, a method of a tensor or container tracker looked up but not yet called;
    calling it goes through ``obj.call_method``."""

    def __init__(self, obj, name):
        self.obj = obj
        self.name = name

    def call_function(self, tx, args, kwargs):
        return self.obj.call_method(tx, self.name, args, kwargs)

    def reconstruct(self, cg):
        obj, name = cg.recipe(self.obj), self.name
        return lambda rt: getattr(obj(rt), name)


def method_of(vt, name):
    """A MethodVariable when ``vt``'s Python type has method ``name``, else Unsupported."""
    if callable(getattr(vt.python_type(), name, None)):
        return MethodVariable(vt, name)
    unsupported(f"AttributeError: '{vt.python_type().__name__}' object has no attribute '{name}'")


class NullVariable(VariableTracker):
    """The NULL CPython pushes below a callable (PUSH_NULL / LOAD_GLOBAL's low bit)."""

    def __repr__(self):
        return "NULL"


NULL = NullVariable()


class CellVariable(VariableTracker):
    """A closure cell created in the traced code (a box for a nonlocal variable)."""

    def __init__(self, value=None):
        self.value = value

    def reconstruct(self, cg):
        """A real cell holding the current value (memoized per call, so closures share it)."""
        import types

        if self.value is None:
            return lambda rt: types.CellType()
        value = cg.recipe(self.value)
        return lambda rt: types.CellType(value(rt))

    def __repr__(self):
        return f"CellVariable({self.value!r})"


class IteratorProtocolMixin:
    """The iterator protocol over ``self.next_item(tx)`` (a tracker, or None once
    exhausted): iteration, ``__next__`` and ``__iter__``; any other method or attribute is
    a graph break naming the iterator's type (``python_type().__name__``)."""

    def unpack_var_sequence(self, tx):
        items = []
        while (item := self.next_item(tx)) is not None:
            items.append(item)
        return items

    def call_method(self, tx, name, args, kwargs):
        kind = self.python_type().__name__
        if name == "__next__" and not args and not kwargs:
            item = self.next_item(tx)
            if item is None:
                unsupported(f"StopIteration from next() on an exhausted {kind}")
            return item
        if name == "__iter__" and not args and not kwargs:
            return self
        unsupported(f"{kind}.{name} (only iteration is captured)")

    def var_getattr(self, tx, name):
        if name in ("__next__", "__iter__"):
            return MethodVariable(self, name)
        unsupported(f"{self.python_type().__name__} attribute {name}")
