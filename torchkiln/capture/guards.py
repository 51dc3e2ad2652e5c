"""Guards: the conditions under which a captured graph may be reused.

As TorchDynamo does, capture installs a guard whenever it reads a value from a source
and specialises on it: tensor metadata (TENSOR_MATCH: dtype, device, rank, sizes —
only the static ones when some are symbolic —, strides, requires_grad), argument
aliasing (``L['a'] is L['b']``), Python constants (EQUALS_MATCH), types (TYPE_MATCH),
object identity (ID_MATCH), None-ness, container lengths and dict keys, the global grad
mode, and ShapeEnv's guards on symbolic sizes.  All parts are compiled into ONE
generated Python function per cache entry (``Guard.check``); ``Guard.failure_reason``
re-runs them one at a time and names the first failing one the field's way, e.g.
``tensor 'L['y']' requires_grad mismatch. expected requires_grad=1``.
"""
from __future__ import annotations

import ast
import math
import re
import types

import torch

from ..shapes.policy import SCALAR, scalar_source
from .guard_reads import ModuleReads, module_read_codes
from .source import hoist_shared_prefixes

_DTYPE_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
                torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
                torch.complex128: "ComplexDouble"}


class GuardPart:
    """One printable check; ``reason(L)`` explains a failure (default: the code)."""

    def __init__(self, code: str, reason=None, size_of=None, relation=False):
        self.code = code
        self.reason = reason
        self.size_of = size_of  # (source, dim) when this part checks one size (or an int: SCALAR) only
        self.relation = relation  # a ShapeEnv guard: a relation between (or range of) symbolic sizes
        self.env: dict | None = None  # the guard namespace, set by GuardBuilder.build
        self._fn = None
        self._shown = None

    @property
    def fn(self):
        """``fn(L) -> bool``: this part alone (compiled on first use: only a failing
        guard's reason needs it)."""
        if self._fn is None:
            self._fn = eval(f"lambda L: {self.code}", self.env)
        return self._fn

    @property
    def shown(self) -> str:
        """The code as logs print it: ``___cN`` constants by value, torch names spelled out."""
        if self._shown is None:
            env = self.env or {}
            text = re.sub(r"___c\d+", lambda m: _pretty(env.get(m.group(0))), self.code)
            self._shown = (text.replace("___Tensor", "torch.Tensor").replace("___is_grad_enabled", "torch.is_grad_enabled")
                           .replace("___get_default_dtype", "torch.get_default_dtype")
                           .replace("___copysign", "math.copysign")
                           .replace("___inf", "math.inf"))
        return self._shown


KEYED_LISTS = "_torchkiln_keyed_tensor_lists"
_KEYED_SOURCE = re.compile(r"L\['(\w+)'\]\[\d+\]")


def mark_keyed_inputs(fn, *names: str) -> None:
    """Declare that every call of ``fn`` gets, in each argument ``names[i]``, a list of
    distinct tensors whose dtype, device and requires_grad its caller's own cache key
    already fixed: the autograd engine's lifted inputs handed to a compiled backward,
    where the engine's key holds these three of every lifted tensor and its inputs are
    distinct tensors (``CompiledNodeArgs::collect(TensorArg)``).  The guard of a frame of
    ``fn`` then checks neither those three per ``L[name][i]`` nor that they are
    distinct; type, sizes and strides stay guarded (the engine's key lacks them)."""
    setattr(fn, KEYED_LISTS, tuple(names))


def keyed_by_caller(fn, source: str) -> bool:
    """Whether ``source`` is an item of a list :func:`mark_keyed_inputs` declared for ``fn``."""
    names = getattr(fn, KEYED_LISTS, ())
    if not names:
        return False
    m = _KEYED_SOURCE.fullmatch(source)
    return m is not None and m.group(1) in names


