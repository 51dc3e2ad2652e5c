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

Objects whose class runs a known Python ``__getattribute__`` (transformers' configs:
``PreTrainedConfig`` renames keys through ``attribute_map``, ``HeterogeneousConfigMixin``
acts only when the instance has a ``_heterogeneity_spec``) get the same: each such function
is recognised by the fingerprint of its code (:data:`_PASS_THROUGH`, per CPython version;
the class checks check the function, its code, its ``__class__`` cell and that ``super``
is not shadowed in its globals), and a read of ``cfg.name`` becomes the instance-dict
read ``object.__getattribute__(cfg, '__dict__')['name']`` (or the class's plain value)
after the per-read checks that the function would pass the name through unchanged: not
in ``attribute_map`` (a class dict, checked per call: it is mutable), no instance
``attribute_map`` nor ``_heterogeneity_spec``, no class attribute of that name but a
plain value (bool, int, str...) whose type is checked per call.  A property
(``_attn_implementation``) stays a plain read.

Anything else (a name found in no dict at build time, a class with its own
``__getattr__``/``__getattribute__``, a module whose type is not guarded) keeps the
plain read.  ``hasattr(m, name) is True|False`` parts on modules get the same
treatment.  A rewritten read that finds nothing raises KeyError: the guard fails,
never passes wrongly.  The parts a guard prints, records and explains its failures
with stay the plain ones; only the generated check function uses the rewrite.
"""
from __future__ import annotations

import ast
import hashlib
import marshal
import operator
import re
import sys
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
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: builtins and static types (attributes cannot be set)


def fixed_class(cls: type) -> bool:
    """True when no class of ``cls.__mro__`` can change its dict (immutable types): its
    lookups need no per-call check (nor a warm-start record)."""
    return all(c.__flags__ & _IMMUTABLE_TYPE for c in cls.__mro__)
_LONG_CODE = 1000  # characters: longer parts run as they are, but for the tensor-alias check


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


def _fingerprint(fn) -> tuple | None:
    """What identifies a function's behaviour up to its globals and closure: its code
    (CPython's bytecode, constants, names), keyed by the interpreter version."""
    if type(fn) is not types.FunctionType:
        return None
    c = fn.__code__
    data = marshal.dumps((c.co_code, c.co_consts, c.co_names, c.co_varnames, c.co_freevars, c.co_cellvars,
                          c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount, c.co_flags))
    return sys.version_info[:2], hashlib.sha256(data).hexdigest()[:32]


# ``__getattribute__`` implementations read and found to end in ``object.__getattribute__``
# for the names they let through (fingerprint -> the condition, checked per call):
# "attribute_map": ``key != "attribute_map" and key in super().__getattribute__("attribute_map")``
# renames the key, else ``super().__getattribute__(key)`` (transformers' PreTrainedConfig);
# "heterogeneity": only when the instance dict's ``_heterogeneity_spec`` is not None does it do
# anything but ``super().__getattribute__(key)`` (transformers' HeterogeneousConfigMixin).
# Another version of either has another fingerprint: its reads stay plain.
_PLAIN_CLASS_VALUES = (bool, int, float, str, bytes, type(None), tuple, list, dict, frozenset, set)

_PASS_THROUGH = {
    ((3, 11), "48ed3a8300a3c5f417158d8ac434e57c"): "attribute_map",
    ((3, 11), "25dc469a01b5aa3647fc07be34043cdc"): "heterogeneity",
}


def _config_layout(cls: type):
    """A dict describing how instances of ``cls`` (not a module) look attributes up,
    when it is a chain of :data:`_PASS_THROUGH` ``__getattribute__`` functions ending in
    ``object.__getattribute__``, with no ``__getattr__``; else None."""
    if type(cls) is not type or issubclass(cls, _MODULE):
        return None
    owners = []  # (class, function, kind) in MRO order
    layout = {"owners": owners, "dict_owner": None, "amap_owner": None}
    for c in cls.__mro__:
        d = c.__dict__
        if c is object:
            break
        if "__getattr__" in d:
            return None
        if "__getattribute__" in d:
            fn = d["__getattribute__"]
            kind = _PASS_THROUGH.get(_fingerprint(fn))
            if (kind is None or fn.__code__.co_freevars != ("__class__",) or fn.__closure__[0].cell_contents is not c
                    or "super" in fn.__globals__):
                return None
            owners.append((c, fn, kind))
        if layout["dict_owner"] is None and "__dict__" in d:
            desc = d["__dict__"]
            if type(desc) is not types.GetSetDescriptorType or desc.__objclass__ is not c:
                return None
            layout["dict_owner"], layout["dict_desc"] = c, desc
        if layout["amap_owner"] is None and "attribute_map" in d:
            layout["amap_owner"], layout["amap"] = c, d["attribute_map"]
    kinds = [k for _, _, k in owners]
    if kinds not in (["attribute_map"], ["heterogeneity"], ["attribute_map", "heterogeneity"]):
        return None
    if layout["dict_owner"] is None or ("attribute_map" in kinds and type(layout.get("amap")) is not dict):
        return None
    layout["kinds"] = kinds
    return layout


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
        self._config_layouts: dict[type, dict | None] = {}
        self._named: dict[int, tuple[str, object]] = {}  # id -> (constant name, value): one name per object
        self._config_names: dict[type, dict[str, type | None]] = {}  # per config class: name -> class it is read from
        self._chains: dict[str, tuple[str, list[str], object]] = {}  # chain -> (rewritten, preconditions, value)
        self._required: dict[str, None] = {}  # chains read outside the guard (inputs): preconditions needed
        self._batch: tuple = ([], [], [], set())  # class_checks' data for batched_class_checks
        self.lookups: dict[type, set[str]] = {}  # class lookups capture relied on (GuardBuilder.class_lookup)

    def _name(self, value) -> str:
        hit = self._named.get(id(value))
        if hit is None:
            hit = self._named[id(value)] = (self._const(value), value)
        return hit[0]

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

    def _config_layout(self, cls):
        if cls not in self._config_layouts:
            self._config_layouts[cls] = _config_layout(cls)
        return self._config_layouts[cls]

    def _config_step(self, value, source: str, name: str):
        """``(new value, read expression on the instance dict expression, class it is
        read from or None)`` for ``value.name`` on an object whose ``__getattribute__``
        chain is :data:`_PASS_THROUGH` (a transformers config), or None."""
        cls = type(value)
        if (name.startswith("__") or name == "attribute_map" or source not in self._types
                or self._env.get(self._types[source]) is not cls or self._config_layout(cls) is None):
            return None
        layout = self._config_layout(cls)
        d = object.__getattribute__(value, "__dict__")
        if type(d) is not dict or "attribute_map" in d or d.get("_heterogeneity_spec") is not None:
            return None
        if "attribute_map" in layout["kinds"] and name in layout["amap"]:
            return None
        owner = next((c for c in cls.__mro__ if name in c.__dict__), None)
        if owner is None:
            return (d[name], None, "instance") if name in d else None
        v = owner.__dict__[name]
        if owner is object or type(v) not in _PLAIN_CLASS_VALUES:  # a descriptor, maybe
            return None
        return (d[name], owner, "shadowed") if name in d else (v, owner, "class")

    def _config_preconditions(self, base: str, orig_base: str, name: str, owner, how="instance") -> tuple[list[str], str]:
        """Checks before the instance-dict (or class-dict) read stands for ``base.name``,
        and that read: ``how`` is "instance" (no class attribute of that name),
        "shadowed" (the instance attribute over a plain class value of ``owner``: the
        value stays a plain one) or "class" (``owner``'s plain value, none in the instance)."""
        cls = self._env[self._types[orig_base]]
        layout = self._config_layout(cls)
        self._env.setdefault("___oga", object.__getattribute__)
        self._config_names.setdefault(cls, {})[name] = owner
        d = f"___oga({base}, '__dict__')"
        pre = [f"type({base}) is {self._types[orig_base]}"]
        if "heterogeneity" in layout["kinds"]:
            pre.append(f"{d}.get('_heterogeneity_spec') is None")
        if "attribute_map" in layout["kinds"]:
            pre += [f"'attribute_map' not in {d}", f"{name!r} not in {self._name(layout['amap'])}"]
        if owner is None:
            return pre, f"{d}[{name!r}]"
        class_value = f"{self._name(owner.__dict__)}.get({name!r})"
        pre.append(f"type({class_value}) is {self._name(type(owner.__dict__[name]))}")
        if how == "shadowed":
            return pre, f"{d}[{name!r}]"
        return pre + [f"{name!r} not in {d}"], class_value

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
                    config = None if planned is not None else self._config_step(value, orig, step[1:])
                    if config is not None:
                        value, owner, how = config
                        conditions, read = self._config_preconditions(out, orig, step[1:], owner, how)
                        pre += conditions
                        orig += step
                        out = read
                        continue
                    if planned is None:
                        value = _NO_VALUE
                    else:
                        kind, value = planned
                        if kind != "dict":
                            pre += self._read_preconditions(out, orig, step[1:], kind)
                            new_step = f".__dict__[{kind!r}][{step[1:]!r}]"
                        else:  # an instance attribute (training, eps, _forward_hooks...)
                            pre += self._instance_read_preconditions(out, orig, step[1:])
                            new_step = f".__dict__[{step[1:]!r}]"
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

    def _instance_read_preconditions(self, base: str, orig_base: str, name: str) -> list[str]:
        """Checks before ``base.__dict__[name]`` stands for ``base.name`` where ``name`` is
        an instance attribute: the module's type (its lookup is the plain one) and, with
        the class checks, no class of its MRO has an attribute ``name`` (a data descriptor
        would win over the instance dict).  The plain read runs through
        ``slot_tp_getattr_hook`` (nn.Module defines ``__getattr__``: CPython does not
        specialise it), ~65 ns more than the dict read."""
        cls = self._env[self._types[orig_base]]
        self._names.setdefault(cls, set()).add(name)
        return [f"type({base}) is {self._types[orig_base]}"]

    # -- rewriting ----------------------------------------------------------------------
    def rewrite(self, code: str) -> list[str]:
        """``code`` as the parts to run in its place (preconditions first)."""
        if len(code) > _LONG_CODE and not code.startswith("len({id("):
            return [code]  # a long constant (a 1 MB string compared): not worth a scan; the alias check is
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
        if not isinstance(value, _MODULE):
            return self._config_hasattr(new, pre, value, orig, name, expected)
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

    def _config_hasattr(self, new, pre, value, orig, name, expected):
        config = self._config_step(value, orig, name)
        if expected:
            if config is None or config[2] != "instance":
                return None
            conditions, _ = self._config_preconditions(new, orig, name, None)
            return pre + conditions + [f"{name!r} in ___oga({new}, '__dict__')"]
        cls = type(value)
        if (config is not None or name.startswith("__") or name == "attribute_map" or orig not in self._types
                or self._env.get(self._types[orig]) is not cls or self._config_layout(cls) is None
                or _in_class(cls, name)):
            return None
        layout = self._config_layout(cls)
        d = object.__getattribute__(value, "__dict__")
        if (type(d) is not dict or name in d or "attribute_map" in d or d.get("_heterogeneity_spec") is not None
                or ("attribute_map" in layout["kinds"] and name in layout["amap"])):
            return None
        conditions, _ = self._config_preconditions(new, orig, name, None)
        return pre + conditions + [f"{name!r} not in ___oga({new}, '__dict__')"]

    def _config_class_checks(self, absent: dict, present: dict, checks: list) -> None:
        const = self._const
        for cls, names in self._config_names.items():
            layout = self._config_layout(cls)
            checks.append(self._mro_check(cls))
            owners = {c: fn for c, fn, _ in layout["owners"]}
            for c, fn, _ in layout["owners"]:
                checks.append(f"{const(fn)}.__code__ is {const(fn.__code__)}")
                checks.append(f"{const(fn.__closure__[0])}.cell_contents is {const(c)}")
                checks.append(f"'super' not in {const(fn.__globals__)}")
            seen = set()  # owners passed along the MRO: "__dict__", "attribute_map", read names' classes
            for c in cls.__mro__:
                if c is object:
                    continue
                want = absent.setdefault(c, set())
                want.add("__getattr__")
                if c in owners:
                    present.setdefault(c, {})["__getattribute__"] = owners[c]
                else:
                    want.add("__getattribute__")
                for key, owner, value in (("__dict__", layout["dict_owner"], layout.get("dict_desc")),
                                          ("attribute_map", layout["amap_owner"], layout.get("amap"))):
                    if key in seen or owner is None and key == "attribute_map":
                        continue
                    if c is owner:
                        if key == "__dict__" or "attribute_map" in layout["kinds"]:
                            present.setdefault(c, {})[key] = value
                        seen.add(key)
                    else:
                        want.add(key)
                for name, owner in names.items():
                    if (name, "read") in seen:
                        continue
                    if c is owner:
                        seen.add((name, "read"))
                    else:
                        want.add(name)

    def _lookup_class_checks(self, absent: dict, present: dict, checks: list) -> None:
        """The class lookups capture relied on (a method it inlined, a property, a class
        attribute, whether a dunder exists): ``__mro__`` the same tuple, the name absent
        from the class dicts before the one that defined it, which still holds the same
        object.  Classes whose dicts cannot change (immutable types) are not checked;
        a class the module and config passes check already keeps its one MRO check."""
        for cls, names in self.lookups.items():
            if fixed_class(cls):
                continue
            if cls not in self._names and cls not in self._config_names:
                checks.append(self._mro_check(cls))
            for name in names:
                for c in cls.__mro__:
                    mutable = not c.__flags__ & _IMMUTABLE_TYPE
                    if name in c.__dict__:
                        if mutable:
                            present.setdefault(c, {})[name] = c.__dict__[name]
                        break
                    if mutable:
                        absent.setdefault(c, set()).add(name)

    def class_checks(self) -> list[str]:
        """The per-call checks on the classes read past ``__getattr__`` and on the class
        lookups capture relied on (L-free)."""
        if not self._names and not self._config_names and not self.lookups:
            return []
        const = self._const
        absent: dict[type, set[str]] = {}
        present: dict[type, dict[str, object]] = {}
        checks = []
        self._batch = ([], [], [], set())  # mros (class, MRO), disjoint (view, names), gets (proxy, name, value), their lines
        self._config_class_checks(absent, present, checks)
        for cls, names in self._names.items():
            dict_owner, desc, getattr_owner = self._layout(cls)
            checks.append(self._mro_check(cls))
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
        self._lookup_class_checks(absent, present, checks)
        mros, disjoint, gets, lines = self._batch
        for c in {**absent, **present}:
            proxy = const(c.__dict__)  # a live view of the class's dict
            if c in absent:
                names = frozenset(absent[c])
                checks.append(f"{proxy}.keys().isdisjoint({const(names)})")
                disjoint.append((c.__dict__.keys(), names))
                lines.add(checks[-1])
            for name, value in present.get(c, {}).items():
                checks.append(f"{proxy}[{name!r}] is {const(value)}")  # deleted: raises, fails
                gets.append((c.__dict__, name, value))
                lines.add(checks[-1])
        if self._names:
            checks.append(f"{const(_MODULE_GETATTR)}.__code__ is {const(_MODULE_GETATTR_CODE)}")
        return checks


    def _mro_check(self, cls) -> str:
        """``cls.__mro__ is <its MRO now>`` (also kept for :meth:`batched_class_checks`)."""
        code = f"{self._const(cls)}.__mro__ is {self._const(cls.__mro__)}"
        self._batch[0].append((cls, cls.__mro__))
        self._batch[3].add(code)
        return code

    def batched_class_checks(self, classes: list[str]) -> list[str]:
        """``classes`` (:meth:`class_checks`' lines) as the generated guard runs them: the
        ``__mro__`` checks, the disjoint-names checks and the dict-entry checks each as one
        C-level loop (``all(map(is_, map(attrgetter('__mro__'), classes), mros))`` and
        alike; a few µs less than one line each: 120 lines on hf_llama) in place of the
        first of them, the other checks as they are.  The same checks on the same live
        objects (a class's ``__dict__.keys()`` view follows its dict); the guard's parts
        and failure reasons keep one line each."""
        mros, disjoint, gets, lines = self._batch
        if len(lines) < 2:
            return classes
        const = self._const
        self._env.update(_BATCH_ENV)
        batched = []
        if mros:
            batched.append(f"___all(___map(___is, ___map(___mro_of, {const(tuple(c for c, _ in mros))}), "
                           f"{const(tuple(m for _, m in mros))}))")
        if disjoint:
            views, names = zip(*disjoint)
            batched.append(f"___all(___map(___isdisjoint, {const(views)}, {const(names)}))")
        if gets:
            proxies, names, values = zip(*gets)
            batched.append(f"___all(___map(___is, ___map(___getitem, {const(proxies)}, {const(names)}), "
                           f"{const(values)}))")
        tagged = _version_tag_check([c for c, _ in mros], batched, self._env, const)
        if tagged is not None:
            batched = [tagged]
        out, placed = [], False
        for code in classes:
            if code in lines:
                if not placed:
                    out += batched
                    placed = True
                continue
            out.append(code)
        return out


def _type_version_offset() -> int | None:
    """The byte offset of ``tp_version_tag`` in CPython's type object, when this
    interpreter is one whose behaviour :func:`_version_tag_check` relies on (checked
    here on throwaway classes), else None.

    CPython gives a class a version tag when its attribute cache first looks a name up
    on it, and sets it to 0 whenever the class or any class of its MRO is changed
    (``setattr``/``delattr`` on the class, ``__bases__`` assigned: ``PyType_Modified``
    invalidates every subclass too); a tag is never given twice (CPython's own method
    cache relies on both; its test_type_cache checks the uniqueness).  The offset is
    found as the slot five pointers after ``tp_mro`` (3.11 and 3.12 layouts)."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in ((3, 11), (3, 12)):
        return None
    try:
        import ctypes

        class Base:
            x = 1

        class Probe(Base):
            pass
        word = ctypes.sizeof(ctypes.c_void_p)
        mro_at = next(off for off in range(0, 64 * word, word)
                      if ctypes.c_size_t.from_address(id(Probe) + off).value == id(Probe.__mro__))
        offset = mro_at + 5 * word

        def tag(cls):
            getattr(cls, "___torchkiln_no_such_name", None)  # makes the attribute cache give it a tag
            return ctypes.c_uint.from_address(id(cls) + offset).value
        first, base_first = tag(Probe), tag(Base)
        Base.x = 2
        zeroed = ctypes.c_uint.from_address(id(Probe) + offset).value
        second = tag(Probe)
        Probe.y = 1
        third = tag(Probe)
        ok = (first and base_first and first != base_first and zeroed == 0 and second not in (0, first)
              and third not in (0, first, second))
        return offset if ok else None
    except Exception:  # noqa: BLE001 - another layout: the dict checks stay
        return None


_TYPE_VERSION_OFFSET = _type_version_offset()


def _version_tag_check(classes: list[type], checks: list[str], env: dict, const) -> str | None:
    """One check equivalent to the class checks ``checks`` (MROs, names absent from
    class dicts, entries present, on ``classes`` and the classes of their MROs), fast
    while no class changes: ``tags_ok or recheck()``.  ``tags_ok``: each class of
    ``classes`` not in another one's MRO has the type version tag it had when
    ``checks`` last passed; a tag unchanged means neither the class nor any class of its
    MRO was changed since (see :func:`_type_version_offset`), so ``checks`` still pass.
    Else ``recheck()`` runs ``checks`` and, when they pass, takes the new tags (torch.fx's
    tracer patches ``nn.Module.__call__``/``__getattr__`` and puts them back: every
    module class gets new tags, its dicts are the same).  So the check passes exactly
    when ``checks`` do.  None (``checks`` run as they are) on an interpreter without
    usable tags or for a class without one.  The guard keeps the classes alive (the
    tags are read from their memory)."""
    if _TYPE_VERSION_OFFSET is None or not classes or not checks:
        return None
    import ctypes

    leaves = [c for c in dict.fromkeys(classes) if not any(c is not d and c in d.__mro__ for d in classes)]
    if any(not isinstance(c, type) or c.__flags__ & _IMMUTABLE_TYPE for c in leaves):
        return None  # (a metaclass, ABCMeta's say, changes a class's dict through type.__setattr__ too)
    views = tuple(ctypes.c_uint.from_address(id(c) + _TYPE_VERSION_OFFSET) for c in leaves)
    recheck = _TagRecheck(leaves, views, eval(f"lambda: {' and '.join(f'({c})' for c in checks)}", env))
    if not recheck():
        return None
    env.setdefault("___tag_of", operator.attrgetter("value"))
    env.setdefault("___eq", operator.eq)
    return f"(___all(___map(___eq, ___map(___tag_of, {const(views)}), {const(recheck.tags)})) or {const(recheck)}())"


class _TagRecheck:
    """``recheck()``: the class checks, and on success the classes' current version
    tags into ``tags`` (the list the fast check compares with)."""

    def __init__(self, classes: list, views: tuple, checks):
        self.classes = classes  # kept alive: their tags are read from their memory
        self.views = views
        self.checks = checks
        self.tags: list[int] = []

    def __call__(self) -> bool:
        for c in self.classes:
            getattr(c, "___torchkiln_no_such_name", None)  # a lookup gives a class without a tag its new one
        before = [v.value for v in self.views]
        if not self.checks():
            return False
        if 0 not in before and [v.value for v in self.views] == before:
            self.tags[:] = before
        return True


_BATCH_ENV = {"___all": all, "___map": map, "___is": operator.is_, "___mro_of": operator.attrgetter("__mro__"),
              "___isdisjoint": type({}.keys()).isdisjoint, "___getitem": operator.getitem}


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
    for code in reads.batched_class_checks(classes) + body:
        if code not in seen:
            seen.add(code)
            out.append(code)
    return out, classes
