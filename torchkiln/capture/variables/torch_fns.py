"""Trackers for torch functions, ``torch.nn.functional``, ops and Tensor methods.

A call records one graph node after running on fake tensors; a call that returns no
tensor (``torch.is_tensor``, ``torch.finfo``) is folded to a constant.  Functions
libraries branch on — ``torch.compiler.is_compiling()`` and its aliases — fold to
True while capturing, ``torch.jit.is_scripting()`` / ``is_tracing()`` to False.
"""
from __future__ import annotations

import types

import sympy
import torch

from ..guards import global_state
from .base import CellVariable, ConstantVariable, ValueVariable, unsupported


def _maybe(path):
    obj = torch
    try:
        for part in path.split(".")[1:]:
            obj = getattr(obj, part)
    except AttributeError:
        return None
    return obj


_IS_COMPILING = {id(f) for f in (
    _maybe("torch.compiler.is_compiling"),  # boundary: ok
    _maybe("torch.compiler.is_dynamo_compiling"),  # boundary: ok
    _maybe("torch._dynamo.is_compiling"),  # boundary: ok
    _maybe("torch._dynamo.external_utils.is_compiling"),  # boundary: ok
    _maybe("torch._utils.is_compiling"),
) if f is not None}
_FALSE = {id(f) for f in (torch.jit.is_scripting, torch.jit.is_tracing, torch._C._get_tracing_state,
                          _maybe("torch.fx._symbolic_trace.is_fx_tracing"),
                          _maybe("torch.compiler.is_exporting")) if f is not None}  # boundary: ok
# folded without a guard: pure functions of their arguments (grad mode is guarded per frame anyway)
_FOLD = {id(f) for f in (torch.finfo, torch.iinfo, torch.is_grad_enabled, torch.promote_types, torch.can_cast,
                         torch.cuda.is_available, torch.device)}
_BREAK = {id(f) for f in (torch.manual_seed, torch.seed, torch.set_default_dtype, torch.use_deterministic_algorithms,
                          torch.set_num_threads, torch.save, torch.load, torch.set_printoptions,
                          torch.nn.Parameter, torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)}


# torch's checks -> the error eager raises when the condition is False (None: the first
# argument of ``_check_with``)
_CHECK_ERRORS = {torch._check: RuntimeError, torch._check_is_size: RuntimeError, torch._check_with: None,
                 torch._check_index: IndexError, torch._check_value: ValueError, torch._check_type: TypeError,
                 torch._check_not_implemented: NotImplementedError}
_CHECKS = {id(f): f for f in _CHECK_ERRORS}
# what a message function may name: builtins and ``str`` methods that only format its constants
_PURE_NAMES = frozenset({"str", "repr", "format", "join", "len", "int", "float", "bool", "round", "abs", "min",
                         "max", "tuple", "list", "sorted", "upper", "lower", "strip"})


def _message(tx, var):
    """The text eager's check would raise with: None for torch's default, else the message
    function's result, computed now.  Only a function that merely formats constants (its
    closure cells and defaults constants, no calls but builtins) is run; any other is a
    graph break (eager then runs the check, with its message)."""
    import builtins

    from .functions import NestedUserFunctionVariable, UserFunctionVariable

    if var is None or (isinstance(var, ConstantVariable) and var.value is None):
        return None
    fn = None
    if isinstance(var, UserFunctionVariable):
        fn = var.fn
    elif isinstance(var, NestedUserFunctionVariable):
        try:
            cells = tuple(types.CellType((c.value if isinstance(c, CellVariable) else c.load(tx)).as_python_constant())
                          for c in var.closure.items) if var.closure else None
            defaults = var.defaults.as_python_constant() if var.defaults is not None else None
        except Exception:  # noqa: BLE001 - a cell or default that is not a constant
            cells = defaults = ()
        if cells != ():
            fn = types.FunctionType(var.code, var.f_globals, "message", defaults, cells)
    code = getattr(fn, "__code__", None)
    pure = (code is not None and not any(isinstance(c, types.CodeType) for c in code.co_consts)
            and all(n in _PURE_NAMES and fn.__globals__.get(n, getattr(builtins, n, None)) is getattr(builtins, n, None)
                    for n in code.co_names))
    if pure:
        try:
            return str(fn())
        except Exception:  # noqa: BLE001 - eager would raise it at the failure; let eager do so
            pass
    unsupported("the message function of a torch._check on a data-dependent condition does more than format "
                "constants: it cannot be computed ahead (the check runs eagerly)")