class GuardBuilder:
    """Collects guard parts while tracing; ``build()`` generates the guard function."""

    def __init__(self, env: dict, f_locals: dict | None = None):
        self.env = env  # names the generated code may use: G, ___g_<mod>, constants
        self.f_locals = f_locals  # the frame's values at capture: module reads are planned on them
        self._reads = None  # guard_reads.ModuleReads, made on first use
        self.parts: list[GuardPart] = []
        self._seen: set[str] = set()
        # past the constants ``env`` names already (a warm-start record's ``___c<n>``)
        self._consts = 1 + max((int(k[4:]) for k in env if k[:4] == "___c" and k[4:].isdigit()), default=-1)
        self.tensor_sources: list[str] = []
        self.keyed_sources: set[str] = set()  # tensor_match(keyed=True)
        self.stride_sources: set[str] = set()  # tensor_match with every stride checked
        self._lookups: dict[type, set[str]] = {}  # class -> names capture looked up on it
        self._by_id: dict[int, str] = {}  # id(value) -> its constant name (the env keeps it alive)

    def class_lookup(self, cls, name: str) -> None:
        """Capture decided something from what ``name`` resolves to through ``cls.__mro__``
        (a method it inlined, a property, a class attribute, a dunder's presence): the
        guard checks per call that the lookup still finds the same object (or nothing)."""
        if isinstance(cls, type) and isinstance(name, str):
            self._lookups.setdefault(cls, set()).add(name)

    def const(self, value) -> str:
        """A name in the guard namespace bound to ``value`` (for ``is`` checks)."""
        name = f"___c{self._consts}"
        self._consts += 1
        self.env[name] = value
        return name

    def _module_reads(self):
        if self._reads is None and self.f_locals is not None:
            self._reads = ModuleReads(self.f_locals, self.env, self.const, [p.code for p in self.parts])
        return self._reads

    def read_source(self, source: str) -> str:
        """``source`` as code that runs right after this guard passed may read it: module
        reads past ``nn.Module.__getattr__`` (see :mod:`.guard_reads`; the guard then
        checks what that relies on).  Call before :meth:`build`."""
        reads = self._module_reads()
        return source if reads is None or self.f_locals is None else reads.source(source)

    def _value_of(self, source: str, default=None):
        """The value ``source`` names in the frame being captured (``default`` when it
        cannot be read here)."""
        if self.f_locals is None:
            return default
        try:
            return eval(f"lambda L: {source}", self.env)(self.f_locals)
        except Exception:  # noqa: BLE001
            return default

    def source_has_attr(self, source: str, name: str) -> bool | None:
        """``hasattr`` of the value ``source`` names in the frame being captured (None
        when that value cannot be read here)."""
        if self.f_locals is None:
            return None
        try:
            return hasattr(eval(f"lambda L: {source}", self.env)(self.f_locals), name)
        except Exception:  # noqa: BLE001
            return None

    def add(self, code: str, reason=None, size_of=None, relation=False) -> None:
        if code in self._seen:
            return
        self._seen.add(code)
        self.parts.append(GuardPart(code, reason, size_of, relation))

    # -- guard kinds --------------------------------------------------------------------
    def _named(self, value) -> str:
        """One constant name per object for identity checks (so the same check read twice
        is one part)."""
        name = self._by_id.get(id(value))
        if name is None or self.env.get(name) is not value:
            name = self._by_id[id(value)] = self.const(value)
        return name

    def type_match(self, source: str, value) -> None:
        self.add(f"type({source}) is {self._named(type(value))}")

    def id_match(self, source: str, value) -> None:
        self.add(f"{source} is {self._named(value)}")

    def constant_match(self, source: str, value) -> None:
        if value is None or value is True or value is False or value is Ellipsis:
            self.add(f"{source} is {value!r}")
        elif type(value) is int and scalar_source(source):  # automatic dynamic may make it a SymInt
            self.add(f"type({source}) is int")
            self.add(f"{source} == {value!r}", size_of=(source, SCALAR))
        elif isinstance(value, (int, float, str, bytes)) and type(value) in (int, float, str, bytes):
            self.add(f"type({source}) is {type(value).__name__}")
            if isinstance(value, float) and value != value:
                self.add(f"{source} != {source}")
            elif isinstance(value, float) and value in (math.inf, -math.inf):  # repr 'inf' is no name
                self.add(f"{source} == {'-' if value < 0 else ''}___inf")
            else:
                self.add(f"{source} == {value!r}")
                if isinstance(value, float) and value == 0.0:  # -0.0 == 0.0, but 1 / x and copysign differ
                    self.add(f"___copysign(1.0, {source}) == {math.copysign(1.0, value)!r}")
        else:
            self.type_match(source, value)
            self.add(f"{source} == {self.const(value)}")

    def items_match(self, seq_source: str, start: str, values: list) -> None:
        """The items of the sequence at ``seq_source`` from index ``start`` (an expression)
        on are ``values``, each of the same type (plain constants: int, float, str, bytes,
        bool, None), in one check instead of a TYPE and an EQUALS check per item (a loop's
        iterator over a long range or list handed to a resume function)."""
        self.env.setdefault("___items_match", _items_match)
        self.add(f"___items_match({seq_source}, {start}, {self.const(tuple(values))})")

    def len_match(self, source: str, value) -> None:
        self.type_match(source, value)
        self.add(f"len({source}) == {len(value)}")

    def keys_match(self, source: str, value) -> None:
        self.type_match(source, value)
        self.add(f"list({source}.keys()) == {self.const(list(value.keys()))}")

    def tensor_match(self, source: str, value: torch.Tensor, fake, keyed: bool = False) -> None:
        """TENSOR_MATCH on dtype, device, rank, static sizes and strides, requires_grad;
        ``keyed``: the caller's key fixes dtype, device and requires_grad of ``source``
        (:func:`mark_keyed_inputs`), so only type, rank, sizes and strides are checked."""
        self.tensor_sources.append(source)
        if keyed:
            self.keyed_sources.add(source)
        label = f"tensor '{source}'"
        if type(value) is torch.Tensor:
            self.add(f"type({source}) is ___Tensor", lambda L, s=source: f"{label} type mismatch. expected Tensor")
        else:
            self.add(f"type({source}) is {self.const(type(value))}")
        if not keyed:
            dt = self.const(value.dtype)
            self.add(f"{source}.dtype is {dt}", lambda L, g=self._getter(source), e=value.dtype: (
                f"{label} dtype mismatch. expected {_DTYPE_NAMES.get(e, e)}, actual {_DTYPE_NAMES.get(g(L).dtype, g(L).dtype)}"))
            dev = self.const(value.device)
            self.add(f"{source}.device == {dev}", lambda L, g=self._getter(source), e=value.device: (
                f"{label} device mismatch. expected {e}, actual {g(L).device}"))
        self.add(f"{source}.dim() == {value.dim()}", lambda L, g=self._getter(source), e=value.dim(): (
            f"{label} rank mismatch. expected {e}, actual {g(L).dim()}"))
        sizes = [s if isinstance(s, int) else None for s in fake.shape]
        strides = [s if isinstance(s, int) else None for s in fake.stride()]
        if all(s is not None for s in sizes):
            self.add(f"{source}.shape == {tuple(sizes)!r}", self._seq_reason(source, label, "size", sizes),
                     size_of=(source, None))
        else:
            for i, s in enumerate(sizes):
                if s is not None:
                    self.add(f"{source}.size({i}) == {s}", self._seq_reason(source, label, "size", sizes),
                             size_of=(source, i))
        if all(s is not None for s in strides):
            self.add(f"{source}.stride() == {tuple(strides)!r}", self._seq_reason(source, label, "stride", strides),
                     size_of=(source, "stride"))
            self.stride_sources.add(source)
        if keyed:
            return
        rg = bool(value.requires_grad)
        self.add(f"{source}.requires_grad is {rg}",
                 lambda L: f"{label} requires_grad mismatch. expected requires_grad={int(rg)}")

    def _getter(self, source):
        return eval(f"lambda L: {source}", self.env)

    def _seq_reason(self, source, label, what, expected):
        getter = self._getter(source)

        def reason(L):
            actual = getter(L).shape if what == "size" else getter(L).stride()
            for i, e in enumerate(expected):
                if e is not None and (i >= len(actual) or actual[i] != e):
                    return f"{label} {what} mismatch at index {i}. expected {e}, actual {actual[i] if i < len(actual) else None}"
            return f"{label} {what} mismatch"
        return reason

    def grad_mode(self, enabled: bool) -> None:
        """The global grad mode the frame was captured under."""
        self.add(f"___is_grad_enabled() is {enabled}",
                 lambda L: f"GLOBAL_STATE changed: grad_mode. expected {enabled}")

    def default_dtype(self, dtype: torch.dtype) -> None:
        """``torch.get_default_dtype()`` is what it was at capture (the graph's factory calls
        without a dtype, ``torch.tensor(1.5)``..., made tensors of it; torch guards it in
        its global state guard too)."""
        self.add(f"___get_default_dtype() is {self.const(dtype)}",
                 lambda L: f"GLOBAL_STATE changed: default_dtype. expected {dtype}")

    def global_state(self, key: str, value) -> None:
        """Global state read while tracing (autocast per device, inference mode) is what it
        was: ``key`` as in :func:`global_state`."""
        self.env.setdefault("___global_state", global_state)
        self.add(f"___global_state({key!r}) == {self.const(value)}",
                 lambda L: f"GLOBAL_STATE changed: {key}. expected {value}")

    def build(self, returns: list[str] | None = None) -> "Guard":
        """The guard of the parts added so far.  ``returns``: the sources of the graph's
        inputs; the generated check then returns the tuple of their values instead of
        True (read through the locals the checks already hold: the transformed code
        takes them from there instead of reading every source again)."""
        self.env.setdefault("___Tensor", torch.Tensor)
        self.env.setdefault("___inf", math.inf)
        self.env.setdefault("___is_grad_enabled", torch.is_grad_enabled)
        self.env.setdefault("___get_default_dtype", torch.get_default_dtype)
        self.env.setdefault("___copysign", math.copysign)
        codes = _identity_fast_paths([p.code for p in self.parts], self._value_of, self.const)
        codes = _tensor_check_codes(codes, self.env)
        classes = []
        reads = self._module_reads()
        if returns:
            returns = [self.read_source(r) for r in returns]
        if reads is not None:
            reads.lookups = self._lookups
            codes, classes = module_read_codes(codes, reads)
            reads.forget_values()
            self.f_locals = None  # the guard keeps no argument alive
        source = _guard_source(codes, returns)
        namespace = self.env
        exec(compile(source, "<torchkiln guard>", "exec"), namespace)
        check = namespace.pop("___guard")
        for p in self.parts:
            p.env = namespace
        guard = Guard(check, None, self.parts, source)
        guard.returns_inputs = bool(returns)
        for code in classes:
            part = GuardPart(code)
            part.reason = lambda L, p=part: f"a class's attribute lookup changed: {p.shown} failed"
            part.env = namespace
            guard._class_checks.append(part)
        return guard


