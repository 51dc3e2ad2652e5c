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
        if self.source is not None:
            return cg.from_source(self.source)  # mutations are replayed in place before
        recipes = [cg.recipe(i) for i in self.items]
        ctype = self.container_type
        return lambda rt: ctype([r(rt) for r in recipes])

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            return self.getitem(tx, args[0])
        if name == "append" and len(args) == 1 and not kwargs and type(self) is ListVariable:
            self.items.append(args[0])  # a loop's append: no native round trip of the whole list
            tx.output.side_effects.mutate(self)
            return ConstantVariable(None)
        from .native import call_native_method

        return call_native_method(tx, self, name, args, kwargs)

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
        elif attr is not None or hasattr(self.tuple_cls, name):
            from .builder import wrap_constant_like

            return wrap_constant_like(tx, attr)  # _fields, _field_defaults, class constants
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


class DequeVariable(ListVariable):
    """A ``collections.deque`` made in the frame (``maxlen`` kept)."""

    container_type = collections.deque

    def __init__(self, items, source=None, maxlen=None):
        super().__init__(items, source)
        self.maxlen = maxlen

    def new(self, items):
        return DequeVariable(items, maxlen=self.maxlen)

    def var_getattr(self, tx, name):
        if name == "maxlen":
            return ConstantVariable(self.maxlen)
        return super().var_getattr(tx, name)

    def getitem(self, tx, index_vt):
        if not index_vt.is_python_constant() or not isinstance(index_vt.as_python_constant(), int):
            unsupported("deque index that is not a constant int")
        from .native import call_native_method

        return call_native_method(tx, self, "__getitem__", [index_vt], {})

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.from_source(self.source)
        recipes = [cg.recipe(i) for i in self.items]
        maxlen = self.maxlen
        return lambda rt: collections.deque([r(rt) for r in recipes], maxlen)


class IdKey:
    """A dict key standing for a non-constant tracker, compared by identity."""

    def __init__(self, vt):
        self.vt = vt
        self.obj = getattr(vt, "value", vt)

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return isinstance(other, IdKey) and other.obj is self.obj

    def __iter__(self):
        from .native import active_tx

        tx = active_tx()
        from .native import _ACTIVE

        return iter([_ACTIVE[-1].real(i) for i in self.vt.unpack_var_sequence(tx)])

    def __index__(self):
        from .native import index_of

        return index_of(self.vt)

    def __repr__(self):
        return f"<{self.vt!r}>"


def dict_key(vt):
    """The key ``vt`` hashes as in a dict or set tracker (a symbolic int is specialized to
    its guarded value, as torch.compile does for dict keys)."""
    if vt.is_python_constant():
        return vt.as_python_constant()
    from .tensor import SymNodeVariable, TensorVariable

    if isinstance(vt, SymNodeVariable):
        return vt.specialize().value
    if isinstance(vt, TensorVariable):
        return IdKey(vt)
    if hasattr(vt, "value"):
        cls = vt.python_type()
        if not isinstance(vt.value, (torch.nn.Module, type)) and (
                getattr(cls, "__eq__", None) is not object.__eq__ or getattr(cls, "__hash__", None) is not object.__hash__):
            unsupported(f"dict key of a {cls.__name__} object with its own __eq__/__hash__")
        return IdKey(vt)
    unsupported(f"dict key {vt}")


_PLAIN_DICTS = (dict, collections.OrderedDict, collections.defaultdict)
_KEY_METHODS = {"__setitem__", "__delitem__", "get", "pop", "setdefault", "__contains__", "add", "discard", "remove",
                "move_to_end"}


