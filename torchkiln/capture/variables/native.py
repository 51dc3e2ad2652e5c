"""Container methods run for real on proxies of their items.

A method of a list, tuple, dict (and ``OrderedDict``/``defaultdict``/``Counter``), set,
``deque`` or dict view is called natively on a real container built for the call:
constants stand for themselves, every other tracker is an opaque :class:`~.containers.IdKey`
proxy (compared by identity, iterable through its tracker, usable as an index when it is a
symbolic int).  CPython itself then binds the arguments, applies every keyword and edge
case (negative indices, slices, ``maxlen``, ``move_to_end(last=False)``...) and raises what
it raises; the resulting items are mapped back to their trackers and a changed container
is recorded as mutated.  One mechanism instead of one handler per method.

A method that compares items (``index``, ``count``, ``remove``, ``sort``, ``in``,
comparisons) gives a wrong answer on identity-compared proxies, so with a proxy in play it
runs its polyfill (``capture/polyfills/containers.py``) instead, or graph-breaks.
An exception raised by the method is a graph break: the call then runs natively.
"""
from __future__ import annotations

import collections
import collections.abc

import torch

from ...exc import Unsupported
from .base import ConstantVariable, unsupported

VALUE_METHODS = {"index", "count", "remove", "sort", "__contains__", "__eq__", "__ne__", "__lt__", "__le__",
                 "__gt__", "__ge__", "most_common"}
DICT_TYPES = (dict, collections.OrderedDict, collections.defaultdict, collections.Counter)
_ACTIVE: list["NativeCall"] = []


def active_tx():
    """The translator of the native call in progress (for proxies' ``__iter__``)."""
    if not _ACTIVE:
        raise TypeError("proxy used outside a native container call")
    return _ACTIVE[-1].tx


_LIST_ITERATOR = type(iter([]))
_REVERSED_LIST_ITERATOR = type(reversed([]))
# The tracker classes real() / wrap() test against, imported on first use (the modules
# import this one): a function-level import per item cost more than the conversion.
_PLAIN_CONSTANTS = frozenset({int, float, str, bytes, bool, type(None)})
_REAL_NAMES: tuple = ()
_WRAP_NAMES: tuple = ()


def _real_names() -> tuple:
    global _REAL_NAMES
    from .builtin import BuiltinVariable, is_pure_builtin
    from .builder import is_constant
    from .containers import BaseListVariable, DequeVariable, DictVariable, DictViewVariable, IdKey, SetVariable
    from .user_defined import UserDefinedClassVariable

    _REAL_NAMES = (BuiltinVariable, is_pure_builtin, is_constant, BaseListVariable, DequeVariable, DictVariable,
                   DictViewVariable, IdKey, SetVariable, UserDefinedClassVariable)
    return _REAL_NAMES


def _wrap_names() -> tuple:
    global _WRAP_NAMES
    from .builder import wrap_constant_like
    from .containers import (DequeVariable, DictVariable, DictViewVariable, IdKey, ListIteratorVariable,
                             ListVariable, NamedTupleVariable, SetVariable, SizeVariable, TupleVariable)

    _WRAP_NAMES = (wrap_constant_like, DequeVariable, DictVariable, DictViewVariable, IdKey, ListIteratorVariable,
                   ListVariable, NamedTupleVariable, SetVariable, SizeVariable, TupleVariable)
    return _WRAP_NAMES