PLAIN_CONSTANT_TYPES = (int, float, str, bytes, bool, type(None))


def _items_match(seq, start, expected: tuple) -> bool:
    if len(seq) - start != len(expected):
        return False
    for i, e in enumerate(expected, start):
        a = seq[i]
        if type(a) is not type(e) or not (a == e or a != a and e != e):  # NaN matches NaN, as the float guard
            return False
    return True


_STATE_KEYS = {"autocast_cache": torch.is_autocast_cache_enabled, "inference_mode": torch.is_inference_mode_enabled,
               "default_dtype": torch.get_default_dtype, "deterministic": torch.are_deterministic_algorithms_enabled,
               "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled,
               "cublas_allow_tf32": torch._C._get_cublas_allow_tf32}


def global_state(key: str):
    """The global state ``key`` names: ``"autocast:<device>"`` -> (enabled, dtype),
    ``"default_dtype"`` -> dtype, the others -> bool (:data:`_STATE_KEYS`)."""
    query = _STATE_KEYS.get(key)
    if query is not None:
        return query()
    device = key.partition(":")[2]
    return torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)


def entry_global_state() -> dict:
    """Every key :func:`global_state` knows, with its value now (taken when a frame is
    entered, before its contexts change the state; a few microseconds)."""
    keys = [*_STATE_KEYS, *(f"autocast:{d}" for d in _AUTOCAST_DEVICES)]
    return {k: global_state(k) for k in keys}


