"""Wrapping real Python values read from a source into trackers (VariableBuilder).

Reading a value from a source is where guards are installed: a tensor becomes a graph
input (placeholder) with TENSOR_MATCH, a Python constant is specialised with
EQUALS_MATCH, containers get TYPE/LEN/KEYS guards, functions and classes ID_MATCH,
objects TYPE_MATCH.  Trackers are cached per source and per object identity, so
aliasing is preserved (two sources of one tensor share one placeholder and get an
``is`` guard).
"""
from __future__ import annotations

import builtins
import collections
import dataclasses
import enum
import functools
import os
import types
import weakref

import torch

from ...shapes.policy import scalar_source
from ..guards import PLAIN_CONSTANT_TYPES
from ..source import attr_source, item_source
from .base import ConstantVariable, VariableTracker

_CONSTANT_TYPES = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis), type(NotImplemented),
                   torch.dtype, torch.device, torch.layout, torch.memory_format, slice, range, types.CodeType)


def is_constant(value) -> bool:
    """Whether ``value`` is treated as a constant: an instance of a builtin immutable type
    (a subclass only when it overrides nothing in Python: numpy's float64, not a ``str``
    subclass whose ``__eq__``/``__contains__`` would run at trace time and in guards), or an
    enum member."""
    if isinstance(value, enum.Enum):
        return True
    cls = type(value)
    if cls in _CONSTANT_TYPES:
        return True
    return isinstance(value, _CONSTANT_TYPES) and not _python_overrides(cls)


def _python_overrides(cls) -> bool:
    """Whether a class between ``cls`` and its builtin base defines Python functions."""
    flag = _OVERRIDES.get(cls)
    if flag is None:
        flag = _OVERRIDES[cls] = any(
            isinstance(v, (types.FunctionType, property, classmethod, staticmethod)) and k not in ("__new__",)
            for klass in cls.__mro__ if klass not in _CONSTANT_TYPES and klass is not object
            for k, v in vars(klass).items())
    return flag


_OVERRIDES: dict = {}


def is_torch_callable(value) -> bool:
    from .torch_fns import is_torch_function

    return is_torch_function(value)


class _CallableStr(str):
    def __call__(self):
        return str(self)


class _DynamicSource(torch._guards.Source):
    """A ``torch._guards.Source`` naming a tensor for ShapeEnv's symbols."""

    def __init__(self, name_str):
        object.__setattr__(self, "_name", name_str)

    @property
    def name(self):
        # torch 2.13 reads ``source.name``, older releases call ``source.name()``.
        return _CallableStr(self._name)

    def guard_source(self):
        return torch._guards.GuardSource.LOCAL

    def reconstruct(self, codegen):
        raise NotImplementedError

    def __hash__(self):
        return hash(self._name)

    def __eq__(self, other):
        return isinstance(other, _DynamicSource) and other._name == self._name


def wrap_tensor(tx, value: torch.Tensor, source: str):
    from .tensor import TensorVariable
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    out = tx.output
    existing = out.id_cache.get(id(value))
    if existing is not None and isinstance(existing, TensorVariable):
        out.guards.add(f"{existing.source} is {source}")
        return existing
    policy = tx.root.dynamic
    dims = [policy.is_dynamic(source, value, d) for d in range(value.dim())]
    if isinstance(value, torch.nn.Parameter) or not any(dims):
        fake = out.fake_mode.from_tensor(value, static_shapes=True)
    else:
        ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC if d else DimDynamic.STATIC for d in dims])
        fake = out.fake_mode.from_tensor(value, source=_DynamicSource(source), symbolic_context=ctx)
        for d, s in enumerate(fake.shape):
            if not isinstance(s, int):
                out.symbol_sources.setdefault(s.node.expr, (source, d))
    from ..guards import keyed_by_caller
    from ..output_graph import forbid_data_ptr

    forbid_data_ptr(fake)
    node = out.add_placeholder(source, value, fake)
    vt = TensorVariable(node, fake, source, type(value))
    out.guards.tensor_match(source, value, fake, keyed=keyed_by_caller(tx.root.fn, source))
    out.id_cache[id(value)] = vt
    out.tensor_inputs.append(source)
    return vt


