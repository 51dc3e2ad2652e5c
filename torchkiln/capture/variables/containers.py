"""Trackers for lists, tuples, torch.Size, namedtuples, dicts, sets and iterators.

Containers hold trackers.  A container that existed before the frame (it has a
``source``) and is mutated is replayed after the graph by assigning its new contents
in place (``lst[:] = ...``; ``d.clear(); d.update(...)``), which preserves the object's
identity, as TorchDynamo's side-effect replay does.
"""
from __future__ import annotations

import collections
import operator

import torch

from .base import ConstantVariable, VariableTracker, method_of, unsupported


def _const(vt):
    return vt.as_python_constant()


class BaseListVariable(VariableTracker):
    """Shared behaviour of list and tuple trackers (``items``: list of trackers)."""

    mutable = False

    def __init__(self, items, source=None):
        self.items = list(items)
        self.source = source

    def python_type(self):
        return self.container_type

    def as_python_constant(self):
        return self.container_type([i.as_python_constant() for i in self.items])

    def is_python_constant(self):
        return all(i.is_python_constant() for i in self.items)

    def unpack_var_sequence(self, tx):
        return list(self.items)

    def truth(self, tx):
        return bool(self.items)

    def new(self, items):
        return type(self)(items)

    def var_getattr(self, tx, name):
        return method_of(self, name)

    def getitem(self, tx, index_vt):
        index = index_vt
        if not isinstance(index, (int, slice)):
            from .tensor import SymNodeVariable

            if isinstance(index_vt, SymNodeVariable):
                index = index_vt.evaluate_int()
            else:
                index = _const(index_vt)
        if isinstance(index, slice):
            return self.new(self.items[index])
        try:
            return self.items[index]
        except IndexError:
            unsupported(f"{self.container_type.__name__} index out of range")

    def reconstruct(self, cg):
        if self.source is not None and not cg.is_mutated(self):
            return cg.from_source(self.source)
        recipes = [cg.recipe(i) for i in self.items]
        ctype = self.container_type
        return lambda rt: ctype([r(rt) for r in recipes])

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "__contains__":
            return tx.contains(self.items, args[0])
        if name == "index":
            from .builtin import vt_equal

            for i, item in enumerate(self.items):
                if vt_equal(tx, item, args[0]):
                    return ConstantVariable(i)
            unsupported("list.index: value not found")
        if name == "count":
            from .builtin import vt_equal

            return ConstantVariable(sum(1 for item in self.items if vt_equal(tx, item, args[0])))
        if name in ("__add__",):
            return tx.binary_op(operator.add, self, args[0])
        return super().call_method(tx, name, args, kwargs)

    def __repr__(self):
        return f"{type(self).__name__}({self.items!r})"


class TupleVariable(BaseListVariable):
    container_type = tuple


class SizeVariable(TupleVariable):
    """``torch.Size``: items are constant ints or symbolic sizes."""

    container_type = torch.Size

    @classmethod
    def from_size(cls, tx, tensor_vt, shape):
        from .tensor import SymNodeVariable

        items = []
        for i, s in enumerate(shape):
            if isinstance(s, int):
                items.append(ConstantVariable(s))
            else:
                node = tx.output.create_node("call_method", "size", (tensor_vt.node, i), {}, example=s)
                items.append(SymNodeVariable(node, s))
        return cls(items)

    def new(self, items):
        return SizeVariable(items)

    def reconstruct(self, cg):
        recipes = [cg.recipe(i) for i in self.items]
        return lambda rt: torch.Size([r(rt) for r in recipes])

    def call_method(self, tx, name, args, kwargs):
        if name == "numel":
            result = ConstantVariable(1)
            for item in self.items:
                result = tx.binary_op(operator.mul, result, item)
            return result
        return super().call_method(tx, name, args, kwargs)


