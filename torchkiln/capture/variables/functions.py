"""Trackers for user functions, closures made in the frame, and bound methods.

Calling one inlines its bytecode with a nested translator (TorchDynamo's
InliningInstructionTranslator), except functions marked with ``torchkiln.disable``
or ``torchkiln.graph_break`` (graph break) and ``allow_in_graph`` ones (one graph call).
"""
from __future__ import annotations

import inspect
import types

from ..api import skipped_codes
from .base import ConstantVariable, VariableTracker, unsupported


# Python functions whose calls a later stage captures its own way (torchkiln.distributed:
# functional collectives become op nodes, in-place collectives graph breaks):
# ``handler(tx, args, kwargs) -> VariableTracker``, keyed by the function object.
call_handlers: dict = {}


def register_call_handler(fn, handler) -> None:
    """Capture calls of ``fn`` with ``handler(tx, args, kwargs)`` instead of inlining ``fn``."""
    call_handlers[fn] = handler


class BaseUserFunctionVariable(VariableTracker):
    def python_type(self):
        return types.FunctionType

    def call_function(self, tx, args, kwargs):
        return tx.inline_user_function(self, args, kwargs)


class UserFunctionVariable(BaseUserFunctionVariable):
    """A pre-existing Python function (its globals, defaults and closure are real)."""

    def __init__(self, fn, source=None):
        self.fn = fn
        self.source = source

    @property
    def value(self):
        return self.fn

    def get_code(self):
        return self.fn.__code__

    def get_globals(self):
        return self.fn.__globals__

    def as_python_constant(self):
        return self.fn

    def is_python_constant(self):
        return True

    def call_function(self, tx, args, kwargs):
        fn = self.fn
        handler = call_handlers.get(fn)
        if handler is not None:
            return handler(tx, args, kwargs)
        if getattr(fn, "_torchkiln_graph_break", False):
            unsupported("torchkiln.graph_break() called")
        if getattr(fn, "_torchkiln_disable", False):
            unsupported(f"call to a torchkiln.disable'd function {fn.__qualname__}")
        if fn.__code__ in skipped_codes:
            unsupported(f"call to {fn.__qualname__}: {skipped_codes[fn.__code__]}")
        orig = fn.__dict__.get("_torchkiln_compiled_orig")
        if orig is not None:  # a torchkiln.compile'd function: traced into this graph, as torch.compile does
            from ..source import attr_source
            from .builder import wrap

            return wrap(tx, orig, attr_source(self.source, "_torchkiln_compiled_orig")).call_function(tx, args, kwargs)
        if getattr(fn, "_torchkiln_allow_in_graph", False):
            return tx.output.call_function(tx, fn, args, kwargs)
        if fn is inspect.signature and len(args) == 1 and not kwargs:
            from .builder import wrap_constant_like

            return wrap_constant_like(tx, inspect.signature(real_callable(args[0])))
        from .generators import is_contextmanager_helper

        if is_contextmanager_helper(fn):
            from .generators import GeneratorContextManagerVariable

            cells = dict(zip(fn.__code__.co_freevars, fn.__closure__))
            gen = wrap_constant_like_fn(tx, cells["func"].cell_contents).call_function(tx, args, kwargs)
            if not hasattr(gen, "next_item"):
                unsupported("contextlib.contextmanager of a function that is not a generator")
            return GeneratorContextManagerVariable(self, gen, list(args), dict(kwargs))
        if fn.__code__.co_filename.endswith("_contextlib.py") and "ctx_factory" in fn.__code__.co_freevars:
            return _call_grad_mode_decorated(tx, fn, args, kwargs)
        return tx.inline_user_function(self, args, kwargs)

    def var_getattr(self, tx, name):
        from .builder import wrap
        from ..source import attr_source

        if name in ("__name__", "__qualname__", "__module__", "__doc__", "__code__", "__defaults__"):
            return ConstantVariable(getattr(self.fn, name))
        if name in self.fn.__dict__:
            return wrap(tx, self.fn.__dict__[name], attr_source(self.source, name))
        unsupported(f"function attribute {name}")

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.from_source(self.source)
        fn = self.fn
        return lambda rt: fn

    def __repr__(self):
        return f"UserFunctionVariable({self.fn.__qualname__})"