def wrap_symint(tx, value: int, source: str):
    """A Python int argument as a SymInt graph input (automatic dynamic for ints): a new
    ShapeEnv symbol with ``value`` as its hint, guarded by ``type(source) is int`` plus
    whatever the trace assumes about it (ShapeEnv guards, e.g. ``L['n'] > 3``)."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic
    from .tensor import SymNodeVariable

    out = tx.output
    symint = out.shape_env.create_unspecified_symint_and_symbol(value, _DynamicSource(source), DimDynamic.DYNAMIC)
    if isinstance(symint, int):  # the ShapeEnv specialised it
        out.guards.constant_match(source, value)
        return ConstantVariable(value, source)
    out.symbol_sources.setdefault(symint.node.expr, (source, None))
    node = out.add_placeholder(source, value, symint)
    out.guards.add(f"type({source}) is int")
    return SymNodeVariable(node, symint, source)


def wrap(tx, value, source: str | None) -> VariableTracker:
    """The tracker for ``value`` read from ``source`` (None: no guards, no re-reading)."""
    if source is None:
        return wrap_constant_like(tx, value)
    out = tx.output
    cached = out.source_cache.get(source)
    if cached is not None:
        return cached
    vt = _wrap(tx, value, source)
    out.source_cache[source] = vt
    return vt


def _wrap(tx, value, source):
    from .containers import (SEQ_ITERATOR_TYPES, DictVariable, ListVariable, NamedTupleVariable, SetVariable,
                             SizeVariable, TupleVariable, dict_key)
    from .functions import BoundMethodVariable, UserFunctionVariable
    from .nn_module import NNModuleVariable
    from .torch_fns import TorchVariable
    from .user_defined import (ModelOutputVariable, PythonModuleVariable, UserDefinedClassVariable,
                               UserDefinedObjectVariable, is_model_output_class)

    out = tx.output
    g = out.guards
    if isinstance(value, torch.Tensor):
        return wrap_tensor(tx, value, source)
    if is_constant(value):
        if type(value) is int and tx.root.dynamic.is_dynamic_scalar(source, value):
            return wrap_symint(tx, value, source)
        if isinstance(value, (slice, range, types.CodeType)):
            g.id_match(source, value) if isinstance(value, types.CodeType) else g.constant_match(source, value)
        else:
            g.constant_match(source, value)
        return ConstantVariable(value, source)
    if id(value) in out.id_cache:
        existing = out.id_cache[id(value)]
        if getattr(existing, "source", None) is not None and not isinstance(existing, ConstantVariable):
            g.add(f"{existing.source} is {source}")
        return existing
    if type(value) in SEQ_ITERATOR_TYPES:
        # A list/tuple iterator (e.g. a for-loop's iterator handed to a resume function):
        # the same object, walking the list it was made over (read through __reduce__,
        # without consuming it) from its position, which is guarded.
        vt = _wrap_seq_iterator(tx, value, source)
        out.id_cache[id(value)] = vt
        return vt
    if is_model_output_class(type(value)):
        import dataclasses as _dc

        g.type_match(source, value)
        fields = {f.name: wrap(tx, getattr(value, f.name), attr_source(source, f.name)) for f in _dc.fields(value)}
        vt = ModelOutputVariable(type(value), fields, source)
        out.id_cache[id(value)] = vt
        return vt
    if isinstance(value, weakref.ReferenceType):
        referent = value()
        g.type_match(source, value)
        return WeakRefVariable(source, wrap(tx, referent, f"{source}()") if referent is not None else ConstantVariable(None))
    if isinstance(value, os._Environ):
        return EnvironVariable(source)
    if isinstance(value, torch.Size):
        g.constant_match(source, value)
        return SizeVariable([ConstantVariable(v) for v in value], source)
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        g.len_match(source, value)
        return NamedTupleVariable([wrap(tx, v, item_source(source, i)) for i, v in enumerate(value)], type(value), source)
    if type(value) in (tuple, list):
        if len(value) > 8 and not scalar_source(item_source(source, 0)) and all(
                type(v) in PLAIN_CONSTANT_TYPES for v in value):
            g.type_match(source, value)  # a long list of constants: one check for all its items
            g.items_match(source, "0", value)
            items = [ConstantVariable(v, item_source(source, i)) for i, v in enumerate(value)]
        else:
            g.len_match(source, value)
            items = [wrap(tx, v, item_source(source, i)) for i, v in enumerate(value)]
        vt = TupleVariable(items, source) if type(value) is tuple else ListVariable(items, source)
        out.id_cache[id(value)] = vt
        return vt
    if type(value) in (dict, collections.OrderedDict, collections.defaultdict) and all(is_constant(k) for k in value):
        g.keys_match(source, value)
        items = {k: (ConstantVariable(k), wrap(tx, v, item_source(source, k))) for k, v in value.items()}
        factory = None
        if type(value) is collections.defaultdict:
            factory = wrap_constant_like(tx, value.default_factory)
        vt = DictVariable(items, type(value), source, factory)
        out.id_cache[id(value)] = vt
        return vt
    if type(value) in (dict, collections.OrderedDict) and all(_identity_hashed(k) for k in value):
        # Keys compared by identity (modules, functions, classes): guard the key list.
        g.type_match(source, value)
        g.add(f"list({source}.keys()) == {g.const(list(value.keys()))}")
        items = {}
        for i, (k, v) in enumerate(value.items()):
            key_vt = wrap_constant_like(tx, k) if not isinstance(k, torch.nn.Module) else _wrap_module_key(tx, k)
            items[dict_key(key_vt)] = (key_vt, wrap(tx, v, f"list({source}.values())[{i}]"))
        vt = DictVariable(items, type(value), source)
        out.id_cache[id(value)] = vt
        return vt
    if type(value) in (set, frozenset) and all(is_constant(v) for v in value):
        g.constant_match(source, value)
        if len(value) > 1:  # == ignores order: equal sets of other insertion histories iterate differently
            g.add(f"tuple({source}) == {g.const(tuple(value))}")
        vt = SetVariable.of_existing(value, [ConstantVariable(v) for v in value], source)
        out.id_cache[id(value)] = vt
        return vt
    if isinstance(value, torch.nn.Module):
        g.type_match(source, value)
        vt = NNModuleVariable(value, source)
        out.id_cache[id(value)] = vt
        return vt
    if type(value) is functools.partial:
        from .functions import PartialVariable

        g.type_match(source, value)
        g.len_match(f"{source}.args", value.args)
        g.keys_match(f"{source}.keywords", value.keywords)
        vt = PartialVariable(wrap(tx, value.func, f"{source}.func"),
                             [wrap(tx, a, item_source(f"{source}.args", i)) for i, a in enumerate(value.args)],
                             {k: wrap(tx, v, item_source(f"{source}.keywords", k)) for k, v in value.keywords.items()},
                             source)
        out.id_cache[id(value)] = vt
        return vt
    if is_torch_callable(value):
        owner = getattr(value, "__self__", None)
        if owner is None or isinstance(owner, types.ModuleType):  # a bound method is made afresh per access
            g.id_match(source, value)  # a global bound to a torch function may be rebound
        return TorchVariable(value, source)
    if isinstance(value, types.FunctionType):
        # FUNCTION_MATCH on the code: closures re-made per call (e.g. handed to a resume
        # function) still match; defaults and cell contents are read through sources.
        g.id_match(f"{source}.__code__", value.__code__)
        return UserFunctionVariable(value, source)
    if isinstance(value, types.MethodType) and value.__name__ == "__exit__" and isinstance(
            value.__self__, (torch.no_grad, torch.enable_grad, torch.set_grad_enabled, torch.autocast)):
        return _entered_context_exit(tx, value.__self__, source)
    if isinstance(value, types.MethodType):
        g.id_match(attr_source(source, "__func__"), value.__func__)
        return BoundMethodVariable(UserFunctionVariable(value.__func__, attr_source(source, "__func__")),
                                   wrap(tx, value.__self__, attr_source(source, "__self__")))
    if isinstance(value, types.ModuleType):
        return PythonModuleVariable(value, source)
    if isinstance(value, types.BuiltinFunctionType) or id(value) in _BUILTIN_IDS:
        from .builtin import BuiltinVariable

        owner = getattr(value, "__self__", None)
        if owner is None or isinstance(owner, types.ModuleType):
            g.id_match(source, value)  # a bound C method is made afresh on each access: no identity
        return BuiltinVariable(value, source)
    if isinstance(value, type):
        g.id_match(source, value)
        return UserDefinedClassVariable(value, source)
    g.type_match(source, value)
    vt = UserDefinedObjectVariable(value, source)
    out.id_cache[id(value)] = vt
    return vt


# (+ object.__setattr__: the plain store a class with its own __setattr__ calls)
_BUILTIN_IDS = {id(v) for v in vars(builtins).values() if callable(v)} | {id(object.__setattr__)}


def _wrap_seq_iterator(tx, value, source):
    from .base import unsupported
    from .containers import BaseListVariable, ListIteratorVariable

    g = tx.output.guards
    g.type_match(source, value)
    reduced = value.__reduce__()
    state_source = f"{source}.__reduce__()[2:]"
    if len(reduced) < 3:  # exhausted: CPython dropped its sequence
        g.add(f"{state_source} == ()")
        vt = ListIteratorVariable([], source=source, real_type=type(value))
        vt.exhausted = True
        return vt
    (seq,), index = reduced[1], reduced[2]
    g.add(f"{state_source} == ({index!r},)")
    container = wrap(tx, seq, f"{source}.__reduce__()[1][0]")
    if not isinstance(container, BaseListVariable):
        unsupported(f"an iterator over a {type(seq).__name__} object")
    return ListIteratorVariable([], index=index, container=container, reverse=type(value) is type(reversed([])),
                                source=source, real_type=type(value))


class WeakRefVariable(VariableTracker):
    """A ``weakref.ref``; calling it gives the referent (read through ``source()``)."""

    def __init__(self, source, referent_vt):
        self.source = source
        self.referent_vt = referent_vt

    def call_function(self, tx, args, kwargs):
        return self.referent_vt


class EnvironVariable(VariableTracker):
    """``os.environ``, readable (``get``, ``[]``, ``in``) as constants; writes break."""

    def __init__(self, source):
        self.source = source

    def var_getattr(self, tx, name):
        from .base import MethodVariable, unsupported

        if name in ("get", "__getitem__", "__contains__"):
            return MethodVariable(self, name)
        unsupported(f"os.environ.{name}")

    def call_method(self, tx, name, args, kwargs):
        from .base import unsupported

        key = args[0].as_python_constant()
        if name == "__contains__":
            return ConstantVariable(key in os.environ)
        if name == "get":
            default = args[1] if len(args) > 1 else ConstantVariable(None)
            return ConstantVariable(os.environ[key]) if key in os.environ else default
        if name == "__getitem__" and key in os.environ:
            return ConstantVariable(os.environ[key])
        unsupported(f"os.environ.{name}({key!r})")


class NativeExitVariable(VariableTracker):
    """An ``__exit__`` that must run natively: calling it is a graph break."""

    def __init__(self, source):
        self.source = source

    def call_function(self, tx, args, kwargs):
        from .base import unsupported

        unsupported("exiting an autocast region entered before the frame")


def _entered_context_exit(tx, ctx, source):
    """The ``__exit__`` of a real context manager already entered when the frame began
    (a resume function inside a ``with`` block): grad mode is tracked symbolically;
    autocast's exit is a graph break (it runs natively)."""
    from .ctx_manager import GradModeVariable, WithExitVariable

    if isinstance(ctx, torch.autocast):
        return NativeExitVariable(source)
    tracker = GradModeVariable(torch.is_grad_enabled(), ctx.prev)
    tx.root.active_contexts.append(tracker)
    return WithExitVariable(tracker)


