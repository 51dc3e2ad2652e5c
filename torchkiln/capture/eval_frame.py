"""The compiled wrapper: per-code-object guarded cache, recompiles, automatic dynamic.

torch.compile installs a C frame-evaluation hook; torchkiln has none.  Instead the
callable that :func:`compile` returns *is* the hook for its function: a call binds the
arguments to the frame's ``f_locals``, runs the guard of each cached entry of the
function's code object (most recent first) and runs the first entry whose guard
passes; on a miss it asks capture (:func:`~torchkiln.capture.convert_frame.convert_frame`)
for a new entry.  Functions that capture calls through ``compile_wrapper`` (resume
functions after a graph break, callees that break) get the same machinery, so each
becomes a frame of its own, as under torch.compile.

Recompile policy, as ``torch._dynamo``'s: ``config.cache_size_limit`` entries per code
object, then misses run eagerly with one warning; ``config.error_on_recompile`` raises
:class:`~torchkiln.exc.RecompileError`; ``guard_fail_fn(GuardFail(reason, code))`` sees
the first failing guard of the most recent entry; ``TORCHKILN_LOGS=recompiles`` prints
it; automatic dynamic recompiles with the dims whose sizes changed made symbolic.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import re
import sys
import types
import warnings
import weakref
from typing import Any, Callable

import torch

from ..backends import lookup_backend
from ..config import config
from ..exc import RecompileError
from ..shapes.automatic import FrameShapeState
from ..utils.counters import reset_counters
from ..utils import trace
from ..utils.logging import artifact_enabled, get_artifact_logger
from . import api
from .convert_frame import convert_frame
from .frame import bind_locals

GuardFail = collections.namedtuple("GuardFail", ["reason", "orig_code"])
"""What ``guard_fail_fn`` receives (``torch._dynamo.types.GuardFail``): the first
failing guard's text and the code object being recompiled."""

_recompiles_log = get_artifact_logger("recompiles")
_guards_log = get_artifact_logger("guards")
_reset_hooks: list[Callable[[], None]] = []


class FrameCache:
    """Everything cached for one code object: guarded entries, most recent first."""

    __slots__ = ("code", "hot", "entries", "shapes", "limit_warned", "keepalive")

    def __init__(self, code: types.CodeType, keepalive: Any = None) -> None:
        self.code = code
        # (context key, guard check, entry.run): read on every call.
        self.hot: list[tuple[object, Callable, Callable]] = []
        self.entries: list[tuple[object, Any]] = []
        self.shapes = FrameShapeState()
        self.limit_warned = False
        self.keepalive = keepalive  # a closure's cells: keeps their ids unique while cached

    def clear(self) -> None:
        self.hot.clear()
        self.entries.clear()
        self.shapes = FrameShapeState()
        self.limit_warned = False

    def add(self, key: object, entry: Any) -> None:
        self.entries.insert(0, (key, entry))
        run = entry.run
        if not getattr(run, "takes_checked", False):
            run = _ignoring_checked(run)
        self.hot.insert(0, (key, entry.guard.check, run))


def _ignoring_checked(run: Callable) -> Callable:
    """``run(L)`` as the hot path calls it: ``run(L, what the guard returned)``."""
    return lambda L, checked: run(L)


_frame_caches: dict[Any, FrameCache] = {}


def frame_cache_for(fn: types.FunctionType) -> FrameCache:
    """The cache of ``fn``'s code object.

    Functions with a closure are cached per (code, cells): the transformed code runs
    with the closure of the function it was captured from.
    """
    code = fn.__code__
    key = code if not fn.__closure__ else (code, tuple(map(id, fn.__closure__)))
    fc = _frame_caches.get(key)
    if fc is None:
        fc = _frame_caches[key] = FrameCache(code, fn.__closure__)
    return fc


_compiled_autograd_hook: Callable | None = None
_compiled_autograd_off: Callable = contextlib.nullcontext


