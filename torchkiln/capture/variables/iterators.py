"""Iterator objects that C builtins and ``itertools`` make in the frame (``zip``, ``map``,
``filter``, ``enumerate``, ``iter(tuple)``, ``itertools.chain`` ...).

CPython's iterators are lazy and stateful, and their type is visible (``repr``, pickling,
``__setstate__``, ``__sizeof__``, the tuple ``zip`` reuses).  A :class:`NativeIteratorVariable`
keeps both: its items come one ``next()`` at a time from a plain-Python polyfill traced
like user code (``capture/polyfills/``), so side effects interleave with the consumer as
they do eagerly and an endless iterator is fine; its ``python_type`` is the real type; any
other use (``repr``, ``__reduce__``, ``__setstate__`` ...) is a graph break.

At a graph break or return one never advanced during capture is rebuilt by calling the
*real* constructor on the rebuilt arguments: exact type and laziness.  One advanced during
capture (a ``for`` loop broken in its body) is rebuilt as a list iterator over its
remaining items, drained at the break, which the resumed frame can capture; when draining
them has side effects it cannot be rebuilt (Unsupported: the frame runs eagerly).
"""
from __future__ import annotations

import itertools

from .base import ConstantVariable, IteratorProtocolMixin, VariableTracker, unsupported


class NativeIteratorVariable(IteratorProtocolMixin, VariableTracker):
    """``ctor(*args, **kwargs)``, an iterator made by a C constructor during capture.

    ``source_it``: the tracker its items come from (a polyfill's generator, or a list
    iterator over an immutable container's items)."""

    rebuilt_once = True  # one object per run of the transformed code (identity)

    def __init__(self, ctor, args, kwargs, source_it, real_type):
        self.ctor = ctor
        self.args = list(args)
        self.kwargs = dict(kwargs)
        self.source_it = source_it
        self.real_type = real_type
        self.consumed = 0
        self.finished = False
        self.drained = None  # remaining items, drained when rebuilt after being advanced
        self.sized = None  # the dict/set iterated (CPython raises if its size changes): see watch()
        self.size0 = 0
        self.replay = False  # rebuilt as the real ctor(arg) advanced to its position

    def python_type(self):
        return self.real_type

    def next_item(self, tx):
        """The next item's tracker, or None when exhausted."""
        if self.finished:
            return None
        self._check_size()
        item = self.source_it.next_item(tx)
        if item is None:
            self.finished = True
            return None
        self.consumed += 1
        return item

    def watch(self, container):
        """Check ``container`` (a DictVariable or SetVariable) on every step, as CPython's
        dict and set iterators do: a size change raises RuntimeError there (a graph break
        here, so the real iterator raises it), and so would keys that changed at the same
        size (or they would be walked in another order)."""
        self.sized, self.size0 = container, len(container.items)
        self.version0 = container.keys_version
        self.replay = True
        return self

    def _changed(self) -> str | None:
        """Why the watched container no longer matches what this iterator walks, or None."""
        sized = self.sized
        if sized is None:
            return None
        if len(sized.items) != self.size0:
            return "size"
        if sized.keys_version != self.version0:  # a key deleted and one added: CPython's
            return "keys"  # iterator walks its table by position (or raises): not modelled
        return None

    def _check_size(self):
        changed = self._changed()
        if changed is not None:
            unsupported(f"RuntimeError: {self.sized.python_type().__name__} changed {changed} during iteration")

    def reconstruct(self, cg):
        if self.replay:
            return self._reconstruct_watched(cg)
        if self.consumed or self.finished:
            return self._reconstruct_rest(cg)
        ctor = self.ctor
        args = [cg.recipe(a) for a in self.args]
        kwargs = {k: cg.recipe(v) for k, v in self.kwargs.items()}
        return lambda rt: ctor(*[a(rt) for a in args], **{k: v(rt) for k, v in kwargs.items()})

    def _reconstruct_watched(self, cg):
        """A dict/set iterator (or ``reversed`` of a tuple, whose argument is immutable) is
        rebuilt as the real iterator over the rebuilt container, advanced past the items
        consumed during capture; one whose dict or set changed size since it was made is
        rebuilt as an iterator of its real type that raises CPython's RuntimeError on its
        next step.  Keys that changed at the same size cannot be rebuilt (Unsupported)."""
        changed = self._changed()
        if changed == "keys":
            unsupported(f"a {self.real_type.__name__} whose container's keys changed at the same size")
        ctor, arg, consumed, finished = self.ctor, cg.recipe(self.args[0]), self.consumed, self.finished
        if changed == "size":
            make = self._poisoned
            return lambda rt: make()

        def build(rt):
            it = ctor(arg(rt))
            if consumed and type(it) is _RANGE_ITERATOR:
                it.__setstate__(consumed)
            else:
                for _ in range(consumed):
                    next(it)
            if finished:
                for _ in it:
                    pass
            return it
        return build

    def _poisoned(self):
        """An iterator of ``real_type`` whose container changed size: next() raises."""
        if self.real_type is type(iter(set())):
            tmp = {0}
            it = iter(tmp)
            tmp.add(1)
            return it
        tmp = {0: 0}
        arg = self.args[0]
        kind = getattr(arg, "kind", None)
        it = self.ctor(getattr(tmp, kind)() if kind else tmp)
        tmp[1] = 1
        return it

    def _reconstruct_rest(self, cg):
        """An iterator advanced during capture: its remaining items, drained now, as a list
        iterator (the resumed frame captures iterating it).  Only when drained items cause
        no side effect (a ``map`` of a function that writes would run it too early)."""
        if self.drained is None:
            side_effects = cg.output.side_effects
            before = len(side_effects.ops)
            self.drained = self.unpack_var_sequence(cg.tx)
            if len(side_effects.ops) != before:
                unsupported(f"a {self.real_type.__name__} iterator advanced during capture is alive at a graph "
                            f"break and its remaining items have side effects")
        recipes = [cg.recipe(i) for i in self.drained]
        return lambda rt: iter([r(rt) for r in recipes])

    def __repr__(self):
        return f"NativeIteratorVariable({self.real_type.__name__})"