class NamedTupleVariable(TupleVariable):
    """A namedtuple (also torch.return_types): ``tuple_cls`` rebuilds it."""

    def __init__(self, items, tuple_cls, source=None):
        super().__init__(items, source)
        self.tuple_cls = tuple_cls

    def python_type(self):
        return self.tuple_cls

    def new(self, items):
        return TupleVariable(items)

    def as_python_constant(self):
        return self.tuple_cls(*[i.as_python_constant() for i in self.items])

    def var_getattr(self, tx, name):
        fields = getattr(self.tuple_cls, "_fields", None) or getattr(self.tuple_cls, "__match_args__", ())
        if name in fields:
            return self.items[list(fields).index(name)]
        attr = getattr(self.tuple_cls, name, None)
        if callable(attr):
            from .functions import UserFunctionVariable, BoundMethodVariable

            if hasattr(attr, "__code__"):
                return BoundMethodVariable(UserFunctionVariable(attr), self)
        unsupported(f"namedtuple attribute {name}")

    def reconstruct(self, cg):
        recipes = [cg.recipe(i) for i in self.items]
        cls = self.tuple_cls
        if hasattr(cls, "_make"):
            return lambda rt: cls._make([r(rt) for r in recipes])
        return lambda rt: cls([r(rt) for r in recipes])


class ListVariable(BaseListVariable):
    container_type = list
    mutable = True

    def call_method(self, tx, name, args, kwargs):
        mutating = {"append", "extend", "insert", "pop", "clear", "remove", "reverse", "sort", "__setitem__",
                    "__delitem__", "__iadd__"}
        if name in mutating:
            tx.output.side_effects.mutate(self)
        if name == "append":
            self.items.append(args[0])
            return ConstantVariable(None)
        if name in ("extend", "__iadd__"):
            self.items.extend(args[0].unpack_var_sequence(tx))
            return self if name == "__iadd__" else ConstantVariable(None)
        if name == "insert":
            self.items.insert(_const(args[0]), args[1])
            return ConstantVariable(None)
        if name == "pop":
            return self.items.pop(*[_const(a) for a in args])
        if name == "clear":
            self.items.clear()
            return ConstantVariable(None)
        if name == "reverse":
            self.items.reverse()
            return ConstantVariable(None)
        if name == "remove":
            from .builtin import vt_equal

            for i, item in enumerate(self.items):
                if vt_equal(tx, item, args[0]):
                    del self.items[i]
                    return ConstantVariable(None)
            unsupported("list.remove: value not found")
        if name == "sort":
            key = kwargs.get("key")
            reverse = kwargs.get("reverse", ConstantVariable(False)).as_python_constant()
            from .builtin import sort_items

            self.items[:] = sort_items(tx, self.items, key, reverse)
            return ConstantVariable(None)
        if name == "__setitem__":
            index = args[0]
            if isinstance(index, ConstantVariable) and isinstance(index.value, slice):
                self.items[index.value] = args[1].unpack_var_sequence(tx)
            else:
                self.items[_const(index)] = args[1]
            return ConstantVariable(None)
        if name == "__delitem__":
            del self.items[_const(args[0])]
            return ConstantVariable(None)
        if name == "copy":
            return ListVariable(list(self.items))
        return super().call_method(tx, name, args, kwargs)


class IdKey:
    """A dict key standing for a non-constant tracker, compared by identity."""

    def __init__(self, vt):
        self.vt = vt
        self.obj = getattr(vt, "value", vt)

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return isinstance(other, IdKey) and other.obj is self.obj


def dict_key(vt):
    if vt.is_python_constant():
        return vt.as_python_constant()
    from .tensor import TensorVariable

    if isinstance(vt, TensorVariable):
        return IdKey(vt)
    if hasattr(vt, "value"):
        return IdKey(vt)
    unsupported(f"dict key {vt}")