def register_compiled_autograd(hook: Callable, off: Callable) -> None:
    """``hook(context)`` -> a context manager factory that every call of a function compiled
    while ``config.compiled_autograd`` was True runs inside; ``off()`` a context manager
    under which captures and compiles run (their autograd calls stay eager).
    compiled_autograd registers both."""
    global _compiled_autograd_hook, _compiled_autograd_off
    _compiled_autograd_hook, _compiled_autograd_off = hook, off


def register_reset_hook(hook: Callable[[], None]) -> Callable[[], None]:
    """Have :func:`reset` call ``hook()`` (later stages drop their in-memory caches)."""
    _reset_hooks.append(hook)
    return hook


def reset() -> None:
    """Drop every in-memory cache and counter (mirrors ``torch._dynamo.reset``).

    Compiled wrappers stay valid and capture again on their next call.  Disk caches
    are not touched.
    """
    for fc in _frame_caches.values():
        fc.clear()
    _context_keys.clear()
    symbolic_convert = sys.modules.get("torchkiln.capture.symbolic_convert")  # not imported: nothing captured
    if symbolic_convert is not None:
        symbolic_convert.forget_inlined_breaks()
    reset_counters()
    for hook in list(_reset_hooks):
        hook()


def _accepted_keywords(compiler_fn: Callable, kwargs: dict) -> dict:
    """The ``mode``/``options`` keywords ``compiler_fn`` accepts; the rest are dropped
    with one warning (a backend that cannot take them still compiles)."""
    if not kwargs:
        return kwargs
    try:
        params = inspect.signature(compiler_fn).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    dropped = [k for k in kwargs if k not in params]
    if dropped:
        name = getattr(compiler_fn, "__name__", type(compiler_fn).__name__)
        warnings.warn(f"torchkiln.compile: backend {name!r} takes no {' or '.join(map(repr, dropped))}; ignored")
    return {k: v for k, v in kwargs.items() if k in params}


class _BackendCall:
    """A backend with ``mode``/``options`` bound (torch's ``_TorchCompileWrapper``)."""

    def __init__(self, compiler_fn: Callable, kwargs: dict) -> None:
        self.compiler_fn = compiler_fn
        self.kwargs = kwargs
        self.__name__ = getattr(compiler_fn, "__name__", type(compiler_fn).__name__)

    def __call__(self, gm, example_inputs):
        return self.compiler_fn(gm, example_inputs, **self.kwargs)


# Interned context keys; each holds its compiler_fn so the id in the key stays unique.
_context_keys: dict[tuple, tuple[object, Callable]] = {}


