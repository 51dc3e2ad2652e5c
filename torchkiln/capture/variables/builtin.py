"""Python builtins and ``operator``/``math`` functions.

Builtins over constants fold; over tensors and symbolic sizes they become graph ops
(``operator.add`` …); ``isinstance``/``len``/``getattr``/``hasattr`` consult trackers;
``print`` and C functions that cannot be traced graph-break.
"""
from __future__ import annotations

import builtins
import functools
import math
import operator

import torch

from .base import ConstantVariable, VariableTracker, is_plain_arg, is_plain_constant, pure_method, unsupported


def vt_equal(tx, a, b) -> bool:
    """``a == b`` where no user-defined ``__eq__`` is in play (``user_compare`` ran first):
    constants compare by value, one object with itself is equal, and objects of types that
    compare by identity (``object.__eq__``: functions, modules, classes, plain objects)
    are unequal; any other pair (a ``set``, ``dict_items``, ``Decimal`` or bound method
    read from a source) is a graph break: identity is not its equality."""
    if a is b:
        return True
    if a.is_python_constant() and b.is_python_constant():
        return a.as_python_constant() == b.as_python_constant()
    va, vb = getattr(a, "value", a), getattr(b, "value", b)
    if va is vb:
        return True
    if _eq_is_identity(a) and _eq_is_identity(b):
        return False
    unsupported(f"== between {_type_name(a)} and {_type_name(b)} objects (not by identity)")


def _eq_is_identity(vt) -> bool:
    """Whether ``vt == other`` is ``vt is other`` for any other object of a different type:
    a builtin constant (its ``__eq__`` gives NotImplemented for foreign types), or an
    object whose type keeps ``object.__eq__``."""
    if vt.is_python_constant():
        cls = type(vt.as_python_constant())
        return cls.__module__ == "builtins" or cls.__eq__ is object.__eq__
    try:
        return vt.python_type().__eq__ is object.__eq__
    except Exception:  # noqa: BLE001 - no known type: not provably by identity
        return False


def _type_name(vt) -> str:
    try:
        return vt.python_type().__name__
    except Exception:  # noqa: BLE001
        return type(vt).__name__


def _all_const(args, kwargs):
    return all(a.is_python_constant() for a in args) and all(v.is_python_constant() for v in kwargs.values())


# Builtins without side effects on their arguments: over constant data they run for real.
_PURE = {abs, bool, int, float, str, len, min, max, round, divmod, pow, repr, format, chr, ord, hash, sorted, sum,
         any, all, tuple, list, dict, set, frozenset, isinstance, issubclass, callable, slice, type, range, hex,
         bin, oct, complex, bytes, ascii, zip, map, filter, enumerate, reversed, iter, functools.reduce}
_PURE_IDS = {id(f) for f in _PURE} | {id(getattr(math, n)) for n in dir(math) if callable(getattr(math, n))} | {
    id(getattr(operator, n)) for n in dir(operator) if callable(getattr(operator, n)) and not n.startswith(("i", "_"))
    and n not in ("setitem", "delitem", "attrgetter", "itemgetter", "methodcaller", "call")} | {
    id(f) for f in (operator.index, operator.indexOf, operator.inv, operator.invert)}
# (``is``/``id`` are not pure here: they would see the copies a real run is given.)
# Alternate constructors of builtin immutable types called on the exact type (each lookup
# of ``float.fromhex`` makes a new bound method: matched by owner and name).
_PURE_CLASSMETHODS = {(float, "fromhex"), (int, "from_bytes"), (bytes, "fromhex"), (str, "maketrans"),
                      (bytes, "maketrans")}


_BINOPS = {operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
           operator.pow, operator.matmul, operator.and_, operator.or_, operator.xor, operator.lshift,
           operator.rshift, operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
           operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
           operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor, operator.ilshift,
           operator.irshift, operator.concat, operator.iconcat}
_UNOPS = {operator.neg, operator.pos, operator.invert, operator.inv, operator.not_, abs}


def is_pure_builtin(fn) -> bool:
    """Whether ``fn`` may run for real on constant inputs (no side effects, no identity)."""
    if id(fn) in _PURE_IDS:
        return True
    owner = getattr(fn, "__self__", None)
    if type(owner) is type and (owner, getattr(fn, "__name__", None)) in _PURE_CLASSMETHODS:
        return True
    return isinstance(owner, (str, int, float, bytes, tuple, complex, frozenset)) and not isinstance(owner, type)


