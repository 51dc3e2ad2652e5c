"""Trackers for user classes, user objects, objects created in the frame, Python
modules, and transformers' ModelOutput.

Attribute lookup follows Python's precedence exactly (TorchDynamo's
UserDefinedObjectVariable does the same): data descriptors on the type (properties
are inlined) > the instance ``__dict__`` > non-data descriptors and class attributes
(functions bind, staticmethod/classmethod unwrap) > ``__getattr__``.
"""
from __future__ import annotations

import abc
import collections
import dataclasses
import functools
import inspect
import operator
import types

import torch

from ..source import attr_source
from .base import ConstantVariable, MethodVariable, ValueVariable, VariableTracker, unsupported

_MISSING = object()


# The GuardBuilder of each frame being captured (innermost last): every class lookup
# capture bases a decision on is checked again by that frame's guard (see
# GuardBuilder.class_lookup), so a method, property or class attribute changed,
# added or deleted after the capture recompiles instead of running the stale graph.
CLASS_LOOKUPS: list = []


def record_lookup(cls, name) -> None:
    """Capture depends on what ``name`` resolves to on ``cls``: the frame's guard checks it."""
    if CLASS_LOOKUPS:
        CLASS_LOOKUPS[-1].class_lookup(cls, name)


def mro_lookup(cls, name):
    """``name`` looked up in the dicts of ``cls.__mro__`` (what CPython's type lookup
    finds), or ``_MISSING``; recorded for the current frame's guard."""
    record_lookup(cls, name)
    for base in cls.__mro__:
        if name in base.__dict__:
            return base.__dict__[name]
    return _MISSING


def _is_data_descriptor(attr) -> bool:
    t = type(attr)
    return hasattr(t, "__set__") or hasattr(t, "__delete__")


def bind_class_attr(tx, attr, self_vt, cls, source):
    """The tracker for class attribute ``attr`` looked up through ``self_vt`` (may be None)."""
    from .builder import wrap, wrap_constant_like
    from .functions import BoundMethodVariable, UserFunctionVariable

    if isinstance(attr, staticmethod):  # with a source, its closure cells are read guarded
        return wrap(tx, attr.__func__, source) if source is not None else wrap_constant_like(tx, attr.__func__)
    if isinstance(attr, classmethod):
        return BoundMethodVariable(wrap_constant_like(tx, attr.__func__), UserDefinedClassVariable(cls))
    if isinstance(attr, types.FunctionType):
        if self_vt is None:
            return UserFunctionVariable(attr)
        return BoundMethodVariable(UserFunctionVariable(attr), self_vt)
    if isinstance(attr, property):
        if self_vt is None:
            return wrap_constant_like(tx, attr)
        if attr.fget is None:
            unsupported("property without getter")
        if isinstance(attr.fget, types.FunctionType):  # inlined even when torch defines it (parametrize)
            return UserFunctionVariable(attr.fget).call_function(tx, [self_vt], {})
        return wrap_constant_like(tx, attr.fget).call_function(tx, [self_vt], {})
    if self_vt is not None and python_descriptor(attr):
        # CPython calls its __get__ on every read (functools.cached_property fills the
        # instance's __dict__, or raises TypeError without one): a graph break, the read
        # runs natively
        unsupported(f"an attribute served by a {type(attr).__name__} descriptor")
    return wrap(tx, attr, source) if source is not None else wrap_constant_like(tx, attr)


def python_descriptor(attr) -> bool:
    """Whether ``attr``'s type defines ``__get__`` in Python."""
    return hasattr(getattr(type(attr), "__get__", None), "__code__")