class CompileContext:
    """How to compile: backend, fullgraph, dynamic, guard_fail_fn.

    Cache entries made under one context are reused only by calls under an equal
    context (same backend object and options, fullgraph and dynamic), as torch's
    backend-match guard does.
    """

    def __init__(self, backend="inductor", *, fullgraph: bool = False, dynamic: bool | None = None,
                 mode: str | None = None, options: dict | None = None,
                 guard_fail_fn: Callable | None = None) -> None:
        self._args = (backend, fullgraph, dynamic, mode, options, guard_fail_fn)
        if options and "trace" in options:  # options={"trace": DIR} is TORCHKILN_TRACE=DIR
            trace.enable(options["trace"])
            options = {k: v for k, v in options.items() if k != "trace"}
        compiler_fn = lookup_backend(backend)
        kwargs = {}
        if mode and mode != "default":
            kwargs["mode"] = mode
        if options:
            kwargs["options"] = dict(options)
        kwargs = _accepted_keywords(compiler_fn, kwargs)
        self.backend = _BackendCall(compiler_fn, kwargs) if kwargs else compiler_fn
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.guard_fail_fn = guard_fail_fn
        self.compiled_autograd = config.compiled_autograd  # read at compile() time, as torch's
        self.on_entry: Callable | None = None  # explain() collects entries here
        key_parts = (id(compiler_fn), repr(sorted(kwargs.items())), fullgraph, dynamic)
        self.key = _context_keys.setdefault(key_parts, (object(), compiler_fn))[0]
        self._wrappers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __reduce__(self):
        backend, fullgraph, dynamic, mode, options, guard_fail_fn = self._args
        return (_rebuild_context, (backend, fullgraph, dynamic, mode, options, guard_fail_fn))

    def __call__(self, fn):
        """Compile ``fn`` (function, bound method, nn.Module or callable object)."""
        if isinstance(fn, torch.nn.Module):
            from .optimized_module import OptimizedModule

            if isinstance(fn, OptimizedModule):
                fn = fn._orig_mod
            return OptimizedModule(fn, self)
        if not callable(fn):
            raise TypeError(f"torchkiln.compile expects a callable, got {type(fn).__name__}")
        return self.wrap(fn)

    def wrap(self, fn: Callable) -> Callable:
        """The compiled wrapper of a callable (the ``compile_wrapper`` given to capture)."""
        if isinstance(fn, types.MethodType):
            return types.MethodType(self.wrap(fn.__func__), fn.__self__)
        if getattr(fn, "__code__", None) in api.skipped_codes:
            return fn  # runs natively (capture.api.skip_code)
        if getattr(fn, "_torchkiln_disable", False):  # disable wins, as torch's DisableContext does
            if self.compiled_autograd and _compiled_autograd_hook is not None:  # but its backward is compiled
                return _with_compiled_autograd(fn, _compiled_autograd_hook(self))
            return fn
        fn = getattr(fn, "_torchkiln_compiled_orig", fn)  # re-wrapping a wrapper wraps its original
        if isinstance(fn, functools.partial):
            return functools.partial(self.wrap(fn.func), *fn.args, **fn.keywords)
        if not isinstance(fn, types.FunctionType):
            call = getattr(type(fn), "__call__", None)
            if isinstance(call, types.FunctionType):
                return types.MethodType(self.wrap(call), fn)
            return fn  # a C function has no bytecode to capture: torch runs it as is too
        try:
            return self._wrappers[fn]
        except KeyError:
            wrapper = self._wrappers[fn] = _make_wrapper(fn, self)
            return wrapper


def _rebuild_context(backend, fullgraph, dynamic, mode, options, guard_fail_fn) -> CompileContext:
    return CompileContext(backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode, options=options,
                          guard_fail_fn=guard_fail_fn)


def _make_binder(fn: types.FunctionType) -> Callable[[tuple, dict], dict]:
    """``bind_locals`` for ``fn`` without ``inspect.signature`` per call.

    Handles positional, keyword, default, keyword-only, ``*args``/``**kwargs`` and
    closure variables; any call it does not bind cleanly (a missing or duplicate
    argument, an unknown keyword) goes to ``bind_locals``, which raises the same
    ``TypeError`` as calling ``fn``.
    """
    code = fn.__code__
    argc, kwc, flags = code.co_argcount, code.co_kwonlyargcount, code.co_flags
    names = code.co_varnames[:argc]
    kwnames = code.co_varnames[argc:argc + kwc]
    varargs = code.co_varnames[argc + kwc] if flags & inspect.CO_VARARGS else None
    varkw = code.co_varnames[argc + kwc + bool(varargs)] if flags & inspect.CO_VARKEYWORDS else None
    params = set(names) | set(kwnames)
    by_keyword = set(names[code.co_posonlyargcount:]) | set(kwnames)
    freevars = tuple(zip(code.co_freevars, fn.__closure__ or ()))
    simple = not (kwc or varargs or varkw or freevars)

    def binder(args, kwargs):
        n = len(args)
        if simple and n == argc and not kwargs:
            return dict(zip(names, args))
        if n > argc and varargs is None:
            return bind_locals(fn, args, kwargs)
        f_locals = dict(zip(names, args))
        extra = {}
        for key, value in kwargs.items():
            if key in by_keyword and key not in f_locals:
                f_locals[key] = value
            elif varkw is not None and key not in by_keyword and (key not in params or key in names[:n]):
                extra[key] = value
            else:
                return bind_locals(fn, args, kwargs)
        if len(f_locals) < argc + kwc:
            defaults = fn.__defaults__ or ()
            first_default = argc - len(defaults)
            for i in range(n, argc):
                if names[i] not in f_locals:
                    if i < first_default:
                        return bind_locals(fn, args, kwargs)
                    f_locals[names[i]] = defaults[i - first_default]
            kwdefaults = fn.__kwdefaults__ or {}
            for name in kwnames:
                if name not in f_locals:
                    if name not in kwdefaults:
                        return bind_locals(fn, args, kwargs)
                    f_locals[name] = kwdefaults[name]
        if varargs is not None:
            f_locals[varargs] = args[argc:]
        if varkw is not None:
            f_locals[varkw] = extra
        for name, cell in freevars:
            try:
                f_locals[name] = cell.cell_contents
            except ValueError:  # an empty cell
                pass
        return f_locals

    return binder


