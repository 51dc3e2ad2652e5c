"""Warm start past capture: a frame captured in an earlier process is installed from a
record, without interpreting its bytecode again.

torch.compile's warm start re-runs Dynamo (bytecode interpretation, guards, shape
work: pytorch#154456, #122540) before its caches help.  Here a cold capture that
compiled its frame into one graph saves a *frame record* in the store (namespace
``frames``), keyed by :func:`frame_key`: the function's module, qualified name, file
name, first line and a digest of its code object's content (bytecode, constants,
names; nested code objects included), the capture config, the backend's own key parts
(``backend.frame_cache``, see ``torchkiln/cache/__init__.py``) and the versions of
torchkiln, torch, Triton and Python.  A record holds plain data only, never a pickle:

* ``guards``: every guard part as Python source over ``L``/``G`` plus its constants
  described as data (literals, dtypes, devices, modules, and types, functions and code
  objects named by module and qualified name);
* ``inputs``: the graph inputs' sources; ``result``: the frame's return value as an
  expression over the graph outputs ``___o`` and sources;
* ``aot_key``: the AOT autograd cache entry of the compiled graph;
* ``inlined``: module, qualified name and content digest of every function capture
  inlined (torchkiln's own code is covered by the version key);
* ``lookups``: every class lookup capture relied on (``GuardBuilder.class_lookup``) and
  what it resolved to, as data: compared when loaded, then checked on every call by
  the guard, which is built as a fresh capture's (module reads, class checks).

In a new process the first miss of a frame (:func:`lookup`, called by
``convert_frame``) rebuilds each record's guard from the *live* values (constants
resolved again by name; a function whose content digest differs refuses the record)
and evaluates it on the call's locals; the first record whose guard passes is
installed: the compiled graph comes from the AOT/FX caches, the run function reads the
inputs, calls the graph and builds the result.  Anything in doubt is a bypass to
capture, counted in ``counters["warm_start"]`` (``hit``, ``miss``, ``saved``,
``bypass``) with its reason in ``counters["warm_start_bypass"]`` and on the
``torchkiln.cache`` logger: a damaged or foreign record, a constant that no longer
resolves, an inlined function that changed, guards that fail, a graph no longer in the
cache.  Every expression of a record is checked against a small grammar (names,
attributes, subscripts, comparisons, a few builtins and tensor methods) before it is
evaluated, when it is saved and when it is loaded.

A frame that graph-breaks (:func:`describe_break`) records the values it hands on, the
breaking call or branch and its resume functions as the arguments that make them again
from the frame's code; each resume function is a frame with a record of its own.

Not recorded (captured again in every process, reason counted as ``not_recordable``):
cells, entered contexts or loop iterators live at a break, side effects to replay,
a constant or an inlined function that cannot be named, backends without
``frame_cache`` (custom callables, ``mode=``/``options=``).  Once a frame was captured
in a process, its records are not used again there (``reset()`` recaptures, as torch's).
"""
from __future__ import annotations

import ast
import enum
import hashlib
import json
import logging
import math
import os
import re
import sys
import types
import weakref

import torch

from ..config import config
from ..utils.counters import counters
from ..utils.nogc import nogc
from .frame import CacheEntry, LazyLocal, bind_locals
from .guards import KEYED_LISTS
from .source import hoist_shared_prefixes

log = logging.getLogger("torchkiln.cache")
NAMESPACE = "frames"
FORMAT = 4  # 4: class lookups
MAX_RECORDS = 8  # per frame key (recompiles for other shapes, dtypes...)

_captured: set[str] = set()  # frame keys captured in this process: their records are not used here
_code_digests: dict = {}


class NotRecordable(Exception):
    """This capture cannot be saved as a frame record (the message says why)."""


class _Bypass(Exception):
    pass


def _protocol(backend):
    if os.environ.get("TORCHKILN_WARM_START", "1") == "0":
        return None
    fc = getattr(backend, "frame_cache", None)
    try:
        return fc if fc is not None and fc.enabled() else None
    except Exception:  # noqa: BLE001 - a backend's protocol must not break compiling
        return None


# ---- keys
def code_digest(code: types.CodeType) -> str:
    """SHA-256 of a code object's content: bytecode, constants (nested code objects by
    their digest), names, argument counts and flags; not file names or line numbers."""
    d = _code_digests.get(code)
    if d is None:
        consts = []
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                consts.append(["code", code_digest(c)])
            elif isinstance(c, frozenset):
                consts.append(["frozenset", sorted(map(repr, c))])
            else:
                consts.append([type(c).__name__, repr(c)])
        desc = [code.co_code.hex(), consts, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags, code.co_qualname]
        d = _code_digests[code] = hashlib.sha256(json.dumps(desc).encode()).hexdigest()
    return d


def frame_key(fn: types.FunctionType, protocol, fullgraph: bool, dynamic) -> str:
    """The key of ``fn``'s frame records (stable across processes and directories)."""
    from ..cache import keys  # not at import: ``import torchkiln`` does not load the cache

    code = fn.__code__
    desc = {"module": fn.__module__, "qualname": code.co_qualname, "file": os.path.basename(code.co_filename),
            "line": code.co_firstlineno, "code": code_digest(code), "versions": keys.versions(),
            "capture_config": keys.config_description(config), "backend": protocol.key_parts(),
            "fullgraph": bool(fullgraph),
            "dynamic": [dynamic.assume_static, sorted([k, sorted(map(str, v))] for k, v in dynamic.dynamic_dims.items())]}
    keyed = getattr(fn, KEYED_LISTS, ())
    if keyed:  # its records lack the guards that the caller's key stands for
        desc["keyed_inputs"] = list(keyed)
    return "frame" + keys.digest(desc)[:48]


# ---- constants as data
_MISSING = object()


def _resolve(module: str, qualname: str):
    obj = sys.modules.get(module, _MISSING)
    for part in qualname.split("."):
        if obj is _MISSING or part.startswith("<"):
            return _MISSING
        obj = getattr(obj, part, _MISSING)
    return obj


_MAX_WRAPPED = 3


def _const_path(code, target, depth: int = 0):
    """Indices into nested ``co_consts`` from ``code`` to the code object ``target`` (a
    local function's code is one object, shared by every closure made from it)."""
    if not isinstance(code, types.CodeType):
        return None
    for i, c in enumerate(code.co_consts):
        if c is target:
            return [i]
        if isinstance(c, types.CodeType) and depth < 3:
            path = _const_path(c, target, depth + 1)
            if path is not None:
                return [i] + path
    return None


def _unwrapped(obj, depth: int):
    """``obj.__wrapped__`` ``depth`` times (a decorated method's own code: transformers'
    ``@check_model_inputs`` forwards); _MISSING where the chain is shorter."""
    for _ in range(depth):
        obj = getattr(obj, "__wrapped__", _MISSING) if obj is not _MISSING else _MISSING
    return obj


def _code_of(obj):
    if isinstance(obj, property):
        obj = obj.fget
    obj = getattr(obj, "__func__", obj)
    return getattr(obj, "__code__", None)


_modules_by_file: dict = {}


def _module_of_code(code: types.CodeType) -> str | None:
    name = _modules_by_file.get(code.co_filename)
    if name is None or sys.modules.get(name) is None:
        # a copy made in one C call: list(sys.modules.items()) allocates a tuple per item, and a
        # collection it triggers can run finalizers that import ("dictionary changed size
        # during iteration": brk_call was not recorded under TRITON_INTERPRET=1 on torch 2.15)
        for mod_name, mod in sys.modules.copy().items():
            f = getattr(mod, "__file__", None)
            if f:
                _modules_by_file.setdefault(f, mod_name)
        name = _modules_by_file.get(code.co_filename)
    return name