class DictVariable(VariableTracker):
    """dict / OrderedDict / defaultdict: ``items`` maps key → (key tracker, value tracker).
    ``keys_version`` grows on every insertion or deletion of a key (iterators check it)."""

    keys_version = 0

    def __init__(self, items=None, user_cls=dict, source=None, default_factory=None):
        self.items: dict = dict(items or {})
        self.user_cls = user_cls
        self.source = source
        self.default_factory = default_factory

    @classmethod
    def from_pairs(cls, pairs, user_cls=dict):
        pairs = [(_key_tracker(k), v) for k, v in pairs]
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
        if key in self.items:
            return self.items[key][1]
        if self.user_cls is collections.defaultdict and self.default_factory is not None and not (
                self.default_factory.is_python_constant() and self.default_factory.as_python_constant() is None):
            value = self.default_factory.call_function(tx, [], {})
            self.call_method(tx, "__setitem__", [key_vt, value], {})
            return value
        from .native import call_native_method

        return call_native_method(tx, self, "__getitem__", [key_vt], {})

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.from_source(self.source)  # mutations are replayed in place before
        pairs = [(cg.recipe(k), cg.recipe(v)) for k, v in self.items.values()]
        user_cls = self.user_cls
        if user_cls is collections.defaultdict:
            factory = cg.recipe(self.default_factory)
            return lambda rt: collections.defaultdict(factory(rt), [(k(rt), v(rt)) for k, v in pairs])
        if user_cls in (dict, collections.OrderedDict):
            return lambda rt: user_cls([(k(rt), v(rt)) for k, v in pairs])

        def make(rt):  # Counter(pairs) would count the pairs: set the items one by one
            result = user_cls()
            for k, v in pairs:
                result[k(rt)] = v(rt)
            return result
        return make

    def call_method(self, tx, name, args, kwargs):
        if (name in _KEY_METHODS or name == "__getitem__") and args:
            args = [_key_tracker(args[0]), *args[1:]]
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            return self.getitem(tx, args[0])
        if name in _KEY_METHODS and args:
            key = dict_key(args[0])  # a non-constant key must be one identity hashing describes
            if name in ("__setitem__", "__delitem__") and self.user_cls in _PLAIN_DICTS and not kwargs and len(
                    args) == (2 if name == "__setitem__" else 1) and (name == "__setitem__" or key in self.items):
                # d[k] = v / del d[k] in a loop: no native round trip of the whole dict
                if name == "__delitem__":
                    del self.items[key]
                    self.keys_version += 1
                else:  # an existing key keeps its key object and position, as CPython's dict
                    if key not in self.items:
                        self.keys_version += 1
                    self.items[key] = (self.items[key][0] if key in self.items else args[0], args[1])
                tx.output.side_effects.mutate(self)
                return ConstantVariable(None)
        from .native import call_native_method

        return call_native_method(tx, self, name, args, kwargs)

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
        if isinstance(self.owner, DictVariable):  # a view is live: it shows the dict's items now
            pairs = self.owner.items.values()
            if self.kind == "keys":
                return [k for k, _ in pairs]
            return [v for _, v in pairs] if self.kind == "values" else [TupleVariable([k, v]) for k, v in pairs]
        return list(self.items)

    def truth(self, tx):
        if isinstance(self.owner, DictVariable):
            return bool(self.owner.items)
        return bool(self.items)

    def var_getattr(self, tx, name):
        return method_of(self, name)

    def call_method(self, tx, name, args, kwargs):
        from .native import call_native_method

        return call_native_method(tx, self, name, args, kwargs)

    def reconstruct(self, cg):
        owner, kind = cg.recipe(self.owner), self.kind
        return lambda rt: getattr(owner(rt), kind)()


def _key_tracker(vt):
    """A key as a dict or set stores it: a symbolic int specialized to its guarded value."""
    from .tensor import specialize_symbolic

    return specialize_symbolic(vt)


_STABLE_HASH = (int, float, complex, bool, type(None))


def hash_seeded(key) -> bool:
    """Whether ``key``'s hash may differ between processes (str/bytes hashing is salted per
    process): anything but numbers, None, and tuples/frozensets of those."""
    if type(key) in _STABLE_HASH:
        return False
    if type(key) in (tuple, frozenset):
        return any(hash_seeded(k) for k in key)
    return True


def mark_hash_seeded_order(tx) -> None:
    """The capture observed a set order that holds in this process only: its graph and
    result are right here, but a frame record replayed in another process would not be
    (the warm start declines to record it)."""
    out = getattr(tx, "output", None)
    if out is not None:
        out.hash_seeded_order = True


