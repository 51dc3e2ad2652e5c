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

from .base import ConstantVariable, VariableTracker, unsupported


def vt_equal(tx, a, b) -> bool:
    if a is b:
        return True
    if a.is_python_constant() and b.is_python_constant():
        return a.as_python_constant() == b.as_python_constant()
    va, vb = getattr(a, "value", a), getattr(b, "value", b)
    return va is vb


def sort_items(tx, items, key=None, reverse=False):
    if key is not None and not (isinstance(key, ConstantVariable) and key.value is None):
        keyed = [(key.call_function(tx, [i], {}).as_python_constant(), n, i) for n, i in enumerate(items)]
    else:
        keyed = [(i.as_python_constant(), n, i) for n, i in enumerate(items)]
    keyed.sort(key=lambda t: t[0], reverse=reverse)
    return [t[2] for t in keyed]


def _consts(args, kwargs):
    return [a.as_python_constant() for a in args], {k: v.as_python_constant() for k, v in kwargs.items()}


def _all_const(args, kwargs):
    return all(a.is_python_constant() for a in args) and all(v.is_python_constant() for v in kwargs.values())


_PURE = {abs, bool, int, float, str, len, min, max, round, divmod, pow, repr, format, chr, ord, hash, sorted, sum,
         any, all, tuple, list, dict, set, frozenset, isinstance, issubclass, callable, slice, type, range, hex,
         bin, oct, complex, bytes}
_PURE_IDS = {id(f) for f in _PURE} | {id(getattr(math, n)) for n in dir(math) if callable(getattr(math, n))} | {
    id(getattr(operator, n)) for n in dir(operator) if callable(getattr(operator, n)) and not n.startswith("i")
    and n not in ("setitem", "delitem", "attrgetter", "itemgetter", "methodcaller", "call")}

_BINOPS = {operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
           operator.pow, operator.matmul, operator.and_, operator.or_, operator.xor, operator.lshift,
           operator.rshift, operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
           operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
           operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor}