_functorch_active = torch._C._are_functorch_transforms_active
"""True inside ``torch.func.grad``/``vmap``/``jvp``/``jacrev``...: a compiled frame entered
there runs eagerly (its arguments are functorch's wrapped tensors, which the cached
entries were not built for and which the AOT runtime's ``autograd.Function`` cannot
take; torch.compile captures through the transform instead)."""


_torch_function_mode_on = torch._C._is_torch_function_mode_enabled
_dispatch_stack_len = torch._C._len_torch_dispatch_stack
_device_keys: dict[tuple, object] = {}


def _user_dispatch_mode_on() -> bool:
    """Whether a TorchDispatchMode other than torch's tracing infrastructure (fake,
    proxy, functional tensors) is on the stack: a compiled frame entered under one runs
    eagerly, so the mode sees every op as in eager (generated kernels would bypass it;
    torch.compile skips such frames too)."""
    from torch.utils._python_dispatch import _get_dispatch_stack_at

    for i in range(_dispatch_stack_len()):
        mode = _get_dispatch_stack_at(i)
        infra = getattr(mode, "is_infra_mode", None)
        ignore = getattr(mode, "ignore_compile_internals", None)
        if not (infra is not None and infra()) and not (ignore is not None and ignore()):
            return True
    return False


def _function_mode_key(key: object):
    """The cache key to use while torch function modes are on: None (run eagerly) when
    one of them is not a ``DeviceContext`` (a user ``TorchFunctionMode``: the cached
    entries were built without it, generated kernels would bypass it); for
    ``DeviceContext``s alone (``torch.set_default_device``, ``with torch.device(d)``) a
    key of its own per innermost device, so an entry is reused only under the default
    device its factory calls were captured with."""
    from torch.utils._device import DeviceContext

    device = None
    for i in range(torch._C._len_torch_function_stack()):
        mode = torch._C._get_function_stack_at(i)
        if type(mode) is not DeviceContext:
            return None
        device = mode.device
    return _device_keys.setdefault((key, str(device)), object())


def _make_wrapper(fn: types.FunctionType, ctx: CompileContext) -> Callable:
    fc = frame_cache_for(fn)
    hot = fc.hot
    key = ctx.key
    binder = _make_binder(fn)
    tls = api._tls

    def compiled(*args, **kwargs):
        if getattr(tls, "disabled", False) or _functorch_active() or _dispatch_stack_len() and _user_dispatch_mode_on():
            return fn(*args, **kwargs)
        now = key if not _torch_function_mode_on() else _function_mode_key(key)
        if now is None:
            return fn(*args, **kwargs)
        f_locals = binder(args, kwargs)
        try:  # free unless a guard raises; a guard that raises counts as failed
            for entry_key, check, run in hot:
                if entry_key is now:
                    checked = check(f_locals)  # True, or the graph inputs it read
                    if checked:
                        break
            else:
                run = None
        except Exception:  # noqa: BLE001
            run, checked = _lookup_skipping_broken_guards(hot, now, f_locals)
        if run is not None:
            return run(f_locals, checked)
        return _on_miss(fc, ctx, fn, args, kwargs, f_locals, now)

    if ctx.compiled_autograd and _compiled_autograd_hook is not None:
        compiled = _with_compiled_autograd(compiled, _compiled_autograd_hook(ctx))
    functools.update_wrapper(compiled, fn)
    compiled._torchkiln_compiled_orig = fn
    compiled._torchkiln_orig_callable = fn
    compiled._torchkiln_context = ctx
    return compiled