def _autocast_devices():
    devices = []
    for d in torch._C._autocast_supported_devices():
        try:
            torch.get_autocast_dtype(d)
        except Exception:  # noqa: BLE001 - a device type this build does not know
            continue
        devices.append(d)
    return tuple(devices)


_AUTOCAST_DEVICES = _autocast_devices()



_EXACT_TYPE_PART = re.compile(r"^type\((.*)\) is (___Tensor|___c\d+)$")
_CONST_NAME = re.compile(r"___c\d+")


def _split_part(code: str, sep: str):
    """``(source, rest)`` of ``code`` = ``source + sep + rest``, split at the last ``sep``
    (no regex: a part may compare a 1 MB constant), else None."""
    source, found, rest = code.rpartition(sep)
    return (source, rest) if found and source else None


def _tensor_check_codes(codes: list[str], env: dict) -> list[str]:
    """The TENSOR_MATCH parts as the generated check runs them, cheaper and equivalent:
    the rank check is left out where the full sizes are checked (``t.shape == (4, 64)``
    implies ``t.dim() == 2``), and ``t.device == device('cpu')`` of a plain Tensor or
    Parameter (its type checked) is ``t.is_cpu`` (no ``torch.device`` made per call).
    The printed parts, failure reasons and records keep the full list."""
    full_shape = {}
    exact = set()
    for code in codes:
        if len(code) > 1000:  # no tensor part is long; a long part compares a long constant
            continue
        split = _split_part(code, ".shape == (")
        if split and split[1].endswith(")"):
            sizes = split[1][:-1]
            full_shape[split[0]] = sizes.count(",") + (0 if sizes.endswith(",") or not sizes else 1)
        if code.startswith("type("):
            m = _EXACT_TYPE_PART.match(code)
            if m and env.get(m.group(2), torch.Tensor if m.group(2) == "___Tensor" else None) in (
                    torch.Tensor, torch.nn.Parameter):
                exact.add(m.group(1))
    cpu = torch.device("cpu")
    out = []
    for code in codes:
        if len(code) > 1000:
            out.append(code)
            continue
        split = _split_part(code, ".dim() == ")
        if split and split[1].isdigit() and full_shape.get(split[0]) == int(split[1]):
            continue
        split = _split_part(code, ".device == ")
        if split and split[0] in exact and _CONST_NAME.fullmatch(split[1]):
            device = env.get(split[1])
            if type(device) is torch.device and device == cpu:
                code = f"{split[0]}.is_cpu"
        out.append(code)
    return out