class NestedUserFunctionVariable(BaseUserFunctionVariable):
    """A function created by MAKE_FUNCTION during tracing (its cells are trackers)."""

    rebuilt_once = True  # one object per run of the transformed code (identity)

    def __init__(self, code, f_globals, qualname, defaults, kwdefaults, closure, annotations=None):
        self.code = code
        self.f_globals = f_globals
        self.qualname = qualname
        self.defaults = defaults  # TupleVariable or None
        self.kwdefaults = kwdefaults  # DictVariable or None
        self.closure = closure  # tuple of CellVariable | None
        self.annotations = annotations  # MAKE_FUNCTION's (name, value, ...) tuple or None

    def get_code(self):
        return self.code

    def get_globals(self):
        return self.f_globals

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(self.qualname.rsplit(".", 1)[-1] if name == "__name__" else self.qualname)
        if name == "__code__":
            return ConstantVariable(self.code)
        unsupported(f"function attribute {name}")

    def reconstruct(self, cg):
        code, f_globals, name = self.code, self.f_globals, self.qualname
        cells = [cg.recipe(c) for c in self.closure.items] if self.closure else None
        defaults = cg.recipe(self.defaults) if self.defaults is not None else (lambda rt: None)
        kwdefaults = cg.recipe(self.kwdefaults) if self.kwdefaults is not None else (lambda rt: None)
        annotations = cg.recipe(self.annotations) if self.annotations is not None else None

        def make(rt):
            closure = tuple(c(rt) for c in cells) if cells is not None else None
            fn = types.FunctionType(code, f_globals, name.rsplit(".", 1)[-1], defaults(rt), closure)
            fn.__kwdefaults__ = kwdefaults(rt)
            fn.__qualname__ = name
            if annotations is not None:
                pairs = annotations(rt)
                fn.__annotations__ = dict(pairs) if isinstance(pairs, dict) else dict(zip(pairs[::2], pairs[1::2]))
            return fn
        return make

    def __repr__(self):
        return f"NestedUserFunctionVariable({self.qualname})"


class BoundMethodVariable(VariableTracker):
    """``obj.method``: a function tracker plus the tracker of ``self``."""

    def __init__(self, fn_vt, self_vt, source=None):
        self.fn_vt = fn_vt
        self.self_vt = self_vt
        self.source = source

    def python_type(self):
        return types.MethodType

    def call_function(self, tx, args, kwargs):
        return self.fn_vt.call_function(tx, [self.self_vt, *args], kwargs)

    def var_getattr(self, tx, name):
        if name == "__self__":
            return self.self_vt
        if name == "__func__":
            return self.fn_vt
        return self.fn_vt.var_getattr(tx, name)

    def reconstruct(self, cg):
        fn, obj = cg.recipe(self.fn_vt), cg.recipe(self.self_vt)
        return lambda rt: types.MethodType(fn(rt), obj(rt))

    def __repr__(self):
        return f"BoundMethodVariable({self.fn_vt!r}, {self.self_vt!r})"


def bind_args(tx, code, defaults, kwdefaults, args, kwargs, fn_name):
    """Bind argument trackers to ``code``'s parameters as CPython does; dict name → tracker."""
    from .containers import DictVariable, TupleVariable

    nargs = code.co_argcount
    nkw = code.co_kwonlyargcount
    names = code.co_varnames
    posonly = code.co_posonlyargcount
    result = {}
    defaults = list(defaults or ())
    for i, a in enumerate(args[:nargs]):
        result[names[i]] = a
    extra = list(args[nargs:])
    if extra and not code.co_flags & 0x04:
        unsupported(f"{fn_name}() takes {nargs} positional arguments but {len(args)} were given")
    kwargs = dict(kwargs)
    varkw = {}
    for k, v in kwargs.items():
        idx = names.index(k) if k in names[: nargs + nkw] else -1
        if idx >= posonly and idx != -1:
            if k in result:
                unsupported(f"{fn_name}() got multiple values for argument '{k}'")
            result[k] = v
        elif code.co_flags & 0x08:
            varkw[k] = v
        else:
            unsupported(f"{fn_name}() got an unexpected keyword argument '{k}'")
    first_default = nargs - len(defaults)
    for i in range(nargs):
        if names[i] not in result:
            if i >= first_default:
                result[names[i]] = defaults[i - first_default]
            else:
                unsupported(f"{fn_name}() missing required argument '{names[i]}'")
    for k in names[nargs: nargs + nkw]:
        if k not in result:
            if kwdefaults and k in kwdefaults:
                result[k] = kwdefaults[k]
            else:
                unsupported(f"{fn_name}() missing required keyword-only argument '{k}'")
    i = nargs + nkw
    if code.co_flags & 0x04:
        result[names[i]] = TupleVariable(extra)
        i += 1
    if code.co_flags & 0x08:
        result[names[i]] = DictVariable({k: (ConstantVariable(k), v) for k, v in varkw.items()})
    return result


def wrap_constant_like_fn(tx, fn):
    from .builder import wrap_constant_like

    return wrap_constant_like(tx, fn)