def _with_compiled_autograd(compiled: Callable, enable: Callable) -> Callable:
    """Every call of ``compiled`` (and each backward inside it) runs under compiled autograd."""
    def compiled_with_autograd(*args, **kwargs):
        with enable():
            return compiled(*args, **kwargs)

    return compiled_with_autograd


def _lookup_skipping_broken_guards(hot: list, key: object, f_locals: dict):
    """The slow lookup after a guard raised: such an entry just does not match."""
    for entry_key, check, run in hot:
        try:
            checked = entry_key is key and check(f_locals)
        except Exception:  # noqa: BLE001
            continue
        if checked:
            return run, checked
    return None, None


def _failure_reason(entry, f_locals: dict) -> str:
    try:
        return entry.guard.failure_reason(f_locals) or "unknown guard failure"
    except Exception as e:  # noqa: BLE001
        return f"a guard raised {type(e).__name__}: {e}"


def _recompile_record(previous, f_locals: dict, reason: str) -> dict:
    """The ``recompile`` trace record: the failing guard's code, reason, both values."""
    try:
        guard = next((part.shown for part in previous.guard._failing(f_locals)), None)
    except Exception:  # noqa: BLE001
        guard = None
    values = re.search(r"expected (.+?), actual (.+)$", reason)
    return {"reason": reason, "guard": guard, "expected": values and values.group(1),
            "actual": values and values.group(2)}


def _location(code: types.CodeType) -> str:
    return f"{code.co_filename}:{code.co_firstlineno}"


def _on_miss(fc: FrameCache, ctx: CompileContext, fn: types.FunctionType, args: tuple, kwargs: dict,
             f_locals: dict, key: object = None):
    """No cached entry's guard passed: recompile (policy permitting) and run.  ``key``:
    the cache key of this call (``ctx.key``, or its key under a default-device context)."""
    code = fc.code
    key = ctx.key if key is None else key
    previous = next((entry for k, entry in fc.entries if k is key), None)
    if previous is not None:
        reason = _failure_reason(previous, f_locals)
        message = (f"Recompiling function {code.co_name} in {_location(code)}, triggered by the following "
                   f"guard failure(s):\n    - {reason}")
        if config.error_on_recompile:
            raise RecompileError(message)
        _recompiles_log.debug(message)
        if ctx.guard_fail_fn is not None:
            ctx.guard_fail_fn(GuardFail(reason, code))
        if ctx.dynamic is not False and config.automatic_dynamic_shapes:
            try:
                fc.shapes.note_size_failures(previous.guard.size_failures(f_locals))
            except Exception:  # noqa: BLE001 - no automatic dynamic for this recompile
                pass
    limit = min(config.cache_size_limit, config.recompile_limit)  # torch 2.13 renamed it; honour both
    if len(fc.entries) >= limit:
        if not fc.limit_warned:
            fc.limit_warned = True
            last = _failure_reason(previous, f_locals) if previous is not None else None
            warnings.warn(
                f"torchkiln hit config.cache_size_limit ({limit})\n   function: {code.co_name!r} ({_location(code)})\n"
                f"   last reason: {last}\nIt now runs eagerly on a cache miss. To log all recompilation reasons, "
                f"use TORCHKILN_LOGS=\"recompiles\".")
        return fn(*args, **kwargs)
    policy = fc.shapes.policy(assume_static=not (ctx.dynamic is True or not config.assume_static_by_default))
    with trace.frame(code):
        if trace.enabled and previous is not None:
            trace.emit("recompile", _recompile_record(previous, f_locals, reason))
        with _compiled_autograd_off():  # tracing the joint graph must not go through compiled autograd
            entry = convert_frame(fn, args, kwargs, backend=ctx.backend, fullgraph=ctx.fullgraph, dynamic=policy,
                                  compile_wrapper=ctx.wrap)
        if trace.enabled:
            trace.emit("guards", {"frame": code.co_name, "guards": list(entry.guard.code_parts)})
    fc.add(key, entry)
    if artifact_enabled("guards"):
        _guards_log.debug("GUARDS for %s (%s):\n%s", code.co_name, _location(code),
                          "\n".join(f"  {part}" for part in entry.guard.code_parts))
    if ctx.on_entry is not None:
        ctx.on_entry(entry)
    return entry.run(f_locals)