def _iterable_type(vt) -> bool:
    try:
        t = vt.python_type()
    except Exception:  # noqa: BLE001 - unknown type: let the caller decide
        return True
    return hasattr(t, "__iter__") or hasattr(t, "__getitem__")


# Constructors whose arguments CPython turns into iterators at construction (a
# non-iterable raises TypeError right away), by the positions of those arguments.
_ITERATED_ARGS = {zip: "all", map: "from1", filter: (1,), enumerate: (0,), itertools.islice: (0,),
                  itertools.starmap: (1,), itertools.takewhile: (1,), itertools.dropwhile: (1,),
                  itertools.compress: (0, 1), itertools.pairwise: (0,), itertools.zip_longest: "all",
                  itertools.accumulate: (0,), itertools.product: "all"}

_TYPES = {itertools.chain.from_iterable: itertools.chain}


def iterator_ctor(fn) -> bool:
    """Whether ``fn`` builds one of the iterators captured as :class:`NativeIteratorVariable`."""
    from ..polyfills import polyfill_for

    return fn in _ITERATED_ARGS or fn in _TYPES or fn in (itertools.chain, itertools.repeat, itertools.count,
                                                            itertools.cycle) and polyfill_for(fn) is not None


def build_native_iterator(tx, fn, args, kwargs):
    """``fn(*args, **kwargs)`` for an iterator constructor (see :func:`iterator_ctor`)."""
    from ..polyfills import polyfill_for
    from .functions import UserFunctionVariable

    which = _ITERATED_ARGS.get(fn, ())
    positions = range(len(args)) if which == "all" else range(1, len(args)) if which == "from1" else which
    for i in positions:
        if i < len(args) and not _iterable_type(args[i]):
            unsupported(f"{getattr(fn, '__name__', fn)}() of a non-iterable")
    gen = UserFunctionVariable(polyfill_for(fn)).call_function(tx, list(args), dict(kwargs))
    if not hasattr(gen, "next_item"):
        unsupported(f"polyfill of {fn} returned {gen}")
    real_type = _TYPES.get(fn, fn)
    return NativeIteratorVariable(fn, args, kwargs, gen, real_type)


_ITER_BASES = (tuple, str, bytes, range, dict, set, frozenset)
_RANGE_ITERATOR = type(iter(range(1)))


LAZY_RANGE = 4096  # a range longer than this is iterated lazily (see build_iter)


class _RangeItems:
    """The items of a range, made one at a time."""

    def __init__(self, r: range):
        self.range, self.pos = r, 0

    def next_item(self, tx):
        if self.pos >= len(self.range):
            return None
        self.pos += 1
        return ConstantVariable(self.range[self.pos - 1])