class SetVariable(VariableTracker):
    """A set of constants (or identity-keyed trackers); ``keys_version`` as DictVariable's.

    Iteration order is CPython's: ``real`` is a real ``set``/``frozenset`` of the keys,
    built and mutated by the same operations in the same sequence as the frame's own set
    (``BUILD_SET``/``set(list)`` insert one by one; methods run natively on ``real`` in
    place, see ``native.py``), so its hidden table state (dummy slots left by deletions,
    table size after growth) and hence its order match.  ``exact``: ``real`` is such a
    replay (only constants, made in the frame from known inputs).
    ``origin``/``ops``: how ``real`` was made (``("new", kind, keys)``, ``("obj", a code
    constant frozenset)``, or the method call
    or constructor whose result it is) and the mutating method calls since, all on
    constants or other such sets: replayed by :func:`replay_set` to rebuild the set with
    the same table at runtime (None: not replayable).
    ``order_known``: ``items`` is in the runtime order: true for an exact set and for a
    caller's set (its order is guarded) until it is mutated; false for a set keyed by
    identity (tensors, modules: hashes are addresses), whose iteration graph-breaks.
    """

    keys_version = 0

    def __init__(self, items, source=None, frozen=False, real=None, exact=None, order_known=None, origin=None):
        trackers = {}
        for i in items:
            i = _key_tracker(i)
            trackers.setdefault(dict_key(i), i)  # the first of equal keys stays, as in set.add
        self.source = source
        self.frozen = frozen
        kind = frozenset if frozen else set
        self.origin = origin
        self.ops: list = []
        # the keys in the order they went into an initially empty table, while only insertions
        # happened (None: unknown, or a key was removed): a set keyed by identity is rebuilt by
        # inserting its runtime items in this order, which gives eager's table and order
        self.insertion = None
        if real is None:
            real = kind(trackers)  # one by one into an empty set, as BUILD_SET / set(list)
            exact = source is None
            self.origin = ("new", kind, tuple(trackers))
            self.insertion = dict(trackers) if source is None else None
        elif exact is None:
            exact = False
        self.real = real
        self.exact = bool(exact) and not any(type(k) is IdKey for k in trackers)
        self.order_known = self.exact or bool(order_known) and not any(type(k) is IdKey for k in trackers)
        # an inexact real set must at least iterate in the recorded order (native calls walk it)
        self.items = {k: trackers[k] for k in real} if self.exact else trackers
        self.order_matches = self.exact or [type(k) for k in real] == [type(k) for k in trackers] and all(
            a is b or a == b for a, b in zip(real, trackers))

    @classmethod
    def of_existing(cls, value, items, source=None, same_object=False):
        """A tracker for the existing set ``value`` (a caller's, or a constant) whose
        ``items`` are in ``value``'s order.  Its table history is unknown: results computed
        from its table (``s | t`` copies it) and the set after a mutation have an unknown
        order.  A frozenset is used as is, a set copied."""
        frozen = type(value) is frozenset
        if frozen and same_object:  # a code constant: the runtime's is this very object
            return cls(items, frozen=True, real=value, exact=True, origin=("obj", value))
        real = value if frozen else value.copy()  # an equal frozenset may have another table size
        if list(map(id, real)) != list(map(id, value)):
            real = set(list(value))  # one by one in value's order (set(value) would copy the table)
        return cls(items, source, frozen, real=real, exact=False, order_known=True)

    def refresh(self, trackers, op=None):
        """``items`` after ``real`` changed in place (``trackers``: key -> tracker) by the
        method call ``op`` (``(name, args, kwargs)`` of replayable arguments, or None)."""
        if self.insertion is not None:
            added = [k for k in self.real if k not in self.insertion]
            if len(added) > 1 or any(k not in self.real for k in self.insertion):
                self.insertion = None  # several keys at once (their order), or a removal (dummies)
            else:
                self.insertion.update((k, trackers[k]) for k in added)
        if self.exact and any(type(k) is IdKey for k in self.real):  # s.add(tensor): hashed by address
            self.exact = False
        if not self.exact:
            self.order_known = False
        if op is None:
            self.origin = None
        elif self.origin is not None:
            self.ops.append(op)
        self.items = {k: trackers[k] for k in self.real}

    def history(self):
        """A constant recipe for :func:`replay_set` (None where not replayable)."""
        if not self.exact or self.origin is None:
            return None
        return (self.origin, tuple(self.ops))

    def ordered_items(self):
        """The items in iteration order; graph-breaks where that order is unknown."""
        if not self.order_known and len(self.items) > 1:
            unsupported("iteration order of a set keyed by identity or mutated after it came from the caller "
                        "is not known at capture time")
        return list(self.items.values())

    def python_type(self):
        return frozenset if self.frozen else set

    def var_getattr(self, tx, name):
        return method_of(self, name)

    def truth(self, tx):
        return bool(self.items)

    def as_python_constant(self):
        history = self.history()
        if history is not None:
            return replay_set(history)
        return (frozenset if self.frozen else set)(v.as_python_constant() for v in self.items.values())

    def is_python_constant(self):
        return all(v.is_python_constant() for v in self.items.values())

    def unpack_var_sequence(self, tx):
        items = self.ordered_items()
        if len(items) > 1 and self.hash_seeded():
            mark_hash_seeded_order(tx)
        return items

    def hash_seeded(self) -> bool:
        """Whether the order depends on this process's string hashing (``PYTHONHASHSEED``:
        str and bytes keys, or tuples holding them), so another process iterates it in
        another order."""
        return any(hash_seeded(k) for k in self.real)

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.from_source(self.source)  # mutations are replayed in place before
        history = self.history()
        if history is not None and list(replay_set(history)) == list(self.real):
            return lambda rt: replay_set(history)  # the same table (dummies, size) as CPython's
        order = self.items if self.insertion is None else self.insertion
        recipes = [cg.recipe(order[k] if k in order else self.items[k]) for k in order if k in self.items]
        kind = frozenset if self.frozen else set
        return lambda rt: kind(r(rt) for r in recipes)

    def call_method(self, tx, name, args, kwargs):
        if name in _KEY_METHODS and args:
            args = [_key_tracker(args[0]), *args[1:]]
            dict_key(args[0])
        from .native import call_native_method

        return call_native_method(tx, self, name, args, kwargs)