def _call_check(tx, fn, args, kwargs):
    """``torch._check(cond, msg)``, ``_check_is_size(i, msg, max=)``, ``_check_with(E, cond, msg)``,
    ``_check_index`` / ``_check_value`` / ``_check_type`` / ``_check_not_implemented``: run on
    the fake value (the ShapeEnv learns the fact: a guard for sizes it knows, a deferred
    runtime assert for data-dependent ones) and recorded in the graph, so that AOT autograd's
    trace learns it again.  A data-dependent condition is also recorded as a
    :class:`~torchkiln.shapes.checks.UserCheck` with eager's error type and message, which
    the code generator asserts at run time."""
    import inspect

    from ...shapes.checks import UserCheck, record
    from .tensor import SymNodeVariable

    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        unsupported(f"{fn.__name__} called with {e}")
    params = bound.arguments
    error = _CHECK_ERRORS[fn] or params["error_type"].as_python_constant()
    if not (isinstance(error, type) and issubclass(error, Exception) and not issubclass(error, Warning)):
        unsupported(f"torch._check_with of the error type {error!r}")
    msg_var = params.get("message")
    if fn is torch._check_is_size:
        subject, limit = params["i"], params.get("max")
        if limit is not None and not limit.is_python_constant():
            unsupported("torch._check_is_size with a symbolic max")
        limit = None if limit is None else limit.as_python_constant()
    else:
        subject, limit = params["cond"], None
    if not isinstance(subject, SymNodeVariable):
        value = subject.as_python_constant()
        holds = (value >= 0 and (limit is None or value <= limit)) if fn is torch._check_is_size else value
        if not holds:
            unsupported(f"{fn.__name__} of a condition that is False when captured")
        return ConstantVariable(None)
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    expr = subject.example.node.expr
    conds = [sympy.Ge(expr, 0), *([sympy.Le(expr, limit)] if limit is not None else [])] \
        if fn is torch._check_is_size else [expr]
    if free_unbacked_symbols(expr):
        message = _message(tx, msg_var)  # before the ShapeEnv learns anything: this may break
        env = subject.example.node.shape_env
        for cond in conds:
            record(env, UserCheck(cond, error, message))
    target, extra = (torch._check_is_size, {"max": ConstantVariable(limit)} if limit is not None else {}) \
        if fn is torch._check_is_size else (torch._check, {})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # _check_is_size's deprecation notice
        tx.output.call_function(tx, target, [subject], extra)
    return ConstantVariable(None)


def is_torch_function(value) -> bool:
    """Whether ``value`` is a torch function/op that becomes one graph call."""
    if isinstance(value, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        return True
    if isinstance(value, type) or isinstance(value, types.ModuleType):
        return False
    if not callable(value):
        return False
    if isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType, types.FunctionType,
                          types.MethodDescriptorType, types.WrapperDescriptorType, types.MethodWrapperType)):
        module = getattr(value, "__module__", None) or ""
        if isinstance(value, (types.MethodDescriptorType, types.WrapperDescriptorType)):
            return getattr(value, "__objclass__", None) in (torch._C.TensorBase, torch.Tensor)
        if isinstance(value, types.FunctionType) and getattr(value, "__qualname__", "").startswith("Tensor."):
            return True
        if module.startswith(("torch.nn.modules", "torch.utils", "torch.fx", "torch.distributed", "torch.testing",
                              "torch.autograd.function", "torch.overrides", "torch._C._dynamo", "torch._dynamo")):
            return False
        return module == "torch" or module.startswith(("torch.", "torch._C"))
    return False


# Queries of global state that is not guarded on every call (autocast, inference mode):
# folded at trace time to their value, guarded on the state the frame was entered with
# (as TorchDynamo's GLOBAL_STATE guard covers them).  fn -> (args -> state key).
_DEVICE_QUERIES = {torch.is_autocast_enabled: None, torch.get_autocast_dtype: None,
                   torch.is_autocast_cpu_enabled: "cpu", torch.get_autocast_cpu_dtype: "cpu",
                   torch.get_autocast_gpu_dtype: "cuda"}