class DictItemsSource:
    """What a CPython dict iterator yields: the keys, values or (key, value) pairs of a
    DictVariable in order (``reverse``: from the end), each read when it is reached, so a
    value stored after the iterator was made is seen as CPython's iterator sees it."""

    def __init__(self, owner, kind: str, reverse: bool = False):
        self.owner, self.kind = owner, kind
        self.keys = list(owner.items)[::-1] if reverse else list(owner.items)
        self.pos = 0

    def next_item(self, tx):
        from .containers import TupleVariable

        if self.pos >= len(self.keys):
            return None
        key = self.keys[self.pos]
        self.pos += 1
        k, v = self.owner.items[key]
        return k if self.kind == "keys" else v if self.kind == "values" else TupleVariable([k, v])


def _dict_owner(arg):
    """``(dict tracker, view kind)`` for a plain dict or a view of one, else None."""
    from .containers import DictVariable, DictViewVariable

    if isinstance(arg, DictVariable) and (arg.python_type() in _ITER_BASES or arg.python_type().__module__ == "collections"):
        return arg, "keys"
    if isinstance(arg, DictViewVariable) and isinstance(arg.owner, DictVariable):
        return arg.owner, arg.kind
    return None


def build_iter(tx, arg):
    """``iter(x)`` of a tuple, str, bytes, range, dict (or a view of one) or set: its items
    in order, rebuilt as the real ``iter(x)`` (a ``tuple_iterator``, ``range_iterator``,
    ``dict_keyiterator`` ...).  A dict's or set's iterator checks its container on every
    step as CPython's does (RuntimeError on a size change) and reads a dict's values live.
    None for other arguments (lists keep their live list iterator; user iterables and
    iterators are handled by the caller)."""
    from .containers import DictVariable, ListIteratorVariable, SetVariable, TupleVariable

    if hasattr(arg, "next_item"):
        return None
    if type(arg) is TupleVariable:  # a tuple_iterator rebuilt at its position (iter + __setstate__)
        return ListIteratorVariable([], container=arg)
    owner = _dict_owner(arg)
    if owner is not None:
        if type(arg) is DictVariable and arg.python_type() is not dict:  # OrderedDict's own iterator type
            real_type = type(iter(arg.python_type()()))
        else:
            real_type = type(iter(getattr({}, owner[1])()))
        return NativeIteratorVariable(iter, [arg], {}, DictItemsSource(*owner), real_type).watch(owner[0])
    if isinstance(arg, ConstantVariable) and type(arg.value) is range and len(arg.value) > LAZY_RANGE:
        # a long range's items are made one next() at a time (a loop that breaks early or
        # stops at a graph break never builds ten million trackers)
        result = NativeIteratorVariable(iter, [arg], {}, _RangeItems(arg.value), type(iter(arg.value)))
        result.replay = True
        return result
    if isinstance(arg, ConstantVariable) and isinstance(arg.value, (str, bytes, range)):
        sample = arg.value
    elif isinstance(arg, SetVariable):
        sample = arg.python_type()()
    else:
        return None
    real_type = type(iter(sample))
    result = NativeIteratorVariable(iter, [arg], {}, ListIteratorVariable(arg.unpack_var_sequence(tx)), real_type)
    return result.watch(arg) if isinstance(arg, SetVariable) else result


def build_reversed(tx, arg):
    """``reversed(x)`` of a tuple, or of a dict or one of its views: the real type
    (``reversed``, ``dict_reversekeyiterator`` ...), rebuilt as the real ``reversed(x)``
    at its position; a dict's checked on every step as CPython's (RuntimeError on a size
    change), its values read live.  None for other arguments."""
    from .containers import DictVariable, ListIteratorVariable, TupleVariable

    if type(arg) is TupleVariable:
        walk = ListIteratorVariable([], index=len(arg.items) - 1, container=arg, reverse=True)
        result = NativeIteratorVariable(reversed, [arg], {}, walk, reversed)
        result.replay = True
        return result
    owner = _dict_owner(arg)
    if owner is None or isinstance(arg, DictVariable) and arg.python_type() is not dict:
        return None
    real_type = type(reversed(getattr({}, owner[1])()))
    return NativeIteratorVariable(reversed, [arg], {}, DictItemsSource(*owner, reverse=True),
                                  real_type).watch(owner[0])