class DictVariable(VariableTracker):
    """dict / OrderedDict / defaultdict: ``items`` maps key → (key tracker, value tracker)."""

    def __init__(self, items=None, user_cls=dict, source=None, default_factory=None):
        self.items: dict = dict(items or {})
        self.user_cls = user_cls
        self.source = source
        self.default_factory = default_factory

    @classmethod
    def from_pairs(cls, pairs, user_cls=dict):
        return cls({dict_key(k): (k, v) for k, v in pairs}, user_cls)

    def python_type(self):
        return self.user_cls

    def var_getattr(self, tx, name):
        return method_of(self, name)

    def truth(self, tx):
        return bool(self.items)

    def as_python_constant(self):
        return self.user_cls({k.as_python_constant(): v.as_python_constant() for k, v in self.items.values()})

    def is_python_constant(self):
        return all(k.is_python_constant() and v.is_python_constant() for k, v in self.items.values())

    def unpack_var_sequence(self, tx):
        return [k for k, _ in self.items.values()]

    def getitem(self, tx, key_vt):
        key = dict_key(key_vt)
        if key not in self.items:
            if self.default_factory is not None:
                value = self.default_factory.call_function(tx, [], {})
                self.call_method(tx, "__setitem__", [key_vt, value], {})
                return value
            unsupported(f"KeyError {key!r}")
        return self.items[key][1]

    def reconstruct(self, cg):
        if self.source is not None and not cg.is_mutated(self):
            return cg.from_source(self.source)
        pairs = [(cg.recipe(k), cg.recipe(v)) for k, v in self.items.values()]
        user_cls = self.user_cls
        if user_cls is collections.defaultdict:
            factory = cg.recipe(self.default_factory)
            return lambda rt: collections.defaultdict(factory(rt), [(k(rt), v(rt)) for k, v in pairs])
        return lambda rt: user_cls([(k(rt), v(rt)) for k, v in pairs])

    def call_method(self, tx, name, args, kwargs):
        mutating = {"__setitem__", "update", "pop", "popitem", "clear", "setdefault", "__delitem__", "move_to_end"}
        if name in mutating:
            tx.output.side_effects.mutate(self)
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name == "__setitem__":
            self.items[dict_key(args[0])] = (args[0], args[1])
            return ConstantVariable(None)
        if name == "__delitem__":
            del self.items[dict_key(args[0])]
            return ConstantVariable(None)
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "__contains__":
            return ConstantVariable(dict_key(args[0]) in self.items)
        if name == "get":
            key = dict_key(args[0])
            if key in self.items:
                return self.items[key][1]
            return args[1] if len(args) > 1 else ConstantVariable(None)
        if name == "keys":
            return DictViewVariable(self, name, [k for k, _ in self.items.values()])
        if name == "values":
            return DictViewVariable(self, name, [v for _, v in self.items.values()])
        if name == "items":
            return DictViewVariable(self, name, [TupleVariable([k, v]) for k, v in self.items.values()])
        if name == "update":
            other = args[0] if args else None
            if isinstance(other, DictVariable):
                self.items.update(other.items)
            elif other is not None:
                for pair in other.unpack_var_sequence(tx):
                    k, v = pair.unpack_var_sequence(tx)
                    self.items[dict_key(k)] = (k, v)
            for k, v in kwargs.items():
                self.items[k] = (ConstantVariable(k), v)
            return ConstantVariable(None)
        if name == "pop":
            key = dict_key(args[0])
            if key in self.items:
                return self.items.pop(key)[1]
            if len(args) > 1:
                return args[1]
            unsupported(f"KeyError {key!r}")
        if name == "setdefault":
            key = dict_key(args[0])
            if key not in self.items:
                self.items[key] = (args[0], args[1] if len(args) > 1 else ConstantVariable(None))
            return self.items[key][1]
        if name == "clear":
            self.items.clear()
            return ConstantVariable(None)
        if name == "copy":
            return DictVariable(dict(self.items), self.user_cls, default_factory=self.default_factory)
        if name == "__or__":
            new = DictVariable(dict(self.items), self.user_cls)
            new.items.update(args[0].items)
            return new
        unsupported(f"dict.{name}")

    def __repr__(self):
        return f"DictVariable({list(self.items)!r})"


class DictViewVariable(VariableTracker):
    """``d.keys()`` / ``d.values()`` / ``d.items()``: iterable trackers that rebuild as the
    real view of the rebuilt mapping."""

    def __init__(self, owner, kind, items):
        self.owner = owner
        self.kind = kind
        self.items = items

    def python_type(self):
        return type(getattr({}, self.kind)())

    def unpack_var_sequence(self, tx):
        return list(self.items)

    def truth(self, tx):
        return bool(self.items)

    def var_getattr(self, tx, name):
        return method_of(self, name)

    def call_method(self, tx, name, args, kwargs):
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "__contains__":
            return tx.contains(self.items, args[0])
        unsupported(f"dict view .{name}")

    def reconstruct(self, cg):
        owner, kind = cg.recipe(self.owner), self.kind
        return lambda rt: getattr(owner(rt), kind)()


