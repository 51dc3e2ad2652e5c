"""Module attribute reads in generated guards without ``nn.Module.__getattr__``.

A guard reads ``L['self'].encoder.layer._modules['0'].attention.query.weight`` on every
call.  Each step to a submodule, parameter or buffer misses the instance ``__dict__``,
raises AttributeError inside ``object.__getattribute__`` and then runs
``nn.Module.__getattr__`` in Python: about a microsecond, several hundred times per call
on a transformers model.  :class:`ModuleReads` rewrites such a step to the dict read
that ``Module.__getattr__`` itself does (``m.__dict__['_parameters']['weight']``), only
where the two provably give the same value:

* per call, once, for each module class ``T`` read this way (the *class checks*, at
  the top of the guard): ``T.__mro__`` is the tuple seen when the guard was built, no
  class of it defines ``__getattribute__`` (``object``'s is the lookup), the first
  ``__getattr__`` of the MRO is ``nn.Module.__getattr__`` (same function, same code),
  ``__dict__`` is the instance-dict descriptor seen at build time, and no class of
  the MRO has an attribute named like a name read this way (a descriptor or class
  attribute would win over ``__getattr__``);
* per read, before it: ``type(m) is T`` (the module's own TYPE_MATCH, which the guard
  has anyway), the name is not in ``m.__dict__`` (an instance attribute would win),
  and for a buffer not in ``_parameters``, for a submodule in neither
  ``_parameters`` nor ``_buffers`` (``__getattr__``'s order).

Anything else (a name found in no dict at build time, a class with its own
``__getattr__``/``__getattribute__``, a module whose type is not guarded) keeps the
plain read.  ``hasattr(m, name) is True|False`` parts on modules get the same
treatment.  A rewritten read that finds nothing raises KeyError: the guard fails,
never passes wrongly.  The parts a guard prints, records and explains its failures
with stay the plain ones; only the generated check function uses the rewrite.
"""
from __future__ import annotations

import ast
import re
import types

import torch

from .source import _CHAIN, _steps

_MODULE = torch.nn.Module
_MODULE_GETATTR = _MODULE.__dict__["__getattr__"]
_MODULE_GETATTR_CODE = _MODULE_GETATTR.__code__
_DICTS = ("_parameters", "_buffers", "_modules")  # Module.__getattr__'s order
_TYPE_PART = re.compile(r"^type\((.*)\) is (___c\d+)$")
_HASATTR_PART = re.compile(r"^hasattr\((.*), '([A-Za-z_][A-Za-z0-9_]*)'\) is (True|False)$")
_NO_VALUE = object()


def _class_layout(cls: type):
    """``(dict_owner, dict_descriptor, getattr_owner)`` when instances of ``cls`` look
    attributes up as a plain ``nn.Module`` does (``object.__getattribute__``, then
    ``nn.Module.__getattr__``), else None."""
    if type(cls) is not type or not issubclass(cls, _MODULE):
        return None
    dict_owner = getattr_owner = None
    for c in cls.__mro__:
        d = c.__dict__
        if c is not object and "__getattribute__" in d:
            return None
        if getattr_owner is None and "__getattr__" in d:
            if c is not _MODULE or d["__getattr__"] is not _MODULE_GETATTR:
                return None
            getattr_owner = c
        if dict_owner is None and "__dict__" in d:
            desc = d["__dict__"]
            if type(desc) is not types.GetSetDescriptorType or desc.__objclass__ is not c:
                return None
            dict_owner = c
    if dict_owner is None or getattr_owner is None or _MODULE_GETATTR.__code__ is not _MODULE_GETATTR_CODE:
        return None
    return dict_owner, dict_owner.__dict__["__dict__"], getattr_owner


def _in_class(cls: type, name: str) -> bool:
    return any(name in c.__dict__ for c in cls.__mro__)