def generic_getattr(tx, vt, obj, name, instance_dict=None):
    """``getattr(obj, name)`` for a real object (or a fresh one with ``instance_dict`` trackers)."""
    from .builder import wrap, wrap_constant_like

    pending = tx.output.side_effects.load_attr(vt, name)
    if pending is not None:
        return pending
    cls = vt.python_type()
    source = attr_source(vt.source, name)
    if obj is not None and vt.source is None and cls.__module__.split(".")[0] in ("inspect", "typing"):
        # introspection objects made during tracing (inspect.Signature): read natively
        return wrap_constant_like(tx, getattr(obj, name))
    if obj is not None and mro_lookup(cls, "__getattribute__") not in (object.__getattribute__, _MISSING) and \
            not isinstance(obj, torch.nn.Module):
        # A custom __getattribute__ (e.g. transformers' config attribute_map): ask the object.
        try:
            value = getattr(obj, name)
        except AttributeError:
            unsupported(f"AttributeError: '{cls.__name__}' object has no attribute '{name}'")
        if isinstance(value, types.MethodType) and value.__self__ is obj and isinstance(value.__func__, types.FunctionType):
            from .functions import BoundMethodVariable, UserFunctionVariable

            return BoundMethodVariable(UserFunctionVariable(value.__func__), vt)
        return wrap(tx, value, source)
    cls_attr = mro_lookup(cls, name)
    if cls_attr is not _MISSING and _is_data_descriptor(cls_attr):
        if isinstance(cls_attr, property):
            return bind_class_attr(tx, cls_attr, vt, cls, None)
        if obj is None:
            unsupported(f"data descriptor {name} on a new object")
        if python_descriptor(cls_attr):
            unsupported(f"an attribute served by a {type(cls_attr).__name__} descriptor")
        return wrap(tx, getattr(obj, name), source)
    if instance_dict is not None:
        if name in instance_dict:
            return instance_dict[name]
    elif name in getattr(obj, "__dict__", {}):
        return wrap(tx, obj.__dict__[name], source)
    if cls_attr is not _MISSING:
        if type(cls_attr).__module__ == "builtins" and hasattr(type(cls_attr), "__get__") and not isinstance(
                cls_attr, (types.FunctionType, staticmethod, classmethod, property)) and obj is not None and callable(cls_attr):
            from .builtin import BuiltinVariable

            return BuiltinVariable(getattr(obj, name), source)  # a C method: rebuilt through its source
        return bind_class_attr(tx, cls_attr, vt, cls, source)
    getattr_fn = mro_lookup(cls, "__getattr__")
    if isinstance(getattr_fn, types.FunctionType):
        from .functions import UserFunctionVariable

        return UserFunctionVariable(getattr_fn).call_function(tx, [vt, ConstantVariable(name)], {})
    unsupported(f"AttributeError: '{cls.__name__}' object has no attribute '{name}'")