class BuiltinVariable(VariableTracker):
    """A builtin or C function (``len``, ``isinstance``, ``operator.add``, ``math.sqrt`` …)."""

    def __init__(self, fn, source=None):
        self.fn = fn
        self.source = source

    @property
    def value(self):
        return self.fn

    def python_type(self):
        return type(self.fn)

    def as_python_constant(self):
        return self.fn

    def is_python_constant(self):
        return True

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.from_source(self.source)
        if getattr(self.fn, "__self__", None) is not None and not isinstance(
                self.fn.__self__, (type, type(builtins), str, int, float, bytes, tuple)):
            unsupported("rebuilding a method bound to an object without a source")
        fn = self.fn
        return lambda rt: fn

    def __repr__(self):
        return f"BuiltinVariable({getattr(self.fn, '__name__', self.fn)})"

    def var_getattr(self, tx, name):
        if isinstance(self.fn, type) and name in ("__name__", "__qualname__", "__module__"):
            return ConstantVariable(getattr(self.fn, name))  # a builtin type's names are read-only
        if (self.fn, name) in _PURE_CLASSMETHODS:
            return BuiltinVariable(getattr(self.fn, name))
        return super().var_getattr(tx, name)

    def call_function(self, tx, args, kwargs):
        """Over constant data a pure builtin runs for real (every argument and keyword
        applied by CPython); the ones that must stay symbolic have handlers below, each
        checking its whole signature; the rest run a polyfill or graph-break."""
        fn = self.fn
        if fn is print:
            unsupported("print() (a call with Python side effects)")
        from .iterators import build_iter, build_native_iterator, build_reversed, iterator_ctor

        if fn in (str, repr, format, ascii) and args:  # of a SymInt: its guarded value, as torch.compile does
            from .tensor import specialize_symbolic

            args = [specialize_symbolic(a) for a in args]
        owner = getattr(fn, "__self__", None)
        if owner is not None and is_plain_constant(owner) and pure_method(owner, getattr(fn, "__name__", "")):
            # "{}".format looked up on a constant: the constant's own method rules
            from .tensor import specialize_symbolic

            if fn.__name__ in ("format", "format_map", "__mod__") and isinstance(owner, str):
                args = [specialize_symbolic(a) for a in args]
                kwargs = {k: specialize_symbolic(v) for k, v in kwargs.items()}
            if all(is_plain_arg(a) for a in args) and all(is_plain_arg(v) for v in kwargs.values()):
                return ConstantVariable(owner).call_method(tx, fn.__name__, args, kwargs)
        if iterator_ctor(fn):  # lazy, its real type kept (variables/iterators.py)
            return build_native_iterator(tx, fn, args, kwargs)
        if fn in (iter, reversed) and len(args) == 1 and not kwargs:
            result = (build_iter if fn is iter else build_reversed)(tx, args[0])
            if result is not None:
                return result
        if is_pure_builtin(fn):
            from .native import NativeCall

            nc = NativeCall(tx)
            cargs = [nc.real(a) for a in args]
            ckwargs = {k: nc.real(v) for k, v in kwargs.items()}
            if not nc.opaque:
                if nc.unordered and fn not in (set, frozenset, len, bool):
                    unsupported(f"{getattr(fn, '__name__', fn)}() of a set whose iteration order is unknown")
                try:
                    result = fn(*cargs, **ckwargs)
                except Exception as e:  # noqa: BLE001 - raised again when the call runs natively
                    unsupported(f"{getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}")
                if fn in (set, frozenset) and not kwargs:
                    from .native import replay_args

                    hists = replay_args(args)
                    if hists is not None:  # the set's table can be replayed at runtime
                        nc.result_origin = (result, ("ctor", fn, hists))
                return nc.wrap(result)
        if kwargs and fn not in _TAKES_KWARGS:
            from ..polyfills import polyfill_for

            if polyfill_for(fn) is None:
                unsupported(f"{getattr(fn, '__qualname__', fn)}() with keyword arguments {sorted(kwargs)}")
        else:
            result = self._symbolic(tx, fn, args, kwargs)
            if result is not None:
                return result
        from ..polyfills import polyfill_for

        poly = polyfill_for(fn)
        if poly is not None:
            from ..polyfills import call_polyfill

            return call_polyfill(tx, poly, args, kwargs)
        unsupported(f"call to builtin {getattr(fn, '__qualname__', fn)}")

    def _symbolic(self, tx, fn, args, kwargs):
        """Builtins that must stay symbolic; None when ``fn``/these arguments are not one."""
        from .containers import DictVariable, ListIteratorVariable, ListVariable, SetVariable, TupleVariable
        from .tensor import SymNodeVariable, TensorVariable
        from .builder import wrap_constant_like

        n = len(args)
        if fn in _BINOPS and n == 2:
            return tx.binary_op(fn, args[0], args[1])
        if fn in _UNOPS and n == 1 and not args[0].is_python_constant():
            if fn is operator.not_:
                return ConstantVariable(not args[0].truth(tx))
            return tx.output.call_function(tx, fn, args, {})
        if fn is operator.getitem and n == 2:
            return tx.getitem(args[0], args[1])
        if fn is operator.setitem and n == 3:
            return args[0].call_method(tx, "__setitem__", args[1:], {})
        if fn is operator.delitem and n == 2:
            return args[0].call_method(tx, "__delitem__", args[1:], {})
        if fn is operator.contains and n == 2:
            return tx.compare_op("in", args[1], args[0])
        if (fn is operator.is_ or fn is operator.is_not) and n == 2:
            return tx.compare_op("is" if fn is operator.is_ else "is not", args[0], args[1])
        if fn is operator.truth and n == 1:
            return ConstantVariable(args[0].truth(tx))
        if fn is isinstance and n == 2:
            return ConstantVariable(tx.isinstance_check(args[0], args[1]))
        if fn is len and n == 1:
            return args[0].call_method(tx, "__len__", [], {})
        if fn is getattr and n in (2, 3):
            name = args[1].as_python_constant()
            try:
                return tx.getattr(args[0], name)
            except Exception:
                # the default only where the attribute is known to be missing (a tracker
                # that cannot model an attribute is no AttributeError: graph break)
                if n == 3 and not tx.attr_error_is_fatal(args[0], name) and not tx.hasattr(args[0], name):
                    return args[2]
                raise
        if fn is hasattr and n == 2:
            return ConstantVariable(tx.hasattr(args[0], args[1].as_python_constant()))
        if fn is delattr and n == 2 and hasattr(args[0], "delete_attr"):
            args[0].delete_attr(tx, args[1].as_python_constant())
            return ConstantVariable(None)
        if fn is setattr and n == 3:
            tx.setattr(args[0], args[1].as_python_constant(), args[2])
            return ConstantVariable(None)
        if fn is type and n == 1:
            return wrap_constant_like(tx, args[0].python_type())
        if fn is callable and n == 1:
            v = args[0]
            if v.is_python_constant():
                return ConstantVariable(callable(v.as_python_constant()))
            from .containers import BaseListVariable

            return ConstantVariable(not isinstance(v, (TensorVariable, SymNodeVariable, BaseListVariable, DictVariable)))
        if fn is id and n == 1 and hasattr(args[0], "value"):
            if getattr(args[0], "source", None) is not None:  # the id is of this very object: ID_MATCH
                tx.output.guards.id_match(args[0].source, args[0].value)
            return ConstantVariable(id(args[0].value))
        if fn is iter and n == 1:
            if isinstance(args[0], ListIteratorVariable) or hasattr(args[0], "next_item"):
                return args[0]
            from .containers import ListVariable, TupleVariable

            return ListIteratorVariable(args[0].unpack_var_sequence(tx),
                                        container=args[0] if type(args[0]) in (ListVariable, TupleVariable) else None)
        if fn is next and n in (1, 2):
            if not hasattr(args[0], "next_item"):
                if n == 2:
                    unsupported(f"next() with a default on {args[0]}")
                return args[0].call_method(tx, "__next__", [], {})
            item = args[0].next_item(tx)
            if item is None:
                if n == 2:
                    return args[1]
                unsupported("StopIteration from next() on an exhausted iterator")
            return item
        if fn in (tuple, list) and n <= 1:
            items = args[0].unpack_var_sequence(tx) if args else []
            return TupleVariable(items) if fn is tuple else ListVariable(items)
        if fn in (set, frozenset) and n == 1 and isinstance(args[0], (SetVariable, DictVariable)):
            from .native import native_construct  # set(a_set) copies its table, set(a_dict) sizes it first

            return native_construct(tx, fn, args, {})
        if fn in (set, frozenset) and n <= 1:
            return SetVariable(args[0].unpack_var_sequence(tx) if args else [], frozen=fn is frozenset)
        if fn is dict and n <= 1:
            result = DictVariable()
            if args or kwargs:
                result.call_method(tx, "update", args, kwargs)
            return result
        if fn is reversed and n == 1 and type(args[0]) is ListVariable:
            return ListIteratorVariable([], index=len(args[0].items) - 1, container=args[0], reverse=True)
        if fn in (min, max) and n >= 1 and any(isinstance(a, SymNodeVariable) for a in args):
            items = args[0].unpack_var_sequence(tx) if n == 1 else list(args)
            if all(isinstance(i, SymNodeVariable) or i.is_python_constant() for i in items) and items:
                result = items[0]
                for item in items[1:]:
                    target = torch.sym_max if fn is max else torch.sym_min
                    result = tx.output.call_function(tx, target, [result, item], {})
                return result
        if fn in (int, float, bool) and n == 1 and isinstance(args[0], SymNodeVariable):
            if fn is bool:
                return ConstantVariable(args[0].truth(tx))
            return tx.output.call_function(tx, fn, args, {})
        if fn in (int, float, bool) and n == 1 and isinstance(args[0], TensorVariable):
            unsupported(f"{fn.__name__}(tensor) reads a tensor's value")
        if fn is bool and n == 1:
            return ConstantVariable(args[0].truth(tx))
        if fn is str and n == 1 and not args[0].is_python_constant():
            unsupported("str() of a non-constant")
        if fn is slice and 1 <= n <= 3:
            from .containers import SliceVariable

            return SliceVariable(list(args))
        if getattr(fn, "__module__", None) == "math" and any(isinstance(a, SymNodeVariable) for a in args):
            return tx.output.call_function(tx, fn, args, kwargs)
        return None


_TAKES_KWARGS = {dict}