def _plain(v) -> bool:
    if v is None or type(v) in (bool, int, str, bytes):
        return True
    if type(v) is float:
        return math.isfinite(v)
    if type(v) in (list, tuple, set):
        return all(_plain(i) for i in v)
    if type(v) is dict:
        return all(_plain(k) and _plain(i) for k, i in v.items())
    return False


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


def encode(v) -> list:
    """A guard or result constant as data; raises NotRecordable for one that has no
    stable name (an object, a lambda, a local function)."""
    if _plain(v):
        text = repr(v)
        if _same(ast.literal_eval(text), v):
            return ["lit", text]
    if type(v) in (tuple, list):
        return [type(v).__name__, [encode(i) for i in v]]
    if isinstance(v, enum.Enum):  # a member by its class's name and its own (transformers' ``Action.NONE``)
        cls = type(v)
        if _resolve(cls.__module__, cls.__qualname__) is cls and cls.__members__.get(v.name) is v:
            return ["enum", cls.__module__, cls.__qualname__, v.name]
    if isinstance(v, torch.dtype):
        return ["dtype", str(v).removeprefix("torch.")]
    if isinstance(v, torch.device):
        return ["device", str(v)]
    if isinstance(v, types.ModuleType):
        if sys.modules.get(v.__name__) is v:
            return ["module", v.__name__]
    elif isinstance(v, types.CodeType):
        module = _module_of_code(v)
        if module is not None:
            for depth in range(_MAX_WRAPPED + 1):
                if _code_of(_unwrapped(_resolve(module, v.co_qualname), depth)) is v:
                    return ["code", module, v.co_qualname, code_digest(v)] + ([depth] if depth else [])
            if ".<locals>." in v.co_qualname:  # a local function's code: found in its outermost named
                # function's (a decorator factory's ``deco.<locals>.wrapper.<locals>.wrapped``: ``deco``)
                outer = v.co_qualname.split(".<locals>.", 1)[0]
                path = _const_path(_code_of(_resolve(module, outer)), v)
                if path is not None:
                    return ["nested_code", module, outer, path, code_digest(v)]
    else:
        module, qualname = getattr(v, "__module__", None), getattr(v, "__qualname__", None)
        if isinstance(module, str) and isinstance(qualname, str) and _resolve(module, qualname) is v:
            return ["obj", module, qualname]
        name = getattr(v, "__name__", None)  # torch.bincount: qualname _VariableFunctionsClass.bincount
        if isinstance(module, str) and isinstance(name, str) and _resolve(module, name) is v:
            return ["obj", module, name]
    raise NotRecordable(f"a constant that cannot be named: {type(v).__name__} {_short(v)}")


def decode(d: list):
    """The live value a described constant names now; raises _Bypass when it is gone
    or (a code object) its content changed."""
    kind = d[0]
    if kind == "lit":
        return ast.literal_eval(d[1])
    if kind in ("tuple", "list"):
        return (tuple if kind == "tuple" else list)(decode(i) for i in d[1])
    if kind == "dtype":
        v = getattr(torch, d[1], None)
        if isinstance(v, torch.dtype):
            return v
    elif kind == "device":
        return torch.device(d[1])
    elif kind == "module":
        if d[1] in sys.modules:
            return sys.modules[d[1]]
    elif kind == "code":
        depth = d[4] if len(d) > 4 else 0
        if type(depth) is not int or not 0 <= depth <= _MAX_WRAPPED:
            raise _Bypass(f"damaged record: a code depth {depth!r}")
        code = _code_of(_unwrapped(_resolve(d[1], d[2]), depth))
        if isinstance(code, types.CodeType) and code_digest(code) == d[3]:
            return code
        raise _Bypass(f"changed source: {d[1]}.{d[2]}")
    elif kind == "nested_code":
        code = _code_of(_resolve(d[1], d[2]))
        for i in d[3]:
            if not isinstance(code, types.CodeType) or type(i) is not int or not 0 <= i < len(code.co_consts):
                code = None
                break
            code = code.co_consts[i]
        if isinstance(code, types.CodeType) and code_digest(code) == d[4]:
            return code
        raise _Bypass(f"changed source: {d[1]}.{d[2]} (a local function)")
    elif kind == "enum":
        cls = _resolve(d[1], d[2])
        if isinstance(cls, enum.EnumMeta) and type(d[3]) is str and d[3] in cls.__members__:
            return cls.__members__[d[3]]
    elif kind == "obj":
        v = _resolve(d[1], d[2])
        if v is not _MISSING:
            return v
    raise _Bypass(f"a guarded constant no longer resolves: {d}")


# ---- expressions
_BUILTINS = frozenset({"type", "len", "id", "list", "tuple", "hasattr", "getattr", "isinstance", "callable", "int", "float",
                       "bool", "str", "bytes", "complex", "dict", "set", "frozenset", "slice", "range", "object"})