def _identity_fast_paths(codes: list[str], value_of, const) -> list[str]:
    """The constant checks of a source ``S`` (``type(S) is float``, ``S == 1e-05``, the
    sign of a zero, ...) as one part, at the first one's place, that first asks whether
    ``S`` still holds the very object it holds now: ``S is ___c7 or (type(S) is float
    and S == 1e-05)``.  Equivalent: that object is an immutable int/float/str/bytes that
    passes those checks now (checked here), so it always does; any other object is
    checked as before.  (A module's ``eps``, a dropout's ``p``, a config's ints are read
    from the same object on every call: one ``is`` instead of a type check and a
    comparison.)  Moving a later check of ``S`` up to the first one's place changes no
    result: the checks read nothing but ``S``, and a check that raises fails the guard
    wherever it runs.  ``value_of(S, default)``: the value of ``S`` now."""
    groups: dict[str, list[int]] = {}
    for i, code in enumerate(codes):
        if len(code) <= 1000:
            source = _constant_check_source(code)
            if source is not None:
                groups.setdefault(source, []).append(i)
    merged: dict[int, str] = {}
    dropped: set[int] = set()
    missing = object()
    for source, at in groups.items():
        kinds = [codes[i].rsplit(" ", 1)[1] for i in at if codes[i].startswith("type(")]
        if len(kinds) != 1 or len(at) < 2:
            continue
        value = value_of(source, missing)
        checks = " and ".join(codes[i] for i in at)
        if type(value).__name__ != kinds[0] or type(value) not in (int, float, str, bytes):
            continue
        if value_of(f"({checks})", False) is True and value_of(source, missing) is value:
            merged[at[0]] = f"{source} is {const(value)} or ({checks})"
            dropped.update(at[1:])
    return [merged.get(i, code) for i, code in enumerate(codes) if i not in dropped]