class NativeCall:
    """Converts trackers to real proxies and back for one native call."""

    def __init__(self, tx):
        self.tx = tx
        self.memo: dict[int, object] = {}
        self.back: dict[int, object] = {}
        self.opaque = False
        self.inexact = False  # a set whose real table is not a replay of the runtime one was used
        self.unordered = False  # a set whose iteration order is unknown was used
        self.seeded = False  # a set whose order depends on this process's str hashing was used
        self.result_origin = None  # (result object, SetVariable origin) of the call's set result
        self.keep: list = []  # keep converted objects alive so ids stay unique

    # -- trackers -> real values --------------------------------------------------------
    def real(self, vt):
        if type(vt) is ConstantVariable and type(vt.value) in _PLAIN_CONSTANTS:  # the common item: no bookkeeping
            self.back.setdefault(id(vt.value), vt)  # ``vt`` keeps its value (and so its id) alive
            return vt.value
        (BuiltinVariable, is_pure_builtin, is_constant, BaseListVariable, DequeVariable, DictVariable,
         DictViewVariable, IdKey, SetVariable, UserDefinedClassVariable) = _REAL_NAMES or _real_names()
        key = id(vt)
        if key in self.memo:
            return self.memo[key]
        if isinstance(vt, ConstantVariable) and is_constant(vt.value):
            self.back.setdefault(id(vt.value), vt)
            self.keep.append(vt.value)
            return vt.value
        if isinstance(vt, BuiltinVariable) and is_pure_builtin(vt.fn):
            return vt.fn
        if isinstance(vt, UserDefinedClassVariable):
            return vt.value
        if isinstance(vt, BaseListVariable) and vt.container_type in (list, tuple, collections.deque, torch.Size):
            if vt.container_type in (tuple, torch.Size):
                result = tuple(self.real(i) for i in vt.items)
                real_type = vt.python_type()
                if real_type is not tuple and not self.opaque:  # namedtuple, torch.Size of constants
                    result = real_type._make(result) if hasattr(real_type, "_make") else real_type(result)
            elif isinstance(vt, DequeVariable):
                result = collections.deque(maxlen=vt.maxlen)
                self.memo[key] = result
                result.extend(self.real(i) for i in vt.items)
            else:
                result = []
                self.memo[key] = result
                result.extend(self.real(i) for i in vt.items)
        elif isinstance(vt, DictVariable) and vt.user_cls in DICT_TYPES:
            result = collections.defaultdict() if vt.user_cls is collections.defaultdict else vt.user_cls()
            self.memo[key] = result
            for k, (k_vt, v_vt) in vt.items.items():
                self.back.setdefault(id(k), k_vt)
                result[k] = self.real(v_vt)
        elif isinstance(vt, SetVariable):
            # the tracker's own real set, mutated in place: its table state is CPython's
            if not vt.order_matches:
                unsupported("a caller's set whose copy iterates in another order")
            for k, v in vt.items.items():
                self.back.setdefault(id(k), v)
            self.inexact = self.inexact or not vt.exact
            self.unordered = self.unordered or not vt.order_known and len(vt.items) > 1
            self.seeded = self.seeded or len(vt.items) > 1 and vt.hash_seeded()
            result = vt.real
        elif isinstance(vt, DictViewVariable) and isinstance(vt.owner, DictVariable):
            result = getattr(self.real(vt.owner), vt.kind)()
        else:
            try:
                ptype = vt.python_type()
            except Unsupported:
                ptype = object
            if hasattr(ptype, "keys") and not issubclass(ptype, torch.nn.Module):
                unsupported(f"a {ptype.__name__} mapping as an argument of a container method")
            result = IdKey(vt)
            self.opaque = True
        self.memo[key] = result
        self.back[id(result)] = vt
        self.keep.append(result)
        return result

    # -- real values -> trackers --------------------------------------------------------
    def wrap(self, value):
        (wrap_constant_like, DequeVariable, DictVariable, DictViewVariable, IdKey, ListIteratorVariable, ListVariable,
         NamedTupleVariable, SetVariable, SizeVariable, TupleVariable) = _WRAP_NAMES or _wrap_names()
        vt = self.back.get(id(value))
        if vt is not None:
            return vt
        if isinstance(value, IdKey):
            return value.vt
        if type(value) is list:
            return ListVariable([self.wrap(v) for v in value])
        if type(value) is tuple:
            return TupleVariable([self.wrap(v) for v in value])
        if type(value) is torch.Size:
            return SizeVariable([self.wrap(v) for v in value])
        if isinstance(value, tuple) and hasattr(type(value), "_fields"):
            return NamedTupleVariable([self.wrap(v) for v in value], type(value))
        if type(value) is collections.deque:
            return DequeVariable([self.wrap(v) for v in value], maxlen=value.maxlen)
        if type(value) in DICT_TYPES:
            result = DictVariable({k: (self.key(k), self.wrap(v)) for k, v in value.items()}, type(value))
            if type(value) is collections.defaultdict:
                result.default_factory = self.wrap(value.default_factory)
            return result
        if type(value) in (set, frozenset):
            origin = self.result_origin[1] if self.result_origin and self.result_origin[0] is value else None
            result = SetVariable([self.key(k) for k in value], frozen=type(value) is frozenset, real=value,
                                 exact=not self.inexact, origin=origin)
            if origin is not None and origin[0] == "ctor" and origin[1] in (set, frozenset) and not origin[2] \
                    and not value:
                result.insertion = {}  # set(): a new, empty table (its later insertions are tracked)
            return result
        if isinstance(value, (collections.abc.KeysView, collections.abc.ValuesView, collections.abc.ItemsView)):
            kind = ("keys" if isinstance(value, collections.abc.KeysView) else
                    "values" if isinstance(value, collections.abc.ValuesView) else "items")
            owner = next((self.back[id(p)] for p in self.keep if isinstance(p, dict) and id(p) in self.back
                          and getattr(p, kind)().mapping == value.mapping), None)
            if owner is None:
                unsupported(f"a dict view of a dict made inside a native call")
            items = [self.wrap(v) for v in value] if kind != "keys" else [self.key(k) for k in value]
            return DictViewVariable(owner, kind, items)
        if type(value) in (_LIST_ITERATOR, _REVERSED_LIST_ITERATOR):
            # iter(list) / reversed(list): keep the list it walks (its tracker), so appends
            # are seen and the iterator is rebuilt over the same list object
            _, (seq,), *state = value.__reduce__()
            owner = self.back.get(id(seq))
            if type(owner) is ListVariable:
                it = ListIteratorVariable([], index=state[0] if state else 0, container=owner,
                                          reverse=type(value) is _REVERSED_LIST_ITERATOR)
                it.exhausted = not state
                return it
        if isinstance(value, collections.abc.Iterator):
            return ListIteratorVariable([self.wrap(v) for v in value])
        return wrap_constant_like(self.tx, value)

    def key(self, k):
        vt = self.back.get(id(k))
        if vt is not None:
            return vt
        return self.wrap(k)

    # -- the call -----------------------------------------------------------------------
    def call(self, self_vt, name, args, kwargs):
        proxy = self.real(self_vt)
        cargs = [self.real(a) for a in args]
        ckwargs = {k: self.real(v) for k, v in kwargs.items()}
        if self.opaque and name in value_methods(self_vt):
            return None
        check_order(self, self_vt, name)
        method = getattr(proxy, name, None)
        if method is None and name == "__contains__":  # `in` falls back to iteration
            method = lambda value: value in proxy  # noqa: E731
        if method is None:
            unsupported(f"AttributeError: '{type(proxy).__name__}' object has no attribute '{name}'")
        before = snapshot(proxy)
        hists = replay_args(args) if not kwargs else None
        recv = replay_args([self_vt]) if type(self_vt).__name__ in ("SetVariable", "DictViewVariable") else None
        _ACTIVE.append(self)
        try:
            result = method(*cargs, **ckwargs)
        except Unsupported:
            raise
        except Exception as e:  # noqa: BLE001 - the call runs natively after the break
            unsupported(f"{type(proxy).__name__}.{name} raised {type(e).__name__}: {e}")
        finally:
            _ACTIVE.pop()
        if result is proxy:
            out = self_vt
        else:
            if recv is not None and hists is not None:
                self.result_origin = (result, ("ret", recv[0], name, hists))
            out = self.wrap(result)
        if snapshot(proxy) != before:
            self.tx.output.side_effects.mutate(self_vt)
            self.write_back(self_vt, proxy, (name, hists) if hists is not None else None)
        return out

    def write_back(self, vt, proxy, op=None):
        from .containers import DictVariable, SetVariable

        if isinstance(vt, DictVariable):
            if list(proxy) != list(vt.items) or len(vt.items) != len(proxy):
                vt.keys_version += 1
            vt.items = {k: (self.key(k), self.wrap(v)) for k, v in proxy.items()}
        elif isinstance(vt, SetVariable):
            if list(proxy) != list(vt.items) or len(vt.items) != len(proxy):
                vt.keys_version += 1
            vt.refresh({k: self.key(k) for k in proxy}, op)
        else:
            vt.items = [self.wrap(v) for v in proxy]