class ModuleReads:
    """Rewrites guard parts' module reads (see the module docstring).

    ``f_locals`` and ``env`` give the values the sources named when the guard was
    built: the plan follows them (reading instance and class dicts only, never running
    a property or ``__getattr__``).  ``const(value)`` names a constant in the guard's
    namespace.  ``type_parts`` maps a source to the constant name of its TYPE_MATCH part.
    """

    def __init__(self, f_locals: dict, env: dict, const, codes: list[str]):
        self._roots = {"L": f_locals}
        self._env = env
        self._const = const
        self._types: dict[str, str] = {}
        self.note_types(codes)
        self._layouts: dict[type, tuple | None] = {}
        self._names: dict[type, set[str]] = {}  # per module class: names read past __getattr__
        self._chains: dict[str, tuple[str, list[str], object]] = {}  # chain -> (rewritten, preconditions, value)
        self._required: dict[str, None] = {}  # chains read outside the guard (inputs): preconditions needed

    def note_types(self, codes: list[str]) -> None:
        """Learn the TYPE_MATCH parts among ``codes`` (a read is rewritten only below a
        module whose type the guard checks)."""
        for code in codes:
            m = _TYPE_PART.match(code)
            if m and m.group(1) not in self._types:
                self._types[m.group(1)] = m.group(2)

    def source(self, source: str) -> str:
        """``source`` (a chain) with its module reads rewritten, for code that runs right
        after this guard passed on the same ``f_locals`` (the graph inputs' getter): its
        preconditions become part of the guard (:func:`module_read_codes`)."""
        if not _CHAIN.fullmatch(source):
            return source
        new, pre, _ = self._chain(source)
        if pre:
            self._required[source] = None
        return new

    def forget_values(self) -> None:
        """Drop the build-time values (the guard keeps no argument alive)."""
        self._roots = {}
        self._chains = {k: (new, pre, _NO_VALUE) for k, (new, pre, _) in self._chains.items()}

    # -- values at build time ---------------------------------------------------------
    def _layout(self, cls):
        if cls not in self._layouts:
            self._layouts[cls] = _class_layout(cls)
        return self._layouts[cls]

    def _module_step(self, value, source: str, name: str):
        """``(kind, new value)`` for ``value.name`` on a module whose lookup is the plain
        one: kind ``"dict"`` (an instance attribute: the plain read is fast) or one of
        ``_DICTS``; None when the read must stay as it is."""
        cls = type(value)
        if (not isinstance(value, _MODULE) or name.startswith("__") or source not in self._types
                or self._env.get(self._types[source]) is not cls or self._layout(cls) is None
                or _in_class(cls, name)):
            return None
        d = value.__dict__
        if name in d:
            return "dict", d[name]
        for kind in _DICTS:
            table = d.get(kind)
            if type(table) is not dict:
                return None
            if name in table:
                return kind, table[name]
        return None

    def _chain(self, chain: str):
        """``(rewritten chain, preconditions, value at build time or _NO_VALUE)``."""
        hit = self._chains.get(chain)
        if hit is not None:
            return hit
        steps = _steps(chain)
        root = steps[0]
        base, _, key = root.partition("[")
        table = self._roots.get(base) if base == "L" else self._env.get(base) if base == "G" or base.startswith("___g_") \
            else None
        value = _NO_VALUE
        if type(table) is dict:
            try:
                value = table.get(ast.literal_eval(key[:-1]), _NO_VALUE)
            except (ValueError, SyntaxError, TypeError):
                value = _NO_VALUE
        orig, out, pre = root, root, []
        for step in steps[1:]:
            new_step = step
            if value is not _NO_VALUE:
                if step.startswith("."):
                    planned = self._module_step(value, orig, step[1:])
                    if planned is None:
                        value = _NO_VALUE
                    else:
                        kind, value = planned
                        if kind != "dict":
                            pre += self._read_preconditions(out, orig, step[1:], kind)
                            new_step = f".__dict__[{kind!r}][{step[1:]!r}]"
                else:
                    value = self._item(value, step)
            orig += step
            out += new_step
        hit = self._chains[chain] = (out, pre, value)
        return hit

    @staticmethod
    def _item(value, step: str):
        """``value[key]`` at build time: plain containers, and torch's module containers
        (``ModuleList.__getitem__``: the read stays as it is, the plan goes on below it)."""
        if not (type(value) in (dict, list, tuple) or (
                isinstance(value, _MODULE) and type(value).__module__ == "torch.nn.modules.container")):
            return _NO_VALUE
        try:
            if step.startswith("[slice("):
                return value[slice(*ast.literal_eval(step[6:-1]))]
            return value[ast.literal_eval(step[1:-1])]
        except Exception:  # noqa: BLE001 - not a plain literal key, or missing
            return _NO_VALUE

    def _read_preconditions(self, base: str, orig_base: str, name: str, kind: str) -> list[str]:
        """Checks before ``base.__dict__[kind][name]`` stands for ``base.name``."""
        cls = self._env[self._types[orig_base]]
        self._names.setdefault(cls, set()).add(name)
        pre = [f"type({base}) is {self._types[orig_base]}", f"{name!r} not in {base}.__dict__"]
        for earlier in _DICTS[:_DICTS.index(kind)]:
            pre.append(f"{name!r} not in {base}.__dict__[{earlier!r}]")
        return pre

    # -- rewriting ----------------------------------------------------------------------
    def rewrite(self, code: str) -> list[str]:
        """``code`` as the parts to run in its place (preconditions first)."""
        m = _HASATTR_PART.match(code)
        if m and _CHAIN.fullmatch(m.group(1)):
            out = self._hasattr(m.group(1), m.group(2), m.group(3) == "True")
            if out is not None:
                return out
        pre: list[str] = []

        def sub(match):
            new, conditions, _ = self._chain(match.group(0))
            pre.extend(conditions)
            return new
        new = _CHAIN.sub(sub, code)
        return pre + [new]

    def _hasattr(self, chain: str, name: str, expected: bool):
        new, pre, value = self._chain(chain)
        if value is _NO_VALUE:
            return None
        orig = chain
        planned = self._module_step(value, orig, name)
        if expected:
            if planned is None or planned[0] == "dict":
                return None
            return pre + [f"type({new}) is {self._types[orig]}", f"{name!r} in {new}.__dict__[{planned[0]!r}]"]
        cls = type(value)
        if (planned is not None or not isinstance(value, _MODULE) or name.startswith("__") or orig not in self._types
                or self._env.get(self._types[orig]) is not cls or self._layout(cls) is None or _in_class(cls, name)
                or name in value.__dict__ or any(type(value.__dict__.get(k)) is not dict for k in _DICTS)):
            return None
        self._names.setdefault(cls, set()).add(name)
        return pre + [f"type({new}) is {self._types[orig]}", f"{name!r} not in {new}.__dict__"] + [
            f"{name!r} not in {new}.__dict__[{k!r}]" for k in _DICTS]

    def class_checks(self) -> list[str]:
        """The per-call checks on the classes read past ``__getattr__`` (L-free)."""
        if not self._names:
            return []
        const = self._const
        absent: dict[type, set[str]] = {}
        present: dict[type, dict[str, object]] = {}
        checks = []
        for cls, names in self._names.items():
            dict_owner, desc, getattr_owner = self._layout(cls)
            checks.append(f"{const(cls)}.__mro__ is {const(cls.__mro__)}")
            seen_getattr = seen_dict = False
            for c in cls.__mro__:
                if c is object:  # a builtin type: its dict cannot change
                    continue
                want = absent.setdefault(c, set())
                want.update(names)
                want.add("__getattribute__")
                if not seen_getattr:
                    if c is getattr_owner:
                        present.setdefault(c, {})["__getattr__"] = _MODULE_GETATTR
                        seen_getattr = True
                    else:
                        want.add("__getattr__")
                if not seen_dict:
                    if c is dict_owner:
                        present.setdefault(c, {})["__dict__"] = desc
                        seen_dict = True
                    else:
                        want.add("__dict__")
        for c, names in absent.items():
            proxy = const(c.__dict__)
            checks.append(f"{proxy}.keys().isdisjoint({const(frozenset(names))})")
            for name, value in present.get(c, {}).items():
                checks.append(f"{proxy}.get({name!r}) is {const(value)}")
        checks.append(f"{const(_MODULE_GETATTR)}.__code__ is {const(_MODULE_GETATTR_CODE)}")
        return checks


def module_read_codes(codes: list[str], reads: ModuleReads) -> tuple[list[str], list[str]]:
    """``(parts to run, class checks)``: the parts the generated guard runs for
    ``codes`` (the class checks first, then each part with its module reads rewritten
    and their preconditions before it, then the preconditions of the reads
    :meth:`ModuleReads.source` rewrote elsewhere), and the class checks alone."""
    reads.note_types(codes)
    body: list[str] = []
    for code in codes:
        body += reads.rewrite(code)
    for chain in reads._required:
        body += reads._chain(chain)[1]
    classes = reads.class_checks()
    out, seen = [], set()
    for code in classes + body:
        if code not in seen:
            seen.add(code)
            out.append(code)
    return out, classes