def _constant_check_source(code: str) -> str | None:
    """The source ``S`` whose constant check ``code`` is, as
    :meth:`GuardBuilder.constant_match` writes them (``type(S) is float``, ``S == 1.5``,
    ``S != S``, ``S == -___inf``, ``___copysign(1.0, S) == 1.0``), else None."""
    if code.startswith("type(") and code.endswith(("is int", "is float", "is str", "is bytes")):
        return code[5:code.rindex(") is ")]
    if code.startswith("___copysign(1.0, ") and code.endswith((") == 1.0", ") == -1.0")):
        return code[len("___copysign(1.0, "):code.rindex(") == ")]
    for sep in (" == ", " != "):
        source, found, rest = code.partition(sep)
        if found and source and (rest == source or rest in ("___inf", "-___inf") or _is_literal(rest)):
            return source
    return None


def _is_literal(text: str) -> bool:
    """Whether ``text`` is the repr of an int, float, str or bytes constant."""
    try:
        value = ast.literal_eval(text)
    except Exception:  # noqa: BLE001
        return False
    return type(value) in (int, float, str, bytes) and repr(value) == text


def _guard_source(codes: list[str], returns: list[str] | None = None) -> str:
    """The guard function: the parts in order, with each source prefix used more than
    once computed once (see :func:`.source.hoist_shared_prefixes`), right before the
    first part that reads it, so a part fails or raises at the same point as when each
    part evaluated its sources in full.  It returns True when all pass, or with
    ``returns`` (expressions, hoisted with the parts) the tuple of their values."""
    lines = ["def ___guard(L):"]
    hoisted = hoist_shared_prefixes(codes + list(returns or ()))
    for setup, code in hoisted[:len(codes)]:
        lines += ["    " + line for line in setup]
        lines.append(f"    if not ({code}):")
        lines.append("        return False")
    if returns:
        lines += ["    " + line for setup, _ in hoisted[len(codes):] for line in setup]
        lines.append("    return (" + "".join(code + ", " for _, code in hoisted[len(codes):]) + ")")
    else:
        lines.append("    return True")
    return "\n".join(lines) + "\n"