# set methods whose result shows the iteration order (the others only test or change membership)
_ORDER_OBSERVING = frozenset({"pop", "__iter__", "__repr__", "__str__", "__format__", "__reduce__", "__reduce_ex__"})


def check_order(nc, self_vt, name):
    """Graph-break where a call would turn a set's unknown iteration order (identity-keyed,
    or a caller's set after a mutation) into an observable order: ``set.pop()`` of it, or
    any method of a non-set container (``lst.extend(s)``, ``d.update(zip(s, ...))``).
    ``pop`` also reads the table's search finger, which only a replayed set has."""
    from .containers import DictViewVariable, SetVariable, mark_hash_seeded_order

    set_like = isinstance(self_vt, SetVariable) or isinstance(self_vt, DictViewVariable) and self_vt.kind != "values"
    if nc.unordered and (not set_like or name == "pop"):
        unsupported(f"{name} would observe the unknown iteration order of a set")
    if nc.seeded and (not set_like or name in _ORDER_OBSERVING):
        mark_hash_seeded_order(nc.tx)
    if name == "pop" and isinstance(self_vt, SetVariable) and not self_vt.exact:
        unsupported("set.pop() of a set whose table history is not known")


def replay_args(args):
    """The arguments of a set method as :func:`~.containers.replay_set` takes them: other
    replayable sets, constants, lists or tuples of plain constants; None otherwise."""
    from .containers import BaseListVariable, DictVariable, DictViewVariable, SetVariable

    out = []
    for a in args:
        if isinstance(a, SetVariable):
            h = a.history()
            if h is None:
                return None
            out.append(("set", h))
        elif type(a) is ConstantVariable and (type(a.value) in _PLAIN_CONSTANTS or type(a.value) is frozenset):
            out.append(("const", a.value))  # a frozenset constant is this very object (its table)
        elif isinstance(a, BaseListVariable) and a.container_type in (list, tuple) and all(
                type(i) is ConstantVariable and type(i.value) in _PLAIN_CONSTANTS for i in a.items):
            out.append(("list", tuple(i.value for i in a.items)))
        elif isinstance(a, (DictVariable, DictViewVariable)) and all(type(k) in _PLAIN_CONSTANTS for k in (
                a.items if isinstance(a, DictVariable) else a.owner.items if isinstance(a.owner, DictVariable) else [None])):
            # a dict sizes the set's table up front (set_update_internal); a keys view is walked
            keys = tuple(a.items if isinstance(a, DictVariable) else a.owner.items)
            if isinstance(a, DictVariable) and a.user_cls is dict:
                out.append(("dict", keys))
            elif isinstance(a, DictViewVariable) and a.kind == "keys" and isinstance(a.owner, DictVariable):
                out.append(("keys", keys))
            else:
                return None
        else:
            return None
    return tuple(out)