def _identity_hashed(key) -> bool:
    return is_constant(key) or isinstance(key, (torch.nn.Module, types.FunctionType, type))


def _wrap_module_key(tx, module):
    from .nn_module import NNModuleVariable

    existing = tx.output.id_cache.get(id(module))
    return existing if existing is not None else NNModuleVariable(module)


def wrap_constant_like(tx, value) -> VariableTracker:
    """A tracker for a value without a source (produced by constant folding)."""
    from .containers import DictVariable, ListVariable, NamedTupleVariable, SetVariable, SizeVariable, TupleVariable
    from .functions import BoundMethodVariable, UserFunctionVariable
    from .nn_module import NNModuleVariable
    from .torch_fns import TorchVariable
    from .user_defined import PythonModuleVariable, UserDefinedClassVariable, UserDefinedObjectVariable

    if is_constant(value):
        return ConstantVariable(value)
    if isinstance(value, torch.Size):
        return SizeVariable([ConstantVariable(v) for v in value])
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        return NamedTupleVariable([wrap_constant_like(tx, v) for v in value], type(value))
    if type(value) is tuple:
        return TupleVariable([wrap_constant_like(tx, v) for v in value])
    if type(value) is list:
        return ListVariable([wrap_constant_like(tx, v) for v in value])
    if type(value) in (dict, collections.OrderedDict, types.MappingProxyType):
        return DictVariable({k: (wrap_constant_like(tx, k), wrap_constant_like(tx, v)) for k, v in value.items()},
                            dict if type(value) is types.MappingProxyType else type(value))
    if type(value) in (set, frozenset):
        return SetVariable.of_existing(value, [wrap_constant_like(tx, v) for v in value])
    if isinstance(value, torch.nn.Module):
        return NNModuleVariable(value, None)
    if is_torch_callable(value):
        return TorchVariable(value)
    if isinstance(value, types.FunctionType):
        return UserFunctionVariable(value)
    if isinstance(value, types.MethodType):
        return BoundMethodVariable(UserFunctionVariable(value.__func__), wrap_constant_like(tx, value.__self__))
    if isinstance(value, types.ModuleType):
        return PythonModuleVariable(value, None)
    if isinstance(value, type) and id(value) not in _BUILTIN_IDS:
        return UserDefinedClassVariable(value, None)
    if isinstance(value, torch.Tensor):
        from ...exc import Unsupported

        raise Unsupported("a tensor without a source (e.g. a constant tensor attribute)")
    if callable(value) and not dataclasses.is_dataclass(value):
        from .builtin import BuiltinVariable

        return BuiltinVariable(value)
    return UserDefinedObjectVariable(value, None)