def _call_grad_mode_decorated(tx, fn, args, kwargs):
    """A function decorated with ``@torch.no_grad()`` / ``@torch.enable_grad()``: the
    context is traced around the inlined function."""
    import torch

    from .ctx_manager import GradModeVariable

    cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__)))
    ctx = cells["ctx_factory"]()
    if type(ctx) not in (torch.no_grad, torch.enable_grad):
        unsupported(f"function decorated with {type(ctx).__name__}")
    tracker = GradModeVariable(type(ctx) is torch.enable_grad, torch.is_grad_enabled())
    exit_vt = tracker.enter(tx)
    tx.root.active_contexts.append(tracker)
    result = UserFunctionVariable(cells["func"]).call_function(tx, args, kwargs)
    exit_vt.call_function(tx, [], {})
    return result


def real_callable(vt):
    """The real function behind a function/method tracker (for introspection only)."""
    if isinstance(vt, UserFunctionVariable):
        return vt.fn
    if isinstance(vt, BoundMethodVariable) and isinstance(vt.fn_vt, UserFunctionVariable) and hasattr(vt.self_vt, "value"):
        return types.MethodType(vt.fn_vt.fn, vt.self_vt.value)
    if hasattr(vt, "value") and callable(vt.value):
        return vt.value
    unsupported(f"inspect.signature of {vt}")


class PartialVariable(VariableTracker):
    """``functools.partial(func, *args, **keywords)``: calling it calls ``func`` with the
    stored arguments first and the call's keywords overriding the stored ones."""

    rebuilt_once = True  # one object per run of the transformed code (identity)

    def __init__(self, func, args, keywords, source=None):
        self.func = func
        self.args = list(args)
        self.keywords = dict(keywords)
        self.source = source

    def python_type(self):
        import functools

        return functools.partial

    def call_function(self, tx, args, kwargs):
        return self.func.call_function(tx, [*self.args, *args], {**self.keywords, **kwargs})

    def var_getattr(self, tx, name):
        from .containers import DictVariable, TupleVariable

        if name == "func":
            return self.func
        if name == "args":
            return TupleVariable(self.args)
        if name == "keywords":
            return DictVariable({k: (ConstantVariable(k), v) for k, v in self.keywords.items()})
        unsupported(f"partial attribute {name}")

    def reconstruct(self, cg):
        import functools

        if self.source is not None:
            return cg.from_source(self.source)
        func, args = cg.recipe(self.func), [cg.recipe(a) for a in self.args]
        keywords = {k: cg.recipe(v) for k, v in self.keywords.items()}
        return lambda rt: functools.partial(func(rt), *[a(rt) for a in args], **{k: v(rt) for k, v in keywords.items()})

    def __repr__(self):
        return f"PartialVariable({self.func!r})"


def make_partial(tx, args, kwargs):
    """``functools.partial(...)`` called during tracing (a partial of a partial flattens,
    as CPython's does)."""
    if not args:
        unsupported("TypeError: type 'partial' takes at least one argument")
    func, rest = args[0], args[1:]
    if isinstance(func, PartialVariable):
        return PartialVariable(func.func, [*func.args, *rest], {**func.keywords, **kwargs})
    return PartialVariable(func, rest, kwargs)


class OperatorGetterVariable(VariableTracker):
    """``operator.itemgetter`` / ``attrgetter`` / ``methodcaller`` made in the frame."""

    rebuilt_once = True  # one object per run of the transformed code (identity)

    def __init__(self, cls, args, kwargs):
        import operator

        if cls is not operator.methodcaller and kwargs:
            unsupported(f"TypeError: {cls.__name__}() takes no keyword arguments")
        if not args:
            unsupported(f"TypeError: {cls.__name__} expected 1 argument, got 0")
        if cls is not operator.itemgetter and not all(
                a.is_python_constant() and isinstance(a.as_python_constant(), str) for a in args[:1 if
                                                                                             cls is operator.methodcaller else None]):
            unsupported(f"TypeError: {cls.__name__} names must be strings")
        self.cls = cls
        self.args = list(args)
        self.kwargs = dict(kwargs)

    def python_type(self):
        return self.cls

    def call_function(self, tx, args, kwargs):
        import operator

        from .containers import TupleVariable

        if len(args) != 1 or kwargs:
            unsupported(f"TypeError: {self.cls.__name__} expected 1 argument, got {len(args)}")
        obj = args[0]
        if self.cls is operator.methodcaller:
            return obj.call_method(tx, self.args[0].as_python_constant(), self.args[1:], self.kwargs)
        if self.cls is operator.itemgetter:
            values = [tx.getitem(obj, a) for a in self.args]
        else:
            values = []
            for a in self.args:
                value = obj
                for part in a.as_python_constant().split("."):
                    value = tx.getattr(value, part)
                values.append(value)
        return values[0] if len(values) == 1 else TupleVariable(values)

    def reconstruct(self, cg):
        cls, args = self.cls, [cg.recipe(a) for a in self.args]
        kwargs = {k: cg.recipe(v) for k, v in self.kwargs.items()}
        return lambda rt: cls(*[a(rt) for a in args], **{k: v(rt) for k, v in kwargs.items()})