_STATE_QUERIES = {torch.is_autocast_cache_enabled: "autocast_cache",
                  torch.is_inference_mode_enabled: "inference_mode",
                  torch.get_default_dtype: "default_dtype",
                  torch.are_deterministic_algorithms_enabled: "deterministic",
                  torch.is_deterministic_algorithms_warn_only_enabled: "deterministic_warn_only",
                  torch._C._get_cublas_allow_tf32: "cublas_allow_tf32"}


def global_state_query(fn, args, kwargs):
    """``tx -> tracker`` folding a call of a global-state query, or None if ``fn`` is not one
    (or its arguments are not constants, or it raises: then it is traced as a call)."""
    if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
        return None
    try:
        key = _STATE_QUERIES.get(fn)
        if key is None and fn in _DEVICE_QUERIES:
            device = _DEVICE_QUERIES[fn]
            if device is None:
                if kwargs or len(args) > 1:
                    return None
                device = args[0].as_python_constant() if args else "cuda"  # torch's default for the old form
            if not isinstance(device, str):
                return None
            key = f"autocast:{device}"
    except TypeError:  # an unhashable argument
        return None
    if key is None:
        return None
    try:
        value = fn(*[a.as_python_constant() for a in args], **{k: v.as_python_constant() for k, v in kwargs.items()})
        global_state(key)
    except Exception:  # noqa: BLE001 - e.g. an unknown device: the call runs and raises as eager
        return None

    def fold(tx):
        from .builder import wrap_constant_like

        tx.root.guard_global_state(key)
        return wrap_constant_like(tx, value)
    return fold


def _has_opaque_argument(tx, args, kwargs) -> bool:
    """Whether an argument (a module, a user object) cannot be an argument of a graph node."""
    from ...exc import Unsupported

    for a in (*args, *kwargs.values()):
        try:
            tx.output._map(a)
        except Unsupported:
            return True
    return False


class TorchVariable(ValueVariable):
    """A torch function, ``torch.nn.functional`` function, ATen op or Tensor method."""

    def reconstruct(self, cg):
        value = self.value
        return lambda rt: value

    def var_getattr(self, tx, name):
        from .builder import wrap_constant_like

        return wrap_constant_like(tx, getattr(self.value, name))

    def call_function(self, tx, args, kwargs):
        fn = self.value
        if id(fn) in _IS_COMPILING:
            return ConstantVariable(True)
        if id(fn) in _FALSE:
            return ConstantVariable(None if fn is torch._C._get_tracing_state else False)
        query = global_state_query(fn, args, kwargs)
        if query is not None:
            return query(tx)
        if fn is torch._C._set_grad_enabled or fn is torch.set_grad_enabled:
            from .ctx_manager import GradModeVariable, set_grad

            mode = args[0].as_python_constant()
            initial = torch.is_grad_enabled()
            set_grad(tx, mode)
            return GradModeVariable(mode, initial, applied=True)
        name = getattr(fn, "__name__", "")
        if id(fn) in _BREAK or name.startswith(("set_", "_set_")) or "autocast" in name or name.endswith("_nesting"):
            unsupported(f"call to {getattr(fn, '__qualname__', fn)} (changes global state; not traceable)")
        if id(fn) in _FOLD:
            value = fn(*[a.as_python_constant() for a in args], **{k: v.as_python_constant() for k, v in kwargs.items()})
            from .builder import wrap_constant_like

            return wrap_constant_like(tx, value)
        if id(fn) in _CHECKS:
            return _call_check(tx, _CHECKS[id(fn)], args, kwargs)
        if fn is torch.is_tensor or fn is torch.overrides.is_tensor_like:
            from .tensor import TensorVariable

            return ConstantVariable(isinstance(args[0], TensorVariable))
        from ..polyfills import call_polyfill, polyfill_for

        poly = polyfill_for(fn)
        if poly is not None:  # torch.cov & co. (polyfills/torch_ops.py)
            return call_polyfill(tx, poly, args, kwargs)
        if isinstance(fn, types.FunctionType) and _has_opaque_argument(tx, args, kwargs):
            # a Python function of torch (F.triplet_margin_with_distance_loss with a module as
            # its distance, F.linear_cross_entropy with an options object) cannot be one graph
            # node: traced into, as torch.compile inlines torch.nn.functional
            from .functions import UserFunctionVariable

            return UserFunctionVariable(fn).call_function(tx, args, kwargs)
        return tx.output.call_function(tx, fn, args, kwargs)

    def __repr__(self):
        return f"TorchVariable({getattr(self.value, '__name__', self.value)})"