_CMP_DUNDER = {"==": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__"}
_CMP_SWAP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _user_dunder(vt, name):
    """The Python function implementing ``name`` for a user object tracker, else None."""
    if not isinstance(vt, (UserDefinedObjectVariable, NewObjectVariable)):
        return None
    fn = mro_lookup(vt.python_type(), name)
    return fn if isinstance(fn, types.FunctionType) else None


def user_compare(tx, op, a, b):
    """``a op b`` through user-defined rich comparisons, CPython's order: the right
    operand's reflected method first when its type is a proper subclass, ``NotImplemented``
    falls through, ``!=`` inverts ``__eq__``, ``==`` falls back to identity; None when no
    user-defined comparison is involved."""
    from .functions import UserFunctionVariable

    name, swapped = _CMP_DUNDER[op], _CMP_DUNDER[_CMP_SWAP[op]]
    left, right = _user_dunder(a, name), _user_dunder(b, swapped)
    if op == "!=" and left is None and _user_dunder(a, "__eq__") is not None:
        result = user_compare(tx, "==", a, b)
        return ConstantVariable(not result.truth(tx))
    if left is None and right is None:
        return None
    attempts = [(left, a, b), (right, b, a)]
    if right is not None and a.python_type() is not b.python_type() and issubclass(b.python_type(), a.python_type()):
        attempts.reverse()
    for fn, x, y in attempts:
        if fn is None:
            continue
        result = UserFunctionVariable(fn).call_function(tx, [x, y], {})
        if not (result.is_python_constant() and result.as_python_constant() is NotImplemented):
            return result
    if op in ("==", "!="):
        same = a is b or getattr(a, "value", a) is getattr(b, "value", b)
        return ConstantVariable(same if op == "==" else not same)
    unsupported(f"TypeError: '{op}' not supported between instances of '{a.python_type().__name__}' and "
                f"'{b.python_type().__name__}'")


def user_truth(tx, vt, cls):
    """``bool(obj)``: ``__bool__``, else ``__len__() != 0``, else True (CPython's order)."""
    from .functions import UserFunctionVariable

    fn = mro_lookup(cls, "__bool__")
    if isinstance(fn, types.FunctionType):
        result = UserFunctionVariable(fn).call_function(tx, [vt], {})
        if not (result.is_python_constant() and isinstance(result.as_python_constant(), bool)):
            unsupported("TypeError: __bool__ should return bool")
        return result.as_python_constant()
    if fn is not _MISSING and fn is not None:
        unsupported(f"bool() of a {cls.__name__} object (a builtin __bool__)")
    fn = mro_lookup(cls, "__len__")
    if isinstance(fn, types.FunctionType):
        result = UserFunctionVariable(fn).call_function(tx, [vt], {})
        if not (result.is_python_constant() and isinstance(result.as_python_constant(), int)):
            unsupported("__len__ returning a non-constant")
        if result.as_python_constant() < 0:
            unsupported("ValueError: __len__() should return >= 0")
        return result.as_python_constant() != 0
    if fn is not _MISSING and fn is not None:
        unsupported(f"bool() of a {cls.__name__} object (a builtin __len__)")
    return True


_MATCH_SELF = (bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple)


def match_keys(tx, subject, keys_vt):
    """MATCH_KEYS: a tuple of ``subject``'s values for the pattern's keys, or None."""
    from .containers import TupleVariable

    keys = keys_vt.unpack_var_sequence(tx)
    values = []
    for key in keys:
        if not subject.call_method(tx, "__contains__", [key], {}).truth(tx):
            return ConstantVariable(None)
        values.append(tx.getitem(subject, key))
    return TupleVariable(values)


def match_class(tx, subject, cls_vt, count, names):
    """MATCH_CLASS: ``isinstance(subject, cls)`` then the positional sub-patterns'
    attributes (through ``__match_args__``, or the subject itself for builtins such as
    ``int(x)``) and the keyword ones; a tuple of them, or None when any is missing."""
    from .containers import TupleVariable

    cls = cls_vt.as_python_constant()
    if not isinstance(cls, type):
        unsupported("TypeError: called match pattern must be a class")
    if not tx.isinstance_check(subject, cls_vt):
        return ConstantVariable(None)
    attrs = []
    if count:
        match_args = getattr(cls, "__match_args__", None)
        if match_args is None and issubclass(cls, _MATCH_SELF):
            if count > 1:
                unsupported(f"TypeError: {cls.__name__}() accepts 1 positional sub-pattern ({count} given)")
            values = [subject]
        else:
            if not isinstance(match_args, tuple) or len(match_args) < count:
                unsupported(f"TypeError: {cls.__name__}() accepts {len(match_args or ())} positional sub-patterns")
            attrs = list(match_args[:count])
            values = []
    else:
        values = []
    attrs += list(names)
    if len(set(attrs)) != len(attrs):
        unsupported("TypeError: match pattern names an attribute twice")
    for name in attrs:
        if not tx.hasattr(subject, name):
            return ConstantVariable(None)
        values.append(tx.getattr(subject, name))
    return TupleVariable(values)


def enter_user_context(tx, ctx):
    """BEFORE_WITH on a user context manager (``__enter__``/``__exit__`` written in
    Python, or a ``contextlib.contextmanager`` generator): ``(exit tracker, value)``."""
    from .functions import BoundMethodVariable, UserFunctionVariable
    from .generators import GeneratorContextManagerVariable, GeneratorExitVariable

    if isinstance(ctx, GeneratorContextManagerVariable):
        value = ctx.enter(tx)
        return GeneratorExitVariable(ctx), value
    enter, exit_ = _user_dunder(ctx, "__enter__"), _user_dunder(ctx, "__exit__")
    if enter is None or exit_ is None:
        unsupported(f"with-block on {ctx} (no __enter__/__exit__ written in Python)")
    value = UserFunctionVariable(enter).call_function(tx, [ctx], {})
    exit_vt = BoundMethodVariable(UserFunctionVariable(exit_), ctx)
    exit_vt.user_context_exit = True  # a break in the block runs the rest natively (see finish_break)
    return exit_vt, value


def unpack_user_sequence(tx, vt, cls):
    """Iterate a user object: through its ``__iter__`` (a generator is run to the end), or
    ``__len__`` + ``__getitem__`` for sequence-protocol classes (``collections.abc.Sequence``)."""
    it = mro_lookup(cls, "__iter__")
    if isinstance(it, types.FunctionType) and not it.__module__.startswith(("collections", "_collections_abc")):
        return vt.call_method(tx, "__iter__", [], {}).unpack_var_sequence(tx)
    if isinstance(mro_lookup(cls, "__len__"), types.FunctionType) and isinstance(
            mro_lookup(cls, "__getitem__"), types.FunctionType):
        n = vt.call_method(tx, "__len__", [], {}).as_python_constant()
        return [vt.call_method(tx, "__getitem__", [ConstantVariable(i)], {}) for i in range(n)]
    unsupported(f"iterating a {cls.__name__} object")


class UserDefinedClassVariable(ValueVariable):
    """A class; calling it builds namedtuples, dataclasses, ModelOutputs, grad-mode and
    autocast contexts, or a fresh user object whose ``__init__`` is inlined."""

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.from_source(self.source)
        value = self.value
        return lambda rt: value

    def var_getattr(self, tx, name):
        cls = self.value
        record_lookup(cls, name)
        for base in cls.__mro__:
            if name in base.__dict__:
                attr = base.__dict__[name]
                if isinstance(attr, classmethod):
                    from .functions import BoundMethodVariable
                    from .builder import wrap_constant_like

                    return BoundMethodVariable(wrap_constant_like(tx, attr.__func__), self)
                if isinstance(attr, staticmethod) and isinstance(attr.__func__, types.FunctionType):
                    return bind_class_attr(tx, attr, None, cls, attr_source(self.source, name))
                if isinstance(attr, (staticmethod, types.FunctionType, property)):
                    return bind_class_attr(tx, attr, None, cls, None)
                if isinstance(attr, types.ClassMethodDescriptorType):  # dict.fromkeys, chain.from_iterable
                    from .builder import wrap_constant_like

                    return wrap_constant_like(tx, getattr(cls, name))
                return bind_class_attr(tx, attr, None, cls, attr_source(self.source, name))
        if name in ("__name__", "__qualname__", "__module__"):
            return ConstantVariable(getattr(cls, name))
        if isinstance(mro_lookup(type(cls), name), property):
            # a metaclass property (torch.distributed's group.WORLD): read it, guarded by its source
            from .builder import wrap

            return wrap(tx, getattr(cls, name), attr_source(self.source, name) if self.source else None)
        unsupported(f"class attribute {cls.__name__}.{name}")

    def call_function(self, tx, args, kwargs):
        from .containers import DictVariable, NamedTupleVariable, SizeVariable
        from .ctx_manager import AutocastVariable, GradModeVariable, set_grad
        cls = self.value
        if cls is torch.no_grad or cls is torch.enable_grad:
            return GradModeVariable(cls is torch.enable_grad, torch.is_grad_enabled())
        if cls is torch.set_grad_enabled:
            mode = args[0].as_python_constant()
            initial = torch.is_grad_enabled()
            set_grad(tx, mode)
            return GradModeVariable(mode, initial, applied=True)
        if cls in (torch.autocast, torch.amp.autocast, getattr(torch.cpu.amp, "autocast", None)):
            params = inspect.signature(torch.autocast.__init__).bind(None, *[a.as_python_constant() for a in args],
                                                                    **{k: v.as_python_constant() for k, v in kwargs.items()})
            params.apply_defaults()
            named = dict(params.arguments)
            named.pop("self")
            return AutocastVariable(named)
        if cls is torch.Size:
            return SizeVariable(args[0].unpack_var_sequence(tx) if args else [])
        if cls is functools.partial:
            from .functions import make_partial

            return make_partial(tx, args, kwargs)
        if cls in (operator.itemgetter, operator.attrgetter, operator.methodcaller):
            from .functions import OperatorGetterVariable

            return OperatorGetterVariable(cls, args, kwargs)
        from .iterators import build_native_iterator, iterator_ctor

        if iterator_ctor(cls):
            return build_native_iterator(tx, cls, args, kwargs)
        from ..polyfills import polyfill_for

        poly = polyfill_for(cls)
        if poly is not None:
            from ..polyfills import call_polyfill

            return call_polyfill(tx, poly, args, kwargs)
        if cls in (torch.finfo, torch.iinfo, torch.device) and all(a.is_python_constant() for a in args):
            from .builder import wrap_constant_like

            return wrap_constant_like(tx, cls(*[a.as_python_constant() for a in args],
                                              **{k: v.as_python_constant() for k, v in kwargs.items()}))
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            fields = cls._fields
            defaults = getattr(cls, "_field_defaults", {})
            bound = dict(zip(fields, args))
            bound.update(kwargs)
            from .builder import wrap_constant_like

            items = [bound[f] if f in bound else wrap_constant_like(tx, defaults[f]) for f in fields]
            return NamedTupleVariable(items, cls)
        if is_model_output_class(cls):
            return ModelOutputVariable.create(tx, cls, args, kwargs)
        if cls in (collections.OrderedDict, collections.defaultdict, collections.Counter, dict, collections.deque):
            from .native import native_construct

            factory = None
            if cls is collections.defaultdict:
                factory = args[0] if args else ConstantVariable(None)
                value = factory.as_python_constant() if factory.is_python_constant() else None
                if value is not None and not callable(value):
                    unsupported("TypeError: first argument must be callable or None")
                args = [ConstantVariable(None), *args[1:]]
            result = native_construct(tx, cls, args, kwargs)
            if factory is not None:
                result.default_factory = factory
            return result
        if issubclass(cls, BaseException):
            unsupported(f"constructing exception {cls.__name__}")
        if issubclass(cls, torch.nn.Module) or issubclass(cls, torch.Tensor):
            unsupported(f"constructing {cls.__name__} inside a compiled frame")
        if (cls.__new__ is object.__new__ and type(cls) in (type, abc.ABCMeta) and "__slots__" not in cls.__dict__
                and cls.__module__ not in ("builtins",)):
            obj = NewObjectVariable(cls)
            init = mro_lookup(cls, "__init__")
            if isinstance(init, types.FunctionType):
                from .functions import UserFunctionVariable

                UserFunctionVariable(init).call_function(tx, [obj, *args], kwargs)
            elif args or kwargs:
                unsupported(f"{cls.__name__}() takes no arguments")
            return obj
        unsupported(f"constructing {cls.__qualname__}")


class UserDefinedObjectVariable(VariableTracker):
    """A pre-existing user object (guarded by type; attributes read through sources)."""

    def __init__(self, value, source=None):
        self.value = value
        self.source = source

    def python_type(self):
        return type(self.value)

    def var_getattr(self, tx, name):
        return generic_getattr(tx, self, self.value, name)

    def call_function(self, tx, args, kwargs):
        if isinstance(self.value, functools._lru_cache_wrapper) and isinstance(
                getattr(self.value, "__wrapped__", None), types.FunctionType):
            # functools.lru_cache / cache: the wrapped function is traced (as TorchDynamo does)
            from .builder import is_constant, wrap

            if all(a.is_python_constant() for a in args) and all(v.is_python_constant() for v in kwargs.values()):
                # constant arguments: the cached answer, computed (and cached) as eager would
                try:
                    result = self.value(*[a.as_python_constant() for a in args],
                                        **{k: v.as_python_constant() for k, v in kwargs.items()})
                except Exception as e:  # noqa: BLE001
                    unsupported(f"lru_cache'd {self.value.__wrapped__.__qualname__} raised {type(e).__name__}")
                if is_constant(result):
                    return ConstantVariable(result)
            wrapped = self.value.__wrapped__
            return wrap(tx, wrapped, attr_source(self.source, "__wrapped__")).call_function(tx, args, kwargs)
        call = mro_lookup(type(self.value), "__call__")
        if isinstance(call, types.FunctionType):
            from .functions import UserFunctionVariable

            return UserFunctionVariable(call).call_function(tx, [self, *args], kwargs)
        unsupported(f"calling {type(self.value).__name__} object")

    def call_method(self, tx, name, args, kwargs):
        method = mro_lookup(type(self.value), name)
        if method is _MISSING and name.startswith("__"):
            unsupported(f"{type(self.value).__name__} has no {name}")
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def unpack_var_sequence(self, tx):
        return unpack_user_sequence(tx, self, type(self.value))

    def truth(self, tx):
        return user_truth(tx, self, type(self.value))

    def as_python_constant(self):
        if isinstance(self.value, (torch.finfo, torch.iinfo)) or self.source is None and not callable(self.value):
            return self.value
        unsupported(f"{type(self.value).__name__} object is not a constant")

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.from_source(self.source)
        value = self.value
        return lambda rt: value

    def __repr__(self):
        return f"UserDefinedObjectVariable({type(self.value).__name__})"


class NewObjectVariable(VariableTracker):
    """An instance of a plain user class (or dataclass) created during tracing."""

    def __init__(self, cls):
        self.cls = cls
        self.attrs: dict[str, VariableTracker] = {}

    def python_type(self):
        return self.cls

    def var_getattr(self, tx, name):
        if name == "__class__":
            return UserDefinedClassVariable(self.cls)
        return generic_getattr(tx, self, None, name, instance_dict=self.attrs)

    def store_attr(self, tx, name, value):
        self.attrs[name] = value

    def call_function(self, tx, args, kwargs):
        call = mro_lookup(self.cls, "__call__")
        if isinstance(call, types.FunctionType):
            from .functions import UserFunctionVariable

            return UserFunctionVariable(call).call_function(tx, [self, *args], kwargs)
        unsupported(f"calling {self.cls.__name__} object")

    def call_method(self, tx, name, args, kwargs):
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def unpack_var_sequence(self, tx):
        return unpack_user_sequence(tx, self, self.cls)

    def truth(self, tx):
        return user_truth(tx, self, self.cls)

    def reconstruct(self, cg):
        cls = self.cls
        attrs = {k: cg.recipe(v) for k, v in self.attrs.items()}

        def make(rt):
            obj = object.__new__(cls)
            obj.__dict__.update({k: r(rt) for k, r in attrs.items()})
            return obj
        return make

    def __repr__(self):
        return f"NewObjectVariable({self.cls.__name__})"


# Attributes of these modules are folded to constants (no guard): their functions,
# classes and constants do not change while a program runs.
_FOLDED_MODULES = ("torch", "math", "operator", "builtins", "collections", "functools", "itertools", "typing",
                   "dataclasses", "inspect")
_MUTABLE_CONTAINERS = (list, dict, set, collections.OrderedDict, collections.defaultdict, collections.deque)


def _is_mutable_state(value) -> bool:
    """Whether a module attribute is state a program may change (a container, an object of a
    class defined outside the folded modules): it is tracked through its source, not folded
    (``torch.my_list.append(1)`` under capture was run once at trace time and then dropped)."""
    if type(value) in _MUTABLE_CONTAINERS:
        return True
    if callable(value) or isinstance(value, (type, types.ModuleType)):
        return False
    return type(value).__module__.split(".")[0] not in (*_FOLDED_MODULES, "enum")


def _guard_folded(tx, source: str, value) -> None:
    """The guard on a module attribute folded to a constant: its value (a plain constant,
    which a property may make afresh per read) or its identity (a function, a class;
    a bound method is made afresh per read: not guarded, its ``__self__`` is the state)."""
    g = tx.output.guards
    if type(value) in (bool, int, float, str, type(None)):
        g.constant_match(source, value)
        return
    owner = getattr(value, "__self__", None)
    if owner is None or isinstance(owner, types.ModuleType):
        g.id_match(source, value)


class PythonModuleVariable(VariableTracker):
    """A Python module (``math``, ``torch.nn.functional``, a user module)."""

    def __init__(self, value, source=None):
        self.value = value
        self.source = source

    def python_type(self):
        return types.ModuleType

    def as_python_constant(self):
        return self.value

    def is_python_constant(self):
        return True

    def var_getattr(self, tx, name):
        from .builder import wrap, wrap_constant_like

        pending = tx.output.side_effects.load_global(self.value.__dict__, name)
        if pending is not None:
            return pending
        try:
            value = getattr(self.value, name)
        except AttributeError:
            unsupported(f"module {self.value.__name__} has no attribute {name}")
        if self.value.__name__.split(".")[0] in _FOLDED_MODULES and not _is_mutable_state(value):
            if isinstance(value, types.ModuleType):  # keeps a source for mutable state under it
                return PythonModuleVariable(value, self.source and attr_source(self.source, name))
            if self.source is not None:  # folded, but rebinding it (a patched F.gelu, math.pi, a torch.backends
                _guard_folded(tx, attr_source(self.source, name), value)  # flag) recompiles
            return wrap_constant_like(tx, value)
        if self.source is None:
            unsupported(f"mutable attribute {self.value.__name__}.{name} of a module without a source")
        return wrap(tx, value, attr_source(self.source, name))

    def reconstruct(self, cg):
        value = self.value
        return lambda rt: value


def is_model_output_class(cls) -> bool:
    return isinstance(cls, type) and any(b.__name__ == "ModelOutput" and b.__module__.startswith("transformers")
                                         for b in cls.__mro__)


class ModelOutputVariable(VariableTracker):
    """A transformers ``ModelOutput`` (an OrderedDict dataclass) built in the frame."""

    def __init__(self, cls, fields: dict, source=None):
        self.cls = cls
        self.fields = fields  # every dataclass field name -> tracker
        self.source = source

    @classmethod
    def create(cls, tx, model_cls, args, kwargs):
        names = [f.name for f in dataclasses.fields(model_cls)]
        values = dict(zip(names, args))
        values.update(kwargs)
        fields = {}
        for f in dataclasses.fields(model_cls):
            if f.name in values:
                fields[f.name] = values[f.name]
            elif f.default is not dataclasses.MISSING:
                fields[f.name] = ConstantVariable(f.default)
            else:
                fields[f.name] = ConstantVariable(None)
        return cls(model_cls, fields)

    def python_type(self):
        return self.cls

    def _present(self):
        return [(k, v) for k, v in self.fields.items() if not (isinstance(v, ConstantVariable) and v.value is None)]

    def var_getattr(self, tx, name):
        if name in self.fields:
            return self.fields[name]
        from .functions import BoundMethodVariable, UserFunctionVariable

        if name in ("to_tuple", "keys", "values", "items", "get", "__getitem__", "__len__", "__contains__"):
            return MethodVariable(self, name)
        attr = mro_lookup(self.cls, name)
        if isinstance(attr, types.FunctionType):
            return BoundMethodVariable(UserFunctionVariable(attr), self)
        unsupported(f"ModelOutput attribute {name}")

    def call_method(self, tx, name, args, kwargs):
        from .containers import TupleVariable

        if name == "to_tuple":
            return TupleVariable([v for _, v in self._present()])
        if name == "__getitem__":
            key = args[0].as_python_constant()
            if isinstance(key, str):
                return dict(self._present())[key]
            return TupleVariable([v for _, v in self._present()]).getitem(tx, args[0])
        if name in ("keys", "values", "items"):
            from .containers import DictViewVariable

            present = self._present()
            if name == "keys":
                return DictViewVariable(self, name, [ConstantVariable(k) for k, _ in present])
            if name == "values":
                return DictViewVariable(self, name, [v for _, v in present])
            return DictViewVariable(self, name, [TupleVariable([ConstantVariable(k), v]) for k, v in present])
        if name == "__len__":
            return ConstantVariable(len(self._present()))
        if name == "__contains__":
            return ConstantVariable(args[0].as_python_constant() in dict(self._present()))
        if name == "get":
            return dict(self._present()).get(args[0].as_python_constant(), args[1] if len(args) > 1 else ConstantVariable(None))
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def unpack_var_sequence(self, tx):
        return [ConstantVariable(k) for k, _ in self._present()]

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.from_source(self.source)
        cls = self.cls
        recipes = {k: cg.recipe(v) for k, v in self.fields.items()}
        return lambda rt: cls(**{k: r(rt) for k, r in recipes.items()})