def value_methods(vt):
    """The methods of ``vt``'s type that compare items by ``==`` (not by hash)."""
    from .containers import BaseListVariable, DictVariable, DictViewVariable

    if isinstance(vt, BaseListVariable):
        return VALUE_METHODS
    if isinstance(vt, DictVariable):
        return {"__eq__", "__ne__", "most_common"}
    if isinstance(vt, DictViewVariable) and vt.kind != "keys":
        return VALUE_METHODS
    return ()


def snapshot(proxy):
    if isinstance(proxy, dict):
        return [(id(k), id(v)) for k, v in proxy.items()]
    if isinstance(proxy, (list, collections.deque, set)):
        return [id(v) for v in proxy]
    return None


def call_native_method(tx, self_vt, name, args, kwargs):
    """``self_vt.name(*args, **kwargs)`` run natively on proxies (see the module doc);
    a value-comparing method with a non-constant in play runs its polyfill instead."""
    from ..polyfills import CONTAINER_METHODS

    result = NativeCall(tx).call(self_vt, name, args, kwargs)
    if result is not None:
        return result
    base = next((t for t in (list, tuple) if issubclass(self_vt.python_type(), t)), None)
    poly = CONTAINER_METHODS.get((base, name))
    if poly is None:
        unsupported(f"{self_vt.python_type().__name__}.{name} comparing non-constant items")
    from .functions import UserFunctionVariable

    return UserFunctionVariable(poly).call_function(tx, [self_vt, *args], kwargs)


def native_construct(tx, cls, args, kwargs):
    """``cls(*args, **kwargs)`` for a container class, built natively on proxies."""
    nc = NativeCall(tx)
    cargs = [nc.real(a) for a in args]
    ckwargs = {k: nc.real(v) for k, v in kwargs.items()}
    if nc.unordered and cls not in (set, frozenset):
        unsupported(f"{cls.__name__}() of a set whose iteration order is unknown")
    if nc.seeded and cls not in (set, frozenset):
        from .containers import mark_hash_seeded_order

        mark_hash_seeded_order(tx)
    hists = replay_args(args) if not kwargs else None
    _ACTIVE.append(nc)
    try:
        result = cls(*cargs, **ckwargs)
    except Unsupported:
        raise
    except Exception as e:  # noqa: BLE001
        unsupported(f"{cls.__name__}() raised {type(e).__name__}: {e}")
    finally:
        _ACTIVE.pop()
    if hists is not None:
        nc.result_origin = (result, ("ctor", cls, hists))
    return nc.wrap(result)


def index_of(vt) -> int:
    """``operator.index`` of a proxied tracker (a symbolic int is specialised)."""
    from .tensor import SymNodeVariable

    if isinstance(vt, SymNodeVariable):
        return vt.evaluate_int()
    if vt.is_python_constant() and isinstance(vt.as_python_constant(), int):
        return vt.as_python_constant()
    raise TypeError(f"'{vt.python_type().__name__}' object cannot be interpreted as an integer")