def replay_set(history):
    """The set or frozenset ``SetVariable.history()`` describes, made by the same calls in
    the same sequence, so its hash table (and iteration order) is CPython's."""
    (tag, *rest), ops = history
    if tag == "obj":
        result = rest[0]
    elif tag == "new":
        result = rest[0](rest[1])
    elif tag == "ctor":
        result = rest[0](*map(_replay_arg, rest[1]))
    else:  # "ret": the result of a method of another such set (or dict keys view)
        result = getattr(_replay_arg(rest[0]), rest[1])(*map(_replay_arg, rest[2]))
    for name, args in ops:
        getattr(result, name)(*map(_replay_arg, args))
    return result


def _replay_arg(arg):
    tag, value = arg
    if tag == "set":
        return replay_set(value)
    if tag == "keys":
        return dict.fromkeys(value).keys()
    return list(value) if tag == "list" else dict.fromkeys(value) if tag == "dict" else value


_LIST_ITERATOR = type(iter([]))
_REVERSED_LIST_ITERATOR = type(reversed([]))
_TUPLE_ITERATOR = type(iter(()))
SEQ_ITERATOR_TYPES = (_LIST_ITERATOR, _REVERSED_LIST_ITERATOR, _TUPLE_ITERATOR)


class ListIteratorVariable(VariableTracker):
    """An iterator over a known list of trackers (FOR_ITER / next()).

    ``container``: the list (or plain tuple) tracker it walks, when known: then it reads the
    container's items live (appends during the loop are seen, as CPython's list iterator
    does), an exhausted iterator stays exhausted, and it is rebuilt as ``iter(that
    list)`` at its position (the caller's list object where the list came from the
    caller), not as an iterator over a copy.  ``reverse``: ``reversed(list)``, walking
    down from ``index`` as CPython's ``list_reverseiterator`` does (items appended after
    it was made are not seen; a list that shrinks below ``index`` ends it).

    ``source``: a real iterator that existed before the frame (e.g. a ``for`` loop's
    iterator handed to a resume function): it is rebuilt as that same object, and a
    position that moved during capture is replayed on it (``__setstate__``) after the
    graph, so the caller's iterator, pickled or shared, walks on from where eager
    would be (TorchDynamo keeps such iterators as ``ListIteratorVariable`` with a
    source and replays their index the same way).
    """

    def __init__(self, items, index=0, container=None, reverse=False, source=None, real_type=None):
        self.container = container
        self.items = list(items) if container is None else None
        self.index = index
        self.reverse = reverse
        self.exhausted = False
        self.source = source
        self.real_type = real_type

    def _seq(self):
        return self.container.items if self.container is not None else self.items

    def next_item(self, tx):
        seq = self._seq()
        if self.exhausted or not 0 <= self.index < len(seq):
            self.exhausted = True
            tx.output.side_effects.mutate(self)
            return None
        item = seq[self.index]
        self.index += -1 if self.reverse else 1
        tx.output.side_effects.mutate(self)
        return item

    def unpack_var_sequence(self, tx):
        seq = self._seq()
        if self.exhausted or not 0 <= self.index < len(seq):
            rest = []
        else:
            rest = seq[self.index::-1] if self.reverse else seq[self.index:]
        self.index = -1 if self.reverse else len(seq)
        self.exhausted = True
        tx.output.side_effects.mutate(self)
        return rest

    def python_type(self):
        if self.real_type is not None:
            return self.real_type
        if type(self.container) is TupleVariable:
            return _TUPLE_ITERATOR
        return _REVERSED_LIST_ITERATOR if self.reverse else _LIST_ITERATOR

    def state(self):
        """``(index, exhausted)``: what the transformed code sets on the real iterator."""
        return self.index, self.exhausted

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.from_source(self.source)  # its position is replayed with the side effects
        if self.container is not None:
            seq, index, exhausted, reverse = cg.recipe(self.container), self.index, self.exhausted, self.reverse
            return lambda rt: seq_iterator_at(seq(rt), index, exhausted, reverse)
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