def compile(model=None, *, fullgraph: bool = False, dynamic: bool | None = None, backend="inductor",
            mode: str | None = None, options: dict | None = None, disable: bool = False):
    """Compile a function, method or ``nn.Module`` (mirrors ``torch.compile``).

    Returns a wrapper that captures the callable's tensor code into FX graphs on first
    call and hands them to ``backend`` (a name from :func:`torchkiln.list_backends` or a
    ``backend(gm, example_inputs)`` callable); an ``nn.Module`` gives an
    :class:`OptimizedModule`.  Usable as ``@compile`` and ``@compile(...)``.
    ``fullgraph=True`` raises :class:`torchkiln.exc.Unsupported` instead of breaking the
    graph.  ``dynamic``: None = automatic dynamic (static first, then the dims that
    changed), True = every dim symbolic from the start (sizes 0/1 specialised), False =
    always static.  ``mode``/``options`` are passed to the backend as keywords when its
    signature takes them (else they are ignored with a warning).  ``disable=True`` returns ``model`` unchanged.
    Raises ``TypeError`` at once when ``model`` is not callable and
    :class:`torchkiln.backends.InvalidBackend` for an unknown backend name.
    """
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be specified at the same time.")
    if model is None:
        def decorator(m):
            return compile(m, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode, options=options,
                           disable=disable)
        return decorator
    if not callable(model):
        raise TypeError(f"torchkiln.compile expects a callable (function, method or nn.Module), "
                        f"got {type(model).__name__}")
    if disable:
        return model
    return CompileContext(backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode, options=options)(model)


class optimize:
    """``torch._dynamo.optimize``'s decorator: ``optimize(backend)(fn)`` compiles ``fn``.

    ``nopython=True`` is ``fullgraph=True``; ``guard_fail_fn(GuardFail)`` is called with
    the first failing guard on each recompile.  Without a frame hook torchkiln cannot
    capture every frame run inside a ``with`` block, so using it as a context manager
    raises ``RuntimeError`` (as torch does under ``config.raise_on_ctx_manager_usage``)
    or, with that setting off, does nothing.
    """

    def __init__(self, backend="inductor", *, nopython: bool = False, guard_fail_fn: Callable | None = None,
                 dynamic: bool | None = None, disable: bool = False) -> None:
        self.disable = disable
        self.context = None if disable else CompileContext(backend, fullgraph=nopython, dynamic=dynamic,
                                                           guard_fail_fn=guard_fail_fn)

    def __call__(self, fn):
        if self.disable:
            return fn
        return self.context(fn)

    def __enter__(self):
        if config.raise_on_ctx_manager_usage:
            raise RuntimeError("torchkiln.optimize(...) is used with a context manager. "
                               "Please use torchkiln.compile(fn) or @torchkiln.optimize(...) on a function instead.")
        return self

    def __exit__(self, *exc):
        return False