class Guard:
    """A generated predicate over ``f_locals`` (``check``) plus its printable parts."""

    def __init__(self, check, code_parts=None, parts=(), source_text=""):
        self.check = check  # check(f_locals): falsy, or True / the graph inputs' tuple (returns_inputs)
        self.returns_inputs = False
        self._code_parts = code_parts
        self._parts = list(parts)
        self.source_text = source_text
        # checks the generated function runs besides the parts (guard_reads' class checks):
        # a failure reason when every part passes
        self._class_checks: list[GuardPart] = []

    @property
    def code_parts(self) -> list[str]:
        """Each part's printable code (built on first use: logs, explain, tests)."""
        if self._code_parts is None:
            self._code_parts = [p.shown for p in self._parts]
        return self._code_parts

    @classmethod
    def always(cls) -> "Guard":
        return cls(lambda f_locals: True, [])

    def _failing(self, f_locals):
        for part in (*self._class_checks, *self._parts):
            try:
                ok = part.fn(f_locals)
            except Exception:  # noqa: BLE001 - a guard that raises has failed
                ok = False
            if not ok:
                yield part

    def failure_reason(self, f_locals) -> str | None:
        """The first failing part, worded as torch's recompile reasons; None if all pass."""
        for part in self._failing(f_locals):
            return part.reason(f_locals) if part.reason else part.shown
        return None

    def size_failures(self, f_locals) -> dict[str, set[int]] | None:
        """Dims whose sizes changed, if size checks are the only failing parts; else None.
        A failing ShapeEnv relation (``L['s'][5] == 239 - L['s'][0]``: split sizes adding
        up) is passed over: it fails because sizes it relates changed, and the size parts
        that failed with it name those still static (a relation alone gives None).  An int
        item of a list that changes while another item of it is already symbolic makes the
        whole list symbolic (:func:`_whole_lists`): an MoE's split sizes change a few experts
        a step, and one recompile per newly changed item filled cache_size_limit (8 experts,
        6 recompiles)."""
        result: dict[str, set[int]] = {}
        lists: dict[str, dict] = {}
        for part in self._failing(f_locals):
            if part.relation:
                continue
            if part.size_of is None:
                return None
            source, dim = part.size_of
            if dim == "stride":
                continue  # strides follow sizes; the size parts decide
            if dim == SCALAR:  # a Python int argument's value
                result.setdefault(source, set()).add(SCALAR)
                item = _ITEM.fullmatch(source)
                if item:
                    lists[item.group(1)] = self._env_of(part)
                continue
            getter = eval(f"lambda L: {source}", dict(self._env_of(part)))
            try:
                actual = getter(f_locals).shape
            except Exception:  # noqa: BLE001
                return None
            expected = _expected_sizes(part.code)
            if dim is None:
                if expected is None or len(actual) != len(expected):
                    return None
                dims = {i for i, (a, e) in enumerate(zip(actual, expected)) if a != e}
            else:
                dims = {dim}
            result.setdefault(source, set()).update(dims)
        for source in _whole_lists(lists, self._parts, f_locals):
            result.setdefault(source, set()).add(SCALAR)
        return result or None

    def _env_of(self, part):
        return part.env or {}

    def __str__(self):
        return self.source_text or "True"


def _pretty(value) -> str:
    """How a guarded constant prints in ``code_parts`` (the generated code names it ``___cN``)."""
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}" if value.__module__ != "builtins" else value.__qualname__
    if isinstance(value, types.CodeType):
        return f"<code {value.co_name}>"
    if isinstance(value, types.FunctionType):
        return f"<function {value.__qualname__}>"
    text = str(value) if isinstance(value, torch.dtype) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# an item source ``L['s'][5]``: its list ``L['s']``
_ITEM = re.compile(r"((?:L|G)\[[^\]]+\](?:\.\w+|\['[^']*'\]|\[\d+\])*)\[\d+\]")


def _whole_lists(lists: dict, parts, f_locals) -> list[str]:
    """The item sources ``P[i]`` of every int (not bool) item of each list or tuple ``P``
    (not a ``torch.Size``) of ``lists`` (source -> its guard namespace), as the frame holds
    it now, where the guard ``parts`` checked the value of not every int item of it (one was
    symbolic already)."""
    static = {p.size_of[0] for p in parts if p.size_of is not None and p.size_of[1] == SCALAR}
    items = []
    for parent, env in lists.items():
        try:
            value = eval(f"lambda L: {parent}", dict(env))(f_locals)
        except Exception:  # noqa: BLE001 - not readable now: only the items that failed
            continue
        if type(value) in (list, tuple):
            mine = [f"{parent}[{i}]" for i, v in enumerate(value) if type(v) is int]
            if not static.issuperset(mine):
                items += mine
    return items


def _expected_sizes(code: str):
    try:
        return eval(code.rsplit("==", 1)[1], {})
    except Exception:  # noqa: BLE001
        return None