_UNOPS = {operator.neg, operator.pos, operator.invert, operator.not_, abs}


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

    def call_function(self, tx, args, kwargs):
        from .containers import (DictVariable, ListIteratorVariable, ListVariable, SetVariable,
                                 TupleVariable, BaseListVariable)
        from .tensor import SymNodeVariable, TensorVariable
        from .builder import wrap_constant_like

        fn = self.fn
        if fn is print:
            unsupported("print() (a call with Python side effects)")
        if fn in _BINOPS and len(args) == 2:
            return tx.binary_op(fn, args[0], args[1])
        if fn in _UNOPS and len(args) == 1 and not args[0].is_python_constant():
            if fn is operator.not_:
                return ConstantVariable(not args[0].truth(tx))
            return tx.output.call_function(tx, fn, args, {})
        if fn is operator.getitem:
            return tx.getitem(args[0], args[1])
        if fn is operator.setitem:
            return args[0].call_method(tx, "__setitem__", args[1:], {})
        if fn is operator.contains:
            return tx.compare_op("in", args[1], args[0])
        if fn is operator.is_ or fn is operator.is_not:
            return tx.compare_op("is" if fn is operator.is_ else "is not", args[0], args[1])
        if fn is isinstance:
            return ConstantVariable(tx.isinstance_check(args[0], args[1]))
        if fn is issubclass and _all_const(args, kwargs):
            return ConstantVariable(issubclass(*_consts(args, kwargs)[0]))
        if fn is len:
            return args[0].call_method(tx, "__len__", [], {})
        if fn is getattr:
            name = args[1].as_python_constant()
            try:
                return tx.getattr(args[0], name)
            except Exception:
                if len(args) == 3 and not tx.attr_error_is_fatal(args[0], name):
                    return args[2]
                raise
        if fn is hasattr:
            return ConstantVariable(tx.hasattr(args[0], args[1].as_python_constant()))
        if fn is setattr:
            tx.setattr(args[0], args[1].as_python_constant(), args[2])
            return ConstantVariable(None)
        if fn is type and len(args) == 1:
            return wrap_constant_like(tx, args[0].python_type())
        if fn is callable and len(args) == 1:
            v = args[0]
            if v.is_python_constant():
                return ConstantVariable(callable(v.as_python_constant()))
            return ConstantVariable(not isinstance(v, (TensorVariable, SymNodeVariable, BaseListVariable, DictVariable)))
        if fn is id and len(args) == 1 and hasattr(args[0], "value"):
            return ConstantVariable(id(args[0].value))
        if fn in (iter,) and len(args) == 1:
            if isinstance(args[0], ListIteratorVariable):
                return args[0]
            return ListIteratorVariable(args[0].unpack_var_sequence(tx))
        if fn is next:
            item = args[0].next_item(tx) if isinstance(args[0], ListIteratorVariable) else None
            if item is None:
                if len(args) > 1:
                    return args[1]
                unsupported("next() on an exhausted or unknown iterator")
            return item
        if fn in (tuple, list) and len(args) <= 1:
            items = args[0].unpack_var_sequence(tx) if args else []
            return TupleVariable(items) if fn is tuple else ListVariable(items)
        if fn in (set, frozenset):
            return SetVariable(args[0].unpack_var_sequence(tx) if args else [], frozen=fn is frozenset)
        if fn is dict:
            result = DictVariable()
            if args:
                result.call_method(tx, "update", args, {})
            for k, v in kwargs.items():
                result.items[k] = (ConstantVariable(k), v)
            return result
        if fn is zip:
            seqs = [a.unpack_var_sequence(tx) for a in args]
            return ListIteratorVariable([TupleVariable(list(t)) for t in zip(*seqs)])
        if fn is enumerate:
            start = kwargs.get("start", args[1] if len(args) > 1 else ConstantVariable(0)).as_python_constant()
            return ListIteratorVariable([TupleVariable([ConstantVariable(i + start), v])
                                         for i, v in enumerate(args[0].unpack_var_sequence(tx))])
        if fn is reversed:
            return ListIteratorVariable(list(reversed(args[0].unpack_var_sequence(tx))))
        if fn is map:
            seqs = [a.unpack_var_sequence(tx) for a in args[1:]]
            return ListIteratorVariable([args[0].call_function(tx, list(t), {}) for t in zip(*seqs)])
        if fn is filter:
            items = args[1].unpack_var_sequence(tx)
            if isinstance(args[0], ConstantVariable) and args[0].value is None:
                return ListIteratorVariable([i for i in items if i.truth(tx)])
            return ListIteratorVariable([i for i in items if args[0].call_function(tx, [i], {}).truth(tx)])
        if fn is sorted:
            items = args[0].unpack_var_sequence(tx)
            return ListVariable(sort_items(tx, items, kwargs.get("key"),
                                           kwargs.get("reverse", ConstantVariable(False)).as_python_constant()))
        if fn in (any, all) and not args[0].is_python_constant():
            result = fn is all
            for item in args[0].unpack_var_sequence(tx):
                if item.truth(tx) is not result:
                    return ConstantVariable(not result)
            return ConstantVariable(result)
        if fn is sum and not _all_const(args, kwargs):
            total = args[1] if len(args) > 1 else ConstantVariable(0)
            for item in args[0].unpack_var_sequence(tx):
                total = tx.binary_op(operator.add, total, item)
            return total
        if fn in (min, max) and not _all_const(args, kwargs):
            items = args[0].unpack_var_sequence(tx) if len(args) == 1 else list(args)
            if any(isinstance(i, TensorVariable) for i in items):
                unsupported(f"{fn.__name__}() over tensors")
            if all(i.is_python_constant() for i in items):
                return ConstantVariable(fn(i.as_python_constant() for i in items))
            result = items[0]
            for item in items[1:]:
                target = torch.sym_max if fn is max else torch.sym_min
                result = tx.output.call_function(tx, target, [result, item], {})
            return result
        if fn in (int, float, bool) and len(args) == 1 and isinstance(args[0], SymNodeVariable):
            if fn is bool:
                return ConstantVariable(args[0].truth(tx))
            return tx.output.call_function(tx, fn, args, {})
        if fn in (int, float, bool) and len(args) == 1 and isinstance(args[0], TensorVariable):
            unsupported(f"{fn.__name__}(tensor) reads a tensor's value")
        if fn is bool and len(args) == 1:
            return ConstantVariable(args[0].truth(tx))
        if fn is str and len(args) == 1 and not args[0].is_python_constant():
            unsupported("str() of a non-constant")
        if fn is slice:
            from .containers import SliceVariable

            if _all_const(args, kwargs):
                return ConstantVariable(slice(*_consts(args, kwargs)[0]))
            return SliceVariable(list(args))
        if fn is functools.reduce:
            items = args[1].unpack_var_sequence(tx)
            acc = args[2] if len(args) > 2 else items.pop(0)
            for item in items:
                acc = args[0].call_function(tx, [acc, item], {})
            return acc
        if id(fn) in _PURE_IDS and _all_const(args, kwargs):
            cargs, ckwargs = _consts(args, kwargs)
            try:
                return wrap_constant_like(tx, fn(*cargs, **ckwargs))
            except Exception as e:
                unsupported(f"{getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}")
        if getattr(fn, "__module__", None) == "math" and any(isinstance(a, SymNodeVariable) for a in args):
            return tx.output.call_function(tx, fn, args, kwargs)
        if isinstance(getattr(fn, "__self__", None), (str, int, float, tuple, bytes)) and _all_const(args, kwargs):
            cargs, ckwargs = _consts(args, kwargs)
            return wrap_constant_like(tx, fn(*cargs, **ckwargs))
        unsupported(f"call to builtin {getattr(fn, '__qualname__', fn)}")