def seq_iterator_at(seq, index: int, exhausted: bool, reverse: bool = False):
    """CPython's iterator over list/tuple ``seq`` (``reversed(seq)`` if ``reverse``) at
    position ``index``, exhausted for good if ``exhausted``."""
    it = reversed(seq) if reverse else iter(seq)
    set_iterator_state(it, index, exhausted)
    return it


def set_iterator_state(it, index: int, exhausted: bool) -> None:
    """Move a real list/tuple (reverse) iterator to ``index``, or exhaust it (a CPython
    sequence iterator that ran out drops its sequence and never yields again)."""
    reverse = type(it) is _REVERSED_LIST_ITERATOR
    if exhausted:
        it.__setstate__(-1 if reverse else 1 << 62)  # clamped to the end
        next(it, None)
    else:
        it.__setstate__(index)


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


_OP_NAMES = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.and_: "and",
             operator.or_: "or", operator.xor: "xor", operator.mod: "mod"}


def container_binary_op(tx, op, base, a, b):
    """``a op b`` where a container is involved, through the real dunders (``__iadd__``
    keeps a list's identity, ``__rmul__`` for ``3 * lst``, ``NotImplemented`` falls back
    as CPython does); None when no container is involved."""
    from .tensor import TensorVariable

    kinds = (BaseListVariable, DictVariable, SetVariable, DictViewVariable)
    name = _OP_NAMES.get(base)
    if name is None or not (isinstance(a, kinds) or isinstance(b, kinds)):
        return None
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        return None
    if base is operator.add and (isinstance(a, SizeVariable) or isinstance(b, SizeVariable)):
        if not (isinstance(a, TupleVariable) and isinstance(b, TupleVariable)):
            unsupported("TypeError: can only concatenate tuple (not a list) to torch.Size")
        return SizeVariable(a.items + b.items)

    def attempt(vt, dunder, other):
        if not isinstance(vt, kinds) or not hasattr(vt.python_type(), dunder):
            return None
        result = vt.call_method(tx, dunder, [other], {})
        if result.is_python_constant() and result.as_python_constant() is NotImplemented:
            return None
        return result

    if not isinstance(a, kinds):  # e.g. "%s" % (x,): the left operand's operator first
        from .native import NativeCall

        nc = NativeCall(tx)
        ra, rb = nc.real(a), nc.real(b)
        if not nc.opaque:
            try:
                return nc.wrap(base(ra, rb))
            except Exception as e:  # noqa: BLE001
                unsupported(f"{base.__name__} raised {type(e).__name__}: {e}")
    result = None
    if op is not base:
        result = attempt(a, f"__i{name}__", b)
    if result is None:
        result = attempt(a, f"__{name}__", b)
    if result is None and not (isinstance(a, kinds) and type(a) is type(b)):
        result = attempt(b, f"__r{name}__", a)
    if result is None:
        unsupported(f"TypeError: unsupported operand type(s) for {base.__name__}: "
                    f"'{a.python_type().__name__}' and '{b.python_type().__name__}'")
    return result