class SetVariable(VariableTracker):
    """A set of constants (or identity-keyed trackers)."""

    def __init__(self, items, source=None, frozen=False):
        self.items = {dict_key(i): i for i in items}
        self.source = source
        self.frozen = frozen

    def python_type(self):
        return frozenset if self.frozen else set

    def var_getattr(self, tx, name):
        return method_of(self, name)

    def truth(self, tx):
        return bool(self.items)

    def as_python_constant(self):
        return (frozenset if self.frozen else set)(v.as_python_constant() for v in self.items.values())

    def is_python_constant(self):
        return all(v.is_python_constant() for v in self.items.values())

    def unpack_var_sequence(self, tx):
        return list(self.items.values())

    def reconstruct(self, cg):
        if self.source is not None and not cg.is_mutated(self):
            return cg.from_source(self.source)
        recipes = [cg.recipe(v) for v in self.items.values()]
        kind = frozenset if self.frozen else set
        return lambda rt: kind(r(rt) for r in recipes)

    def call_method(self, tx, name, args, kwargs):
        if name in ("add", "update", "discard", "remove", "clear", "pop"):
            tx.output.side_effects.mutate(self)
        if name == "add":
            self.items[dict_key(args[0])] = args[0]
            return ConstantVariable(None)
        if name == "update":
            for a in args:
                for v in a.unpack_var_sequence(tx):
                    self.items[dict_key(v)] = v
            return ConstantVariable(None)
        if name in ("discard", "remove"):
            self.items.pop(dict_key(args[0]), None)
            return ConstantVariable(None)
        if name == "__contains__":
            return ConstantVariable(dict_key(args[0]) in self.items)
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name in ("union", "__or__", "intersection", "__and__", "difference", "__sub__", "issubset", "issuperset"):
            mine = set(self.items)
            other = {dict_key(v): v for a in args for v in a.unpack_var_sequence(tx)}
            if name in ("issubset", "issuperset"):
                return ConstantVariable(getattr(mine, name)(set(other)))
            op = {"__or__": "union", "__and__": "intersection", "__sub__": "difference"}.get(name, name)
            keys = getattr(mine, op)(set(other))
            lookup = {**other, **self.items}
            return SetVariable([lookup[k] for k in keys])
        unsupported(f"set.{name}")


class ListIteratorVariable(VariableTracker):
    """An iterator over a known list of trackers (FOR_ITER / next())."""

    def __init__(self, items, index=0):
        self.items = list(items)
        self.index = index

    def next_item(self, tx):
        if self.index >= len(self.items):
            return None
        item = self.items[self.index]
        self.index += 1
        tx.output.side_effects.mutate(self)
        return item

    def unpack_var_sequence(self, tx):
        rest = self.items[self.index:]
        self.index = len(self.items)
        return rest

    def python_type(self):
        return type(iter([]))

    def reconstruct(self, cg):
        recipes = [cg.recipe(i) for i in self.items[self.index:]]
        return lambda rt: iter([r(rt) for r in recipes])

    def call_method(self, tx, name, args, kwargs):
        if name == "__next__":
            item = self.next_item(tx)
            if item is None:
                unsupported("StopIteration from next()")
            return item
        if name == "__iter__":
            return self
        unsupported(f"iterator.{name}")


class SliceVariable(VariableTracker):
    """A slice whose bounds are not all constants (e.g. symbolic sizes)."""

    def __init__(self, parts):
        self.parts = parts

    def python_type(self):
        return slice

    def as_python_constant(self):
        return slice(*[p.as_python_constant() for p in self.parts])

    def reconstruct(self, cg):
        recipes = [cg.recipe(p) for p in self.parts]
        return lambda rt: slice(*[r(rt) for r in recipes])