_METHODS = frozenset({"dim", "size", "stride", "storage_offset", "keys", "is_contiguous"})
_NODES = (ast.Expression, ast.Name, ast.Load, ast.Attribute, ast.Subscript, ast.Constant, ast.Compare, ast.BoolOp,
          ast.keyword, ast.Dict,
          ast.UnaryOp, ast.Tuple, ast.List, ast.Set, ast.Call, ast.Slice, ast.And, ast.Or, ast.Not, ast.USub,
          ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
def _deref(ref):
    """A weak reference's target (``nn.LSTM._flat_weight_refs[i]()`` in capture's guards);
    a record calls nothing else without a name the grammar allows."""
    if type(ref) is not weakref.ref:
        raise TypeError(f"not a weak reference: {type(ref).__name__}")
    return ref()


def _plain_class(cls) -> bool:
    """A class whose instances capture rebuilds as ``object.__new__(cls)`` plus its
    ``__dict__`` (``NewObjectVariable``): no metaclass but ABCMeta, no own ``__new__``."""
    import abc

    return isinstance(cls, type) and type(cls) in (type, abc.ABCMeta) and cls.__new__ is object.__new__


def _new(cls, **attrs):
    """An object made in the frame (transformers' ``DynamicCache``), rebuilt as capture's
    recipe does: ``object.__new__`` and its attributes, no ``__init__``."""
    if not _plain_class(cls):
        raise TypeError(f"not a plain class: {cls!r}")
    obj = object.__new__(cls)
    obj.__dict__.update(attrs)
    return obj


_FIXED_ENV = {"___Tensor": torch.Tensor, "___inf": math.inf, "___is_grad_enabled": torch.is_grad_enabled,
              "___get_default_dtype": torch.get_default_dtype, "___copysign": math.copysign,
              "___Size": torch.Size, "___deref": _deref, "___new": _new}


def check_expr(text: str) -> set[str]:
    """The names ``text`` uses; raises NotRecordable unless it is within the grammar
    records allow (no calls but a few builtins and tensor methods, no lambdas)."""
    return check_exprs([text])


_UNSAFE_IN_TEXT = ("\n", "\r", "'''", '"""')


def check_exprs(texts: list) -> set[str]:
    """:func:`check_expr` of many expressions with one parse (a record has hundreds).

    Each text is one line that cannot open a string or a line continuation into the
    next (no newline, no triple quote, no trailing backslash), so every token of every
    text is in the tuple parsed here and checked; a text that is not a whole
    expression on its own either changes the tuple's length (refused) or fails to
    compile where it is used alone (a bypass)."""
    for t in texts:
        if not isinstance(t, str) or any(u in t for u in _UNSAFE_IN_TEXT) or t.rstrip().endswith("\\"):
            raise NotRecordable(f"an expression records cannot hold: {str(t)[:80]}")
    text = texts[0] if len(texts) == 1 else f"{len(texts)} expressions"
    with nogc():  # the parse tree (tens of thousands of nodes) is acyclic: freed on return
        return _check_tree(texts, text)


_DUNDERS = frozenset({"__dict__", "__code__", "__closure__", "__defaults__", "__kwdefaults__", "__func__", "__self__"})
_CALLABLE_NAMES = _BUILTINS | {"___global_state", "___is_grad_enabled", "___get_default_dtype", "___copysign", "___Size", "___deref"}
# the fields of each allowed node kind that hold nodes (a list, a node, or None); the
# others hold plain values (Name.id, Attribute.attr, Constant.value, keyword.arg)
_CHILDREN = {ast.Expression: ("body",), ast.Name: ("ctx",), ast.Attribute: ("value", "ctx"),
             ast.Subscript: ("value", "slice", "ctx"), ast.Constant: (), ast.Compare: ("left", "ops", "comparators"),
             ast.BoolOp: ("op", "values"), ast.keyword: ("value",), ast.Dict: ("keys", "values"),
             ast.UnaryOp: ("op", "operand"), ast.Tuple: ("elts", "ctx"), ast.List: ("elts", "ctx"), ast.Set: ("elts",),
             ast.Call: ("func", "args", "keywords"), ast.Slice: ("lower", "upper", "step")}
_CHILDREN.update({kind: () for kind in _NODES if kind not in _CHILDREN})  # Load and the operators
assert set(_CHILDREN) == set(_NODES) and all(set(f) <= set(k._fields) for k, f in _CHILDREN.items())


def _check_tree(texts: list, text: str) -> set[str]:
    try:
        tree = ast.parse("(\n" + ",\n".join(texts) + ",\n)", mode="eval")
    except SyntaxError as e:
        raise NotRecordable(f"an expression that does not parse: {text[:80]}") from e
    if not isinstance(tree.body, ast.Tuple) or len(tree.body.elts) != len(texts):
        raise NotRecordable(f"expressions that do not parse one by one: {text[:80]}")
    return _check_nodes([tree], text)


def _check_nodes(stack: list, text: str) -> set[str]:
    """The names used by the expression trees in ``stack`` (consumed); raises
    NotRecordable at the first node outside the grammar.  Every node is visited (a
    stack, not ``ast.walk``'s generators: a record has thousands of nodes, checked each
    time it is loaded); its exact type must be one of the grammar's (``ast.parse``
    makes no subclasses)."""
    names = set()
    pop, push, children = stack.pop, stack.append, _CHILDREN
    while stack:
        node = pop()
        kind = type(node)
        if kind is ast.Attribute:  # the commonest nodes first, their children pushed directly
            if node.attr.startswith("__") and node.attr not in _DUNDERS:
                raise NotRecordable(f"the attribute {node.attr!r} in {text[:80]}")
            push(node.value)
            push(node.ctx)
            continue
        if kind is ast.Constant or kind is ast.Load:
            continue
        if kind is ast.Name:
            names.add(node.id)
            if not (node.id in ("L", "G") or node.id.startswith("___") or node.id in _BUILTINS):
                raise NotRecordable(f"the name {node.id!r} in {text[:80]}")
        elif kind is ast.Call:
            _check_call(node, text)
        fields = children.get(kind)
        if fields is None:
            raise NotRecordable(f"a guard kind records cannot express ({kind.__name__}): {text[:80]}")
        for field in fields:
            value = getattr(node, field)
            if type(value) is list:
                for item in value:
                    if item is not None:  # Dict.keys holds None for ``**``
                        push(item)
            elif value is not None:  # Slice's missing bounds
                push(value)
    return names


def _check_call(node: ast.Call, text: str) -> None:
    f = node.func
    if type(f) is ast.Name and f.id.startswith("___m"):  # a ModelOutput class (checked when loaded)
        if node.args or any(k.arg is None for k in node.keywords):
            raise NotRecordable(f"a ModelOutput built other than by field names: {text[:80]}")
        return
    if type(f) is ast.Name and f.id == "___new":  # ___new(___nK, attr=...): a plain class (checked)
        if (len(node.args) != 1 or type(node.args[0]) is not ast.Name or not node.args[0].id.startswith("___n")
                or any(k.arg is None or not _plain_attr(k.arg) for k in node.keywords)):
            raise NotRecordable(f"an object built other than by class and attribute names: {text[:80]}")
        return
    if not ((type(f) is ast.Name and f.id in _CALLABLE_NAMES)
            or (type(f) is ast.Attribute and f.attr in _METHODS)) or node.keywords:
        raise NotRecordable(f"a call records cannot express: {text[:80]}")


_SHAPE_TUPLE = re.compile(r"\((\d+(, \d+)*,?)?\)\Z")


def _size_sources(parts: list) -> list:
    """The sources of a record's size parts (read by failure reasons and automatic
    dynamic, which also evaluate a full-shape part's expected sizes); raises
    NotRecordable for a size part of another shape than capture writes."""
    from ..shapes.policy import SCALAR

    sources = []
    for code, size_of, _ in map(_part, parts):
        if size_of is None:
            continue
        if not (isinstance(size_of, list) and len(size_of) == 2 and isinstance(size_of[0], str)):
            raise NotRecordable(f"damaged record: a size part {str(size_of)[:80]}")
        source, dim = size_of
        if dim is None:
            prefix = f"{source}.shape == "
            ok = isinstance(code, str) and code.startswith(prefix) and _SHAPE_TUPLE.match(code[len(prefix):])
        else:
            ok = dim in ("stride", SCALAR) or type(dim) is int
        if not ok:
            raise NotRecordable(f"damaged record: a size part {str(code)[:80]}")
        sources.append(source)
    return sources


def _part(part) -> tuple:
    """``(code, size_of, relation)`` of a record's guard part: ``[code, size_of]``, with a
    third item ``True`` for a ShapeEnv relation (automatic dynamic passes over a failing one)."""
    if not (isinstance(part, list) and len(part) in (2, 3) and (len(part) == 2 or part[2] is True)):
        raise NotRecordable(f"damaged record: a guard part {str(part)[:80]}")
    return part[0], part[1], len(part) == 3


def _record_guard(env: dict, parts: list, lookups: list, inputs: list, f_locals: dict):
    """``(guard, namespace, input sources)``: a record's guard built as capture builds a
    fresh frame's (:meth:`GuardBuilder.build` on the call's locals: the same generated
    check, module reads past ``nn.Module.__getattr__`` and class checks for the class
    lookups), and the graph inputs' sources as the run function reads them after the
    guard passed.  The parts, ``lookups`` (live classes) and ``inputs`` must have been
    checked (:func:`check_exprs`, :func:`_check_lookups`): the builder adds only reads
    and checks of its own making."""
    from .guards import GuardBuilder

    builder = GuardBuilder(dict(env), f_locals)
    for code, size_of, relation in map(_part, parts):
        builder.add(code, size_of=tuple(size_of) if size_of is not None else None, relation=relation)
    for cls, name in lookups:
        builder.class_lookup(cls, name)
    read = [builder.read_source(s) for s in inputs]
    with nogc():
        guard = builder.build(returns=inputs)  # as capture builds it (the run reads the inputs again)
    return guard, builder.env, read


class _UnsafeCallGuard:
    """The guard of a record whose graph mutates inputs: a call where a mutated input
    shares storage with another input fails it too (``unsafe(L)``, see ``load_compiled``).
    Same interface as :class:`~.guards.Guard`."""

    def __init__(self, guard, unsafe) -> None:
        check = guard.check
        self._guard, self._unsafe = guard, unsafe
        self.check = lambda L: check(L) and not unsafe(L)
        self.source_text = guard.source_text

    @property
    def code_parts(self) -> list:
        return self._guard.code_parts

    def failure_reason(self, f_locals):
        reason = self._guard.failure_reason(f_locals)
        if reason is None and self._unsafe(f_locals):
            return "a mutated graph input shares storage with another input"
        return reason

    def size_failures(self, f_locals):
        return self._guard.size_failures(f_locals)

    def _failing(self, f_locals):
        return self._guard._failing(f_locals)

    def __str__(self):
        return self.source_text


def _describe_names(names: set[str], env: dict, prefix: str, out: dict) -> None:
    for name in names:
        if name in ("L", "G", "___o", "___global_state") or name in _FIXED_ENV or name in _BUILTINS or name in out:
            continue
        value = env.get(name, _MISSING)
        if name.startswith("___g_") and isinstance(value, dict):
            mod = value.get("__name__")
            if isinstance(mod, str) and getattr(sys.modules.get(mod), "__dict__", None) is value:
                out[name] = ["globals", mod]
                continue
        if value is _MISSING or not name.startswith(prefix):
            raise NotRecordable(f"the guard name {name}")
        out[name] = encode(value)


# ---- the record, at the end of a capture
def describe(tx, cg, compiled, side, result_vt):
    """The frame record of a capture that ran to its end (a dict), or the reason it has
    none (a str).  Called by the root translator after its guard is built."""
    return _describe(tx, cg, compiled, side, lambda consts, seen: {"result": _value_expr(cg, result_vt, consts, seen)})


def describe_break(tx, cg, compiled, side, brk: dict):
    """The frame record of a capture that ended at a graph break (a dict), or the reason
    it has none (a str).  ``brk``: what the transformed code does after the graph (see
    ``finish_break``): ``kind`` (``call``, ``call_ex``, ``jump`` or ``native``), the
    non-NULL ``stack`` and the ``locals`` trackers handed to the resume function, the
    call's ``fn``/``args``/``kwargs`` or the branch's ``cond``/``jump_if``/``keep``, the
    native tail's ``callee`` (index into ``stack``), and the ``resume`` and ``handler``
    functions as the arguments of :func:`~.resume.resume_function` (the resume frames
    get records of their own, keyed by their generated code)."""
    if brk.get("cells"):
        return "cells live at a graph break"

    def exprs(consts, seen):
        value = lambda vt: _value_expr(cg, vt, consts, seen)  # noqa: E731
        out = {"kind": brk["kind"], "stack": [value(v) for v in brk["stack"]],
               "locals": [value(v) for v in brk["locals"]], "resume": [_resume_spec(r) for r in brk["resume"]],
               "handler": _resume_spec(brk["handler"]) if brk.get("handler") is not None else None}
        if brk["kind"] in ("call", "call_ex"):
            out["fn"] = value(brk["fn"])
            out["args"] = [value(v) for v in brk["args"]]
            out["kwargs"] = {k: value(v) for k, v in brk["kwargs"].items()}
            if not all(_plain_attr(k) or (brk["kind"] == "call_ex" and k == "**") for k in out["kwargs"]):
                raise NotRecordable("a keyword argument name records cannot hold")
        elif brk["kind"] == "jump":
            out["cond"], out["jump_if"], out["keep"] = value(brk["cond"]), bool(brk["jump_if"]), bool(brk["keep"])
        elif brk["kind"] == "native":
            out["callee"] = brk["callee"]
        else:
            raise NotRecordable(f"a graph break at {brk['kind']}")
        return {"result": None, "break": out}
    return _describe(tx, cg, compiled, side, exprs, allow_no_graph=True)


def _resume_spec(spec) -> list:
    pos, nulls, names, lineno, cells, raising = spec
    if cells:
        raise NotRecordable("cells live at a graph break")
    return [int(pos), [bool(n) for n in nulls], list(names), int(lineno), bool(raising)]


def _break_exprs(brk: dict) -> list:
    """Every expression of a record's break (checked with the guards)."""
    texts = list(brk["stack"]) + list(brk["locals"])
    if brk["kind"] in ("call", "call_ex"):
        texts += [brk["fn"], *brk["args"], *brk["kwargs"].values()]
    elif brk["kind"] == "jump":
        texts.append(brk["cond"])
    return texts


def _describe(tx, cg, compiled, side, exprs, allow_no_graph=False):
    aot_key = getattr(compiled, "aot_cache_key", None)
    if allow_no_graph and tx.output.count_ops() == 0 and not cg.outputs:
        aot_key = None  # nothing to run before the break
    elif not isinstance(aot_key, str):
        return "the compiled graph is not in the AOT autograd cache"
    out = tx.output
    if getattr(out, "hash_seeded_order", False):
        return "the iteration order of a set of strings (salted per process) was observed"
    try:
        g = out.guards
        names: dict = {}
        parts = []
        for p in g.parts:
            code = _deref_calls(p.code)
            _describe_names(check_expr(code), g.env, "___c", names)
            size_of = [_deref_calls(p.size_of[0]), p.size_of[1]] if p.size_of is not None else None
            parts.append([code, size_of, True] if p.relation else [code, size_of])
        inputs = [_deref_calls(i.source) for i in out.inputs] if aot_key is not None else []
        for s in inputs:
            _describe_names(check_expr(s), g.env, "___c", names)
        consts: dict = {}
        rec = exprs(consts, set())
        stores = _describe_side_effects(tx, consts) if side is not None else []
        for name, value in consts.items():
            g.env[name] = value
        texts = ([rec["result"]] if rec["result"] is not None else []) + (
            _break_exprs(rec["break"]) if "break" in rec else [])
        for text in texts:
            _describe_names(check_expr(text), g.env, "___", names)
        for target, _, value_name in stores:
            _describe_names(check_expr(target) | {value_name}, g.env, "___", names)
        inlined = _describe_inlined(tx.fn.__code__, getattr(out, "inlined", ()), g.env)
        lookups = _describe_lookups(g._lookups)
    except NotRecordable as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - describing must never break a capture
        return f"{type(e).__name__}: {e}"
    return {"aot_key": aot_key, "guards": parts, "inputs": inputs, "names": names, "inlined": inlined,
            "lookups": lookups, "stores": stores, **rec}


def _describe_side_effects(tx, consts: dict) -> list:
    """The frame's side effects as ``[target source, attribute, constant name]`` stores
    (transformers' ``CompileableContextVar`` resets: ``obj.global_var = None``); raises
    NotRecordable for any other kind (globals, cells, container contents, computed
    values, a grad mode left changed)."""
    from .variables.base import ConstantVariable

    if tx.leave_grad != tx.initial_grad:
        raise NotRecordable("a grad-mode change to replay")
    effects = tx.output.side_effects
    stores = []
    for op in effects.ops:
        if op[0] != "attr":
            raise NotRecordable(f"a side effect to replay ({op[0]})")
        obj_vt, attr = op[1], op[2]
        value_vt = effects.attr_values[(id(obj_vt), attr)][1]
        target = getattr(obj_vt, "source", None)
        if not isinstance(target, str) or not _plain_attr(attr):
            raise NotRecordable(f"a side effect on an object without a source ({attr})")
        if type(value_vt) is not ConstantVariable:
            raise NotRecordable(f"a side effect storing a computed value ({attr})")
        encode(value_vt.value)
        name = f"___s{len(consts)}"
        consts[name] = value_vt.value
        stores.append([target, attr, name])
    return stores


def _plain_attr(name) -> bool:
    return isinstance(name, str) and name.isidentifier() and not name.startswith("__")


def _is_model_output(cls) -> bool:
    """``cls`` is a transformers ``ModelOutput`` (the one class a record may call)."""
    base = getattr(sys.modules.get("transformers.utils.generic"), "ModelOutput", None)
    return isinstance(cls, type) and base is not None and issubclass(cls, base)


class _DerefCalls(ast.NodeTransformer):
    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if (not node.args and not node.keywords and isinstance(f, ast.Subscript)
                and isinstance(f.value, ast.Attribute) and f.value.attr == "_flat_weight_refs"):
            return ast.Call(ast.Name("___deref", ast.Load()), [f], [])
        return node


def _deref_calls(code: str) -> str:
    """``X._flat_weight_refs[i]()`` (a call of a weak reference, which the grammar has no
    form for) as ``___deref(X._flat_weight_refs[i])``, which calls weak references only."""
    if "_flat_weight_refs[" not in code:
        return code
    return ast.unparse(_DerefCalls().visit(ast.parse(code, mode="eval")))


def _source_first_reconstructs() -> frozenset:
    """The trackers' ``reconstruct`` methods that read ``vt.source`` when it has one (the
    value as the frame found it; its mutations would be side effects, not recorded)."""
    from .variables.base import VariableTracker
    from .variables.builtin import BuiltinVariable
    from .variables.containers import BaseListVariable, DequeVariable, DictVariable, SetVariable
    from .variables.functions import UserFunctionVariable
    from .variables.nn_module import NNModuleVariable
    from .variables.user_defined import ModelOutputVariable, UserDefinedClassVariable, UserDefinedObjectVariable

    return frozenset(c.reconstruct for c in (VariableTracker, BuiltinVariable, BaseListVariable, DequeVariable,
                                             DictVariable, SetVariable, UserFunctionVariable, NNModuleVariable,
                                             ModelOutputVariable, UserDefinedClassVariable, UserDefinedObjectVariable))


def _value_reconstructs() -> tuple:
    """``(always, sourceless)``: the ``reconstruct`` methods that give the tracker's
    ``value`` itself always, and those that give it when the tracker has no source."""
    from .variables.builtin import BuiltinVariable
    from .variables.functions import UserFunctionVariable
    from .variables.torch_fns import TorchVariable
    from .variables.user_defined import PythonModuleVariable, UserDefinedClassVariable, UserDefinedObjectVariable

    return (frozenset((TorchVariable.reconstruct, PythonModuleVariable.reconstruct)),
            frozenset(c.reconstruct for c in (BuiltinVariable, UserFunctionVariable, UserDefinedClassVariable,
                                              UserDefinedObjectVariable)))


def _const_expr(value, consts: dict) -> str:
    if _plain(value) and _same(ast.literal_eval(repr(value)), value):
        return repr(value)
    encode(value)
    name = f"___r{len(consts)}"
    consts[name] = value
    return name


def _value_expr(cg, vt, consts: dict, seen: set) -> str:
    """``vt``'s value at run time as an expression over ``L``, ``G``, the graph outputs
    ``___o`` and constants (added to ``consts``), giving what capture's recipe for ``vt``
    gives (:meth:`RuntimeCodegen.recipe`); raises NotRecordable for any other tracker."""
    from .variables.base import ConstantVariable, MethodVariable
    from .variables.containers import ListVariable, SizeVariable, TupleVariable
    from .variables.tensor import SymNodeVariable, TensorVariable

    if isinstance(vt, LazyLocal):
        return vt.source
    cls = type(vt)
    if cls is TensorVariable or cls is SymNodeVariable:  # both rebuilt as graph outputs
        if vt.node.op == "placeholder" and vt.source is not None:
            return vt.source
        idx = cg._out_index.get(vt.node)
        if idx is None:
            raise NotRecordable("a tensor that is not a graph output")
        return f"___o[{idx}]"
    if cls is ConstantVariable:
        return _const_expr(vt.value, consts)
    reconstruct = cls.reconstruct
    if cls in (TupleVariable, ListVariable, SizeVariable):
        if cls is not SizeVariable and vt.source is not None:
            return vt.source
        if id(vt) in seen:
            raise NotRecordable("one container twice in the result")
        seen.add(id(vt))
        items = [_value_expr(cg, i, consts, seen) for i in vt.items]
        if cls is ListVariable:
            return "[" + ", ".join(items) + "]"
        text = "(" + "".join(i + ", " for i in items) + ")"
        return f"___Size({text})" if cls is SizeVariable else text
    if cls.__name__ == "ModelOutputVariable" and _is_model_output(vt.cls):
        if vt.source is not None:
            return vt.source
        if id(vt) in seen:
            raise NotRecordable("one ModelOutput twice in the result")
        seen.add(id(vt))
        encode(vt.cls)
        name = f"___m{len(consts)}"
        consts[name] = vt.cls
        fields = [f"{k}={_value_expr(cg, v, consts, seen)}" for k, v in vt.fields.items()]
        if not all(_plain_attr(k) for k in vt.fields):
            raise NotRecordable("a ModelOutput field name records cannot hold")
        return f"{name}(" + ", ".join(fields) + ")"
    if cls.__name__ == "DictVariable" and vt.source is None and vt.user_cls is dict:
        if id(vt) in seen:
            raise NotRecordable("one dict twice in the result")
        seen.add(id(vt))
        pairs = [f"{_value_expr(cg, k, consts, seen)}: {_value_expr(cg, v, consts, seen)}" for k, v in vt.items.values()]
        return "{" + ", ".join(pairs) + "}"
    if cls.__name__ == "NewObjectVariable" and _plain_class(vt.cls):
        if id(vt) in seen:
            raise NotRecordable("one new object twice in the result")
        seen.add(id(vt))
        if not all(_plain_attr(k) for k in vt.attrs):
            raise NotRecordable("an attribute name records cannot hold")
        encode(vt.cls)
        name = f"___n{len(consts)}"
        consts[name] = vt.cls
        return f"___new({name}" + "".join(f", {k}={_value_expr(cg, v, consts, seen)}" for k, v in vt.attrs.items()) + ")"
    if isinstance(getattr(vt, "source", None), str) and reconstruct in _source_first_reconstructs():
        return vt.source
    if cls is MethodVariable and _plain_attr(vt.name):
        return f"{_value_expr(cg, vt.obj, consts, seen)}.{vt.name}"
    always, sourceless = _value_reconstructs()
    if reconstruct in always or (getattr(vt, "source", None) is None and reconstruct in sourceless):
        return _const_expr(vt.value, consts)
    raise NotRecordable(f"a {cls.__name__} in the frame's result")


def _nested(code: types.CodeType, into: set) -> None:
    into.add(code)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _nested(c, into)


def _defaults(fn) -> list:
    """A function's defaults as data (capture may have used them without a guard)."""
    fn = getattr(fn.fget if isinstance(fn, property) else fn, "__func__", fn)
    kw = getattr(fn, "__kwdefaults__", None)
    return encode([getattr(fn, "__defaults__", None) or (), sorted(kw.items()) if kw else []])


def _makes_without_defaults(outer: types.CodeType, code: types.CodeType) -> bool:
    """``outer`` makes its closures of ``code`` without defaults (MAKE_FUNCTION's flags):
    every function of that code has none, so the record need not check them."""
    import dis

    seen = False
    for ins in dis.get_instructions(outer):
        if ins.opname == "LOAD_CONST" and ins.argval is code:
            seen = True
        elif seen and ins.opname == "MAKE_FUNCTION":
            return not (ins.arg & 0x03)
    return False


def _nested_inlined(module, code: types.CodeType, defaults_guarded: bool = False):
    """An inlined local function (a decorator's ``wrapper``) as ``["<nested>", module, outer
    qualname, path, digest, outer digest]``, or None.  Its code is found in its named outer
    function's constants; the outer digest pins how closures are made (no defaults), or
    every inlining read the function's defaults through a source (guarded)."""
    if not isinstance(module, str) or ".<locals>." not in code.co_qualname:
        return None
    outer_name = code.co_qualname.split(".<locals>.", 1)[0]
    outer = _code_of(_resolve(module, outer_name))
    path = _const_path(outer, code)
    if path is None:
        return None
    parent = outer
    for i in path[:-1]:
        parent = parent.co_consts[i]
    if not defaults_guarded and not _makes_without_defaults(parent, code):  # the function that makes the closures
        return None
    return ["<nested>", module, outer_name, path, code_digest(code), code_digest(outer)]


def _mro_attr(cls, name):
    for klass in getattr(cls, "__mro__", ()):
        if name in klass.__dict__:
            return klass.__dict__[name]
    return _MISSING


def _class_attr_inlined(code: types.CodeType, classes: list):
    """An inlined function that is a class attribute of a guarded class (a method made by a
    decorator: transformers' ``@dynamic_rope_update`` forward, whose qualname is
    ``dynamic_rope_update.<locals>.wrapper``) as ``["<attr>", class module, class
    qualname, attribute, digest, defaults, unwrap depth]``, or None.  The live function is
    found the same way when loaded, so its own defaults are compared too."""
    for cls in classes:
        for klass in cls.__mro__:
            for attr, value in list(klass.__dict__.items()):
                for depth in range(_MAX_WRAPPED + 1):
                    fn = _unwrapped(value, depth)
                    if fn is _MISSING:
                        break
                    if _code_of(fn) is code and _mro_attr(cls, attr) is value and _plain_attr(attr):
                        return ["<attr>", cls.__module__, cls.__qualname__, attr, code_digest(code), _defaults(fn), depth]
    return None


def _describe_inlined(root: types.CodeType, inlined, env: dict | None = None) -> list:
    covered: set = set()
    _nested(root, covered)
    located = []
    unlocated = []
    guarded: dict = {}
    for code, _, defaults_guarded in inlined:
        guarded[code] = guarded.get(code, True) and defaults_guarded
    for code, f_globals in {code: g for code, g, _ in inlined}.items():
        if code in covered:
            continue
        module = f_globals.get("__name__") if isinstance(f_globals, dict) else None
        if isinstance(module, str) and module.split(".")[0] == "torchkiln":
            continue  # polyfills: covered by the torchkiln version
        named = _resolve(module, code.co_qualname) if isinstance(module, str) else _MISSING
        for depth in range(_MAX_WRAPPED + 1):  # a decorated method: its own code is __wrapped__'s
            fn = _unwrapped(named, depth)
            if _code_of(fn) is code:
                located.append([module, code.co_qualname, code_digest(code), _defaults(fn), depth])
                _nested(code, covered)
                break
        else:
            nested = _nested_inlined(module, code, guarded[code])
            if nested is None and env:  # a class attribute of a class the guards name
                nested = _class_attr_inlined(code, [v for v in env.values() if isinstance(v, type)
                                                    and _resolve(v.__module__, v.__qualname__) is v])
            if nested is not None:
                located.append(nested)
                _nested(code, covered)
            else:
                unlocated.append(code)
    for code in unlocated:
        if code not in covered:
            raise NotRecordable(f"inlined {code.co_qualname}, which cannot be found by name")
    return located


# ---- class lookups (GuardBuilder.class_lookup): what each resolved to, as data
_C_DESCRIPTORS = (types.MethodDescriptorType, types.WrapperDescriptorType, types.GetSetDescriptorType,
                  types.MemberDescriptorType, types.BuiltinFunctionType, types.ClassMethodDescriptorType,
                  types.MethodWrapperType)


def _value_desc(v, depth: int = 0):
    """A class attribute capture relied on, as data that is equal in another process
    exactly when the attribute is the same there: a function by its module, code digest,
    defaults and closure; property/staticmethod/classmethod by their functions; constants
    and named objects by :func:`encode`; a C-level descriptor or a value of a torch or
    builtin class by its type (pinned by the versions in the frame key).  Raises
    NotRecordable for anything else."""
    if v is None:
        return None
    if isinstance(v, types.FunctionType):
        if depth > 3:  # a deep chain of closures: the inner functions by their code
            return ["fn", v.__module__, code_digest(v.__code__)]
        cells = [_value_desc(c.cell_contents, depth + 1) if isinstance(c.cell_contents, types.FunctionType)
                 else _cell_desc(c) for c in v.__closure__ or ()]
        return ["fn", v.__module__, code_digest(v.__code__), _defaults(v), cells]
    if isinstance(v, property):
        return ["property", _value_desc(v.fget, depth + 1), _value_desc(v.fset, depth + 1), _value_desc(v.fdel, depth + 1)]
    if isinstance(v, (staticmethod, classmethod)):
        return [type(v).__name__, _value_desc(v.__func__, depth + 1)]
    try:
        return ["const", encode(v)]
    except NotRecordable:
        pass
    t = type(v)
    if isinstance(v, _C_DESCRIPTORS) or t.__module__.split(".")[0] in ("torch", "builtins"):
        return ["opaque", t.__module__, t.__qualname__]
    raise NotRecordable(f"a class attribute that cannot be described: {t.__qualname__}")


def _cell_desc(cell):
    try:
        return encode(cell.cell_contents)
    except ValueError:  # an empty cell
        return ["empty"]
    except NotRecordable:
        t = type(cell.cell_contents)
        if t.__module__.split(".")[0] in ("torch", "builtins"):
            return ["opaque", t.__module__, t.__qualname__]
        raise


def _lookup_desc(cls, name: str):
    """What ``name`` resolves to through ``cls.__mro__``: ``[owner, value]`` (None: not
    found); a value on a class whose dict cannot change is not described."""
    from .guard_reads import _IMMUTABLE_TYPE

    for c in cls.__mro__:
        if name in c.__dict__:
            if c.__flags__ & _IMMUTABLE_TYPE:
                return [encode(c), ["fixed"]]
            return [encode(c), _value_desc(c.__dict__[name])]
    return None


def _describe_lookups(lookups: dict) -> list:
    """``[[class, name, resolution], ...]`` of every class lookup capture relied on
    (classes whose dicts cannot change left out, as their guard does)."""
    from .guard_reads import fixed_class

    out = []
    for cls, names in lookups.items():
        if fixed_class(cls):
            continue
        desc = encode(cls)
        for name in sorted(names):
            out.append([desc, name, _lookup_desc(cls, name)])
    return out


def _check_lookups(lookups: list) -> list:
    """``[(class, name), ...]`` of a record's class lookups, each resolving as it did when
    the record was saved; raises _Bypass for one that changed."""
    out = []
    for item in lookups:
        desc, name, resolved = item
        cls = decode(desc)
        if not isinstance(cls, type) or not isinstance(name, str):
            raise NotRecordable(f"damaged record: a class lookup {str(item)[:80]}")
        try:
            same = _lookup_desc(cls, name) == resolved
        except NotRecordable:
            same = False
        if not same:
            raise _Bypass(f"changed source: {cls.__qualname__}.{name} (a class attribute)")
        out.append((cls, name))
    return out


# ---- saving and loading
def _bypass(reason: str, frame: str = "") -> None:
    counters["warm_start"]["bypass"] += 1
    counters["warm_start_bypass"][reason.split(":")[0]] += 1
    log.info("warm start bypass: %s%s", reason, f" [{frame}]" if frame else "")


def _read(key: str) -> list | None:
    from ..cache import entry as cache_entry, get_store

    payload = get_store().get(NAMESPACE, key)
    if payload is None:
        return None
    body, _ = cache_entry.unpack(payload)
    if body.get("format") != FORMAT or not isinstance(body.get("records"), list):
        raise _Bypass("a record of another format")
    return body["records"]


def record(key: str, entry: CacheEntry) -> None:
    """Save ``entry``'s frame record (``entry.warm``, set by capture) under ``key``."""
    _captured.add(key)
    rec = getattr(entry, "warm", None)
    if not isinstance(rec, dict):
        counters["warm_start"]["not_recordable"] += 1
        log.info("warm start: frame not recorded: %s", rec or "graph breaks or no graph")
        return
    try:
        records = _read(key) or []
    except Exception:  # noqa: BLE001 - a damaged list is replaced
        records = []
    same = lambda r: r.get("guards") == rec["guards"] and r.get("lookups") == rec["lookups"]  # noqa: E731
    records = [rec] + [r for r in records if not same(r)][:MAX_RECORDS - 1]
    from ..cache import entry as cache_entry, get_store

    get_store().put(NAMESPACE, key, cache_entry.pack({"format": FORMAT, "records": records}))
    counters["warm_start"]["saved"] += 1


def lookup(fn: types.FunctionType, f_locals: dict, backend, fullgraph: bool, dynamic, compile_wrapper=None) -> tuple:
    """``(entry, key)``: an entry installed from a frame record whose guards pass on
    ``f_locals`` (or None: capture), and the frame key to record the capture under
    (None: this frame is not recorded).  Never raises."""
    protocol = _protocol(backend)
    if protocol is None:
        return None, None
    try:
        key = frame_key(fn, protocol, fullgraph, dynamic)
    except Exception as e:  # noqa: BLE001
        log.info("warm start: no frame key for %s (%s: %s)", fn.__qualname__, type(e).__name__, e)
        return None, None
    if key in _captured:
        return None, key
    try:
        records = _read(key)
    except Exception as e:  # noqa: BLE001 - CorruptEntry, a foreign format...
        _bypass(f"damaged record: {type(e).__name__}: {e}")
        return None, key
    if records is None:
        counters["warm_start"]["miss"] += 1
        log.info("warm start miss: %s (%s)", fn.__qualname__, key)
        return None, key
    reason = "no record"
    for rec in records:
        try:
            entry = _install(fn, f_locals, rec, protocol, compile_wrapper)
        except _Bypass as b:
            reason = str(b)
            continue
        except NotRecordable as e:
            reason = f"damaged record: {e}"
            continue
        except Exception as e:  # noqa: BLE001
            reason = f"damaged record: {type(e).__name__}: {e}"
            continue
        counters["warm_start"]["hit"] += 1
        log.debug("warm start hit: %s (%s)", fn.__qualname__, key)
        return entry, key
    _bypass(reason, fn.__qualname__)
    return None, key


def _check_inlined(fn_, digest: str, defaults, name: str) -> None:
    """Raises _Bypass unless the live inlined function ``fn_`` has the recorded code and defaults."""
    code = _code_of(fn_)
    if not isinstance(code, types.CodeType) or code_digest(code) != digest:
        raise _Bypass(f"changed source: inlined {name}")
    try:
        same = _defaults(fn_) == defaults
    except NotRecordable:
        same = False
    if not same:
        raise _Bypass(f"changed source: the defaults of {name}")


def _install(fn, f_locals, rec: dict, protocol, compile_wrapper=None) -> CacheEntry:
    from .guards import global_state

    for item in rec["inlined"]:
        if item[0] == "<attr>":  # a class attribute: the live function, its code and defaults
            _, module, qualname, attr, digest, defaults, depth = item
            if type(depth) is not int or not 0 <= depth <= _MAX_WRAPPED or not _plain_attr(attr):
                raise NotRecordable(f"damaged record: {str(item)[:80]}")
            cls = _resolve(module, qualname)
            fn_ = _unwrapped(_mro_attr(cls, attr), depth) if isinstance(cls, type) else _MISSING
            _check_inlined(fn_, digest, defaults, f"{module}.{qualname}.{attr}")
            continue
        if item[0] == "<nested>":  # a local function: its outer function's code and its own
            _, module, outer_name, path, digest, outer_digest = item
            outer = _code_of(_resolve(module, outer_name))
            if not isinstance(outer, types.CodeType) or code_digest(outer) != outer_digest:
                raise _Bypass(f"changed source: inlined {module}.{outer_name}")
            decode(["nested_code", module, outer_name, path, digest])
            continue
        module, qualname, digest, defaults, depth = item
        if type(depth) is not int or not 0 <= depth <= _MAX_WRAPPED:
            raise NotRecordable(f"damaged record: a wrapper depth {depth!r}")
        _check_inlined(_unwrapped(_resolve(module, qualname), depth), digest, defaults, f"{module}.{qualname}")
    env = {"G": fn.__globals__, "___global_state": global_state, **_FIXED_ENV}
    for name, d in rec["names"].items():
        if d[0] == "globals":
            mod = sys.modules.get(d[1])
            if mod is None:
                raise _Bypass(f"a guarded constant no longer resolves: module {d[1]}")
            env[name] = mod.__dict__
        else:
            env[name] = decode(d)
        if name.startswith("___m") and not _is_model_output(env[name]):
            raise NotRecordable(f"{name} is not a ModelOutput class")
        if name.startswith("___n") and not _plain_class(env[name]):
            raise NotRecordable(f"{name} is not a plain class")
    stores = rec["stores"]
    for store in stores:
        if not (isinstance(store, list) and len(store) == 3 and _plain_attr(store[1])
                and isinstance(store[2], str) and store[2].startswith("___s") and store[2] in env):
            raise NotRecordable(f"a side effect records cannot hold: {str(store)[:80]}")
    brk = rec.get("break")
    if brk is not None:
        _check_break(brk, compile_wrapper)
    result = [] if brk is not None else [rec["result"]]
    lookups = _check_lookups(rec["lookups"])
    parts = rec["guards"]
    check_exprs([code for code, _, _ in map(_part, parts)] + _size_sources(parts) + list(rec["inputs"]) + result
                + (_break_exprs(brk) if brk is not None else []) + [store[0] for store in stores])
    guard, env, inputs = _record_guard(env, parts, lookups, rec["inputs"], f_locals)
    if not guard.check(f_locals):
        raise _Bypass(f"guard failed: {guard.failure_reason(f_locals)}")
    if brk is not None and rec["aot_key"] is None and not inputs:
        compiled = None  # no graph before the break
    else:
        compiled = protocol.load(rec["aot_key"])
        if compiled is None:
            raise _Bypass("graph not in the cache")
    unsafe_call = getattr(compiled, "unsafe_call", None)
    if unsafe_call is not None:  # the graph mutates inputs: aliased ones make the guard fail
        inputs_of = _inputs_function(inputs, env)
        guard = _UnsafeCallGuard(guard, lambda L: unsafe_call(inputs_of(L)))
        if not guard.check(f_locals):
            raise _Bypass(f"guard failed: {guard.failure_reason(f_locals)}")
    if brk is not None:
        run = _break_run_function(fn, compiled, inputs, brk, env, stores, compile_wrapper)
    else:
        run = _run_function(compiled, inputs, rec["result"], env, stores)
    entry = CacheEntry(guard=guard, fn=lambda *args, **kwargs: run(bind_locals(fn, args, kwargs)), run=run)
    entry.warm = rec
    return entry


def _inputs_function(inputs: list, env: dict):
    """``___inputs(L)``: the graph inputs, read from the frame's locals by their sources."""
    hoisted = hoist_shared_prefixes(inputs)
    lines = ["def ___inputs(L):"]
    lines += ["    " + line for setup, _ in hoisted for line in setup]
    lines.append("    return (" + "".join(code + ", " for _, code in hoisted) + ")")
    namespace = dict(env)
    exec(compile("\n".join(lines) + "\n", "<torchkiln warm start>", "exec"), namespace)  # noqa: S102 - checked
    return namespace["___inputs"]


def _run_function(compiled, inputs: list, result: str, env: dict, stores: list = ()):
    """``___run(L)``: the graph on the inputs, the result built from its outputs, then the
    side effects replayed (constants stored; the result reads no source they change:
    capture reads every source before replaying, so the result is built first here)."""
    hoisted = hoist_shared_prefixes(inputs)
    lines = ["def ___run(L):"]
    lines += ["    " + line for setup, _ in hoisted for line in setup]
    lines.append("    ___o = ___compiled(" + "".join(code + ", " for _, code in hoisted) + ")")
    if stores:
        lines.append(f"    ___result = {result}")
        lines += [f"    ___setattr({target}, {attr!r}, {value})" for target, attr, value in stores]
        lines.append("    return ___result")
    else:
        lines.append(f"    return {result}")
    namespace = dict(env, ___compiled=compiled, ___setattr=setattr)
    exec(compile("\n".join(lines) + "\n", "<torchkiln warm start>", "exec"), namespace)  # noqa: S102 - checked
    return namespace["___run"]


_BREAK_KINDS = {"call": 1, "call_ex": 1, "jump": 2, "native": 1}  # resume functions per kind


def _check_break(brk, compile_wrapper) -> None:
    """Raises NotRecordable unless ``brk`` has the shape :func:`describe_break` writes."""
    def spec_ok(spec):
        return (isinstance(spec, list) and len(spec) == 5 and type(spec[0]) is int and spec[0] >= 0
                and isinstance(spec[1], list) and all(type(n) is bool for n in spec[1])
                and isinstance(spec[2], list) and all(isinstance(n, str) and n.isidentifier() for n in spec[2])
                and type(spec[3]) is int and type(spec[4]) is bool)

    kind = brk.get("kind") if isinstance(brk, dict) else None
    ok = (kind in _BREAK_KINDS and compile_wrapper is not None
          and isinstance(brk.get("stack"), list) and isinstance(brk.get("locals"), list)
          and isinstance(brk.get("resume"), list) and len(brk["resume"]) == _BREAK_KINDS[kind]
          and all(spec_ok(r) and not r[4] for r in brk["resume"])
          and (brk.get("handler") is None or spec_ok(brk["handler"]) and brk["handler"][4] and kind != "native"))
    if ok and kind in ("call", "call_ex"):
        ok = (isinstance(brk.get("args"), list) and isinstance(brk.get("kwargs"), dict)
              and all(_plain_attr(k) or (kind == "call_ex" and k == "**") for k in brk["kwargs"])
              and (kind == "call" or len(brk["args"]) == 1))
    elif ok and kind == "jump":
        ok = type(brk.get("jump_if")) is bool and type(brk.get("keep")) is bool
    elif ok and kind == "native":
        ok = brk.get("callee") is None or type(brk["callee"]) is int and 0 <= brk["callee"] < len(brk["stack"])
    if not ok:
        raise NotRecordable(f"a graph break records cannot hold: {str(brk)[:80]}")


def _break_run_function(fn, compiled, inputs: list, brk: dict, env: dict, stores, compile_wrapper):
    """``___run(L)`` of a frame that graph-breaks (capture's ``codegen.breaking_code``):
    the graph, the values handed on, the constant stores, then the breaking call or
    branch in Python and the resume function (made again from ``fn``'s code: the
    same as capture made; it is a frame of its own, with its own records)."""
    from .codegen import wrap_callee
    from .resume import resume_function

    hoisted = hoist_shared_prefixes(inputs)
    kind = brk["kind"]
    lines = ["def ___values(L):"]
    lines += ["    " + line for setup, _ in hoisted for line in setup]
    lines.append("    ___o = ___compiled(" + "".join(code + ", " for _, code in hoisted) + ")"
                 if compiled is not None else "    ___o = ()")
    lines.append("    ___stack = [" + ", ".join(brk["stack"]) + "]")
    lines.append("    ___locals = [" + ", ".join(brk["locals"]) + "]")
    if kind in ("call", "call_ex"):
        lines.append(f"    ___fn = {brk['fn']}")
        lines.append("    ___args = [" + ", ".join(brk["args"]) + "]")
        lines.append("    ___kw = {" + ", ".join(f"{k!r}: {v}" for k, v in brk["kwargs"].items()) + "}")
        tail = "(___stack, ___locals, ___fn, ___args, ___kw)"
    elif kind == "jump":
        tail = f"(___stack, ___locals, {brk['cond']})"
    else:
        tail = "(___stack, ___locals)"
    lines.append(f"    ___values = {tail}")
    lines += [f"    ___setattr({target}, {attr!r}, {value})" for target, attr, value in stores]
    lines.append("    return ___values")
    namespace = dict(env, ___compiled=compiled, ___setattr=setattr)
    exec(compile("\n".join(lines) + "\n", "<torchkiln warm start>", "exec"), namespace)  # noqa: S102 - checked
    values_of = namespace["___values"]

    def make(spec, wrap=True):
        pos, nulls, names, lineno, raising = spec
        rfn = resume_function(fn, pos, nulls, names, lineno, (), raising)
        return compile_wrapper(rfn) if wrap else rfn

    handler = make(brk["handler"]) if brk.get("handler") is not None else None
    if kind == "jump":
        on_jump, fall = make(brk["resume"][0]), make(brk["resume"][1])
        jump_if, keep = brk["jump_if"], brk["keep"]

        def step(v):
            value = v[2]
            if bool(value) == jump_if:
                return (v[0] + [value] if keep else v[0]), on_jump
            return v[0], fall
    elif kind == "native":
        resume, callee = make(brk["resume"][0], wrap=False), brk.get("callee")

        def step(v):
            if callee is not None:
                v[0][callee] = wrap_callee(v[0][callee], compile_wrapper)
            return v[0], resume
    else:
        resume, star = make(brk["resume"][0]), kind == "call_ex"

        def step(v):
            target = wrap_callee(v[2], compile_wrapper)
            if star:
                result = target(*v[3][0], **(v[4]["**"] if v[4] else {}))
            else:
                result = target(*v[3], **v[4])
            return v[0] + [result], resume

    def run(L):
        v = values_of(L)
        try:
            after, resume_ = step(v)
        except BaseException as e:
            if handler is None:
                raise
            exc = e
        else:
            return resume_(*after, *v[1])
        return handler(exc, *v[0], *v[1])  # outside the except block, as capture's breaking_code
    return run


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
