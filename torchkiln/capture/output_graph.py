"""The FX graph being built for one frame, its inputs, and compiling it with the backend.

Mirrors TorchDynamo's OutputGraph: placeholders carry ``meta["example_value"]`` (a
FakeTensor from the frame's FakeTensorMode/ShapeEnv, or a SymInt) and ``meta["source"]``;
every op is run on fake values as it is recorded; the graph returns a tuple; the
backend gets ``(gm, example_inputs)`` with the real input values.  A backend that raises
falls back to running the graph as it is (eager) with one warning, or raises
:class:`torchkiln.exc.BackendCompilerFailed` when ``config.suppress_errors`` is False.
"""
from __future__ import annotations

import builtins
import operator
import warnings

import torch
import torch.fx
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, compute_unbacked_bindings

from ..config import config
from ..exc import BackendCompilerFailed, Unsupported
from ..utils.counters import counters
from ..utils import trace
from ..utils.strict import strict_compile
from ..utils.logging import get_artifact_logger
from .side_effects import SideEffects
from .variables.base import ConstantVariable, unsupported

graph_code_log = get_artifact_logger("graph_code")


class GraphInput:
    """One placeholder: its node, source name and the real value of the triggering call."""

    def __init__(self, node, source, value):
        self.node = node
        self.source = source
        self.value = value


def _foldable(value, depth: int = 0) -> bool:
    """Whether an op's non-tensor result may be baked into the transformed code: a
    constant, a type, function or module, or a tuple/list/dict of those (containers are
    rebuilt on each call).  A new object of any other type is not."""
    import types as _types

    from .variables.builder import is_constant

    if is_constant(value) or isinstance(value, (type, _types.FunctionType, _types.BuiltinFunctionType,
                                                 _types.ModuleType, torch.finfo, torch.iinfo, torch.nn.Module)):
        return True
    if depth < 8 and isinstance(value, (tuple, list, set, frozenset)):
        return all(_foldable(v, depth + 1) for v in value)
    if depth < 8 and isinstance(value, dict):
        return all(_foldable(k, depth + 1) and _foldable(v, depth + 1) for k, v in value.items())
    return False


class OutputGraph:
    def __init__(self, code_name: str):
        self.graph = torch.fx.Graph()
        # .item() / nonzero() on fake tensors make unbacked symbols only when allowed
        self.shape_env = ShapeEnv(allow_scalar_outputs=config.capture_scalar_outputs,
                                  allow_dynamic_output_shape_ops=config.capture_dynamic_output_shape_ops)
        self.fake_mode = FakeTensorMode(shape_env=self.shape_env, allow_non_fake_inputs=False)
        self.inputs: list[GraphInput] = []
        self.side_effects = SideEffects()
        self.source_cache: dict[str, object] = {}
        self.id_cache: dict[int, object] = {}
        self.code_name = code_name
        self._last_placeholder = None
        self.symbol_sources: dict = {}  # sympy symbol -> (source name, dim)

    # -- nodes -------------------------------------------------------------------------
    def add_placeholder(self, source: str, value, example):
        name = "".join(c if c.isalnum() else "_" for c in source).strip("_").lower() or "arg"
        if self._last_placeholder is not None:
            ctx = self.graph.inserting_after(self._last_placeholder)
        elif len(self.graph.nodes):
            ctx = self.graph.inserting_before(next(iter(self.graph.nodes)))
        else:
            ctx = self.graph.inserting_before(None)
        with ctx:
            node = self.graph.placeholder(name)
        node.meta["example_value"] = example
        node.meta["source"] = source
        self._last_placeholder = node
        self.inputs.append(GraphInput(node, source, value))
        return node

    def create_node(self, op, target, args, kwargs, example=None):
        if target is operator.pow and args and isinstance(args[0], (int, float)) and repr(args[0]).startswith("-"):
            # FX prints operator.pow(-2, x) as ``-2 ** x``, which Python reads as -(2 ** x);
            # the builtin prints as a call
            target = builtins.pow
        node = self.graph.create_node(op, target, args, kwargs)
        node.meta["example_value"] = example
        return node

    def _map(self, vt):
        """(fx argument, fake value) for a tracker used as an op argument."""
        from .variables.containers import BaseListVariable, DictVariable, SliceVariable
        from .variables.tensor import SymNodeVariable, TensorVariable

        if isinstance(vt, (TensorVariable, SymNodeVariable)):
            return vt.node, vt.example
        if isinstance(vt, ConstantVariable):
            return vt.value, vt.value
        if isinstance(vt, BaseListVariable):
            pairs = [self._map(i) for i in vt.items]
            ctype = tuple if vt.container_type is torch.Size else vt.container_type
            if vt.container_type is torch.Size:
                return tuple(p[0] for p in pairs), torch.Size([p[1] for p in pairs])
            return ctype(p[0] for p in pairs), ctype(p[1] for p in pairs)
        if isinstance(vt, SliceVariable):
            pairs = [self._map(p) for p in vt.parts]
            return slice(*[p[0] for p in pairs]), slice(*[p[1] for p in pairs])
        if isinstance(vt, DictVariable) and vt.is_python_constant():
            value = vt.as_python_constant()
            return value, value
        if isinstance(vt, DictVariable):
            pairs = {k.as_python_constant(): self._map(v) for k, v in vt.items.values()}
            return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
        if vt.is_python_constant():
            value = vt.as_python_constant()
            return value, value
        unsupported(f"{vt} as an argument of a graph op")

    def call_function(self, tx, fn, args, kwargs):
        return self._call(tx, "call_function", fn, args, kwargs)

    def call_method(self, tx, name, args, kwargs):
        return self._call(tx, "call_method", name, args, kwargs)

    def _call(self, tx, op, target, args, kwargs):
        rewrite = _bool_pow_bool(op, target, args, kwargs)
        if rewrite is not None:
            return self._call(tx, "call_function", *rewrite)
        node_args, fake_args = zip(*[self._map(a) for a in args]) if args else ((), ())
        node_kwargs = {}
        fake_kwargs = {}
        for k, v in kwargs.items():
            node_kwargs[k], fake_kwargs[k] = self._map(v)
        if op == "call_function" and _meta_promotes_loss(target, fake_args, fake_kwargs):
            unsupported(f"{getattr(target, '__name__', target)} of tensors of several dtypes: its meta kernel "
                        "promotes the loss's dtype, eager's keeps the input's")
        try:
            with self.fake_mode:
                if op == "call_function":
                    example = target(*fake_args, **fake_kwargs)
                else:
                    example = getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
        except Unsupported:
            raise
        except DynamicOutputShapeException as e:
            unsupported(f"{e.func}: an output shape that depends on the data (set "
                        "config.capture_dynamic_output_shape_ops=True to capture it)")
        except DataDependentOutputException as e:
            unsupported(f"{e.func}: reads a tensor's value (set config.capture_scalar_outputs=True to capture it)")
        except Exception as e:  # noqa: BLE001 - the op is replayed natively after the break
            name = getattr(target, "__name__", target)
            raise Unsupported(f"{name} failed on fake tensors ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from e
        node = self.create_node(op, target, tuple(node_args), node_kwargs, example)
        if self.shape_env.pending_fresh_unbacked_symbols:
            # where each new data-dependent symbol (u0...) comes from in the result: AOT
            # autograd's re-traces rename their own symbols to these
            node.meta["unbacked_bindings"] = compute_unbacked_bindings(self.shape_env, example)
        if isinstance(example, torch.Tensor):
            # an op that returns one of its tensor arguments itself (``x.add_(1)``,
            # ``x += 1``, ``out=``, ``x.contiguous()`` of a contiguous x) gives that
            # argument's tracker, so that ``is`` and identity-keyed containers see one
            # object, as in eager (the node stays: in-place nodes are kept as impure)
            for a, fa in zip(list(args) + list(kwargs.values()), list(fake_args) + list(fake_kwargs.values())):
                if fa is example and hasattr(a, "node") and getattr(a, "example", None) is example:
                    return a
        return self.wrap_result(tx, node, example)

    def wrap_result(self, tx, node, example):
        """Tracker for an op's result; non-tensor constant results drop their node."""
        from .variables.containers import NamedTupleVariable, SizeVariable, TupleVariable, ListVariable
        from .variables.tensor import SymNodeVariable, TensorVariable

        if isinstance(example, torch.Tensor):
            forbid_data_ptr(example)
            return TensorVariable(node, example)
        if isinstance(example, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            const = example.node.maybe_as_int() if isinstance(example, torch.SymInt) else None
            if const is not None:
                self._drop(node)
                return ConstantVariable(const)
            return SymNodeVariable(node, example)
        if isinstance(example, (tuple, list)) and any(_contains_graph_value(e) for e in example):
            items = []
            for i, e in enumerate(example):
                sub = self.create_node("call_function", operator.getitem, (node, i), {}, e)
                items.append(self.wrap_result(tx, sub, e))
            if isinstance(example, torch.Size):
                return SizeVariable(items)
            if isinstance(example, tuple) and hasattr(type(example), "_fields") or type(example).__module__ == "torch.return_types":
                return NamedTupleVariable(items, type(example))
            return TupleVariable(items) if isinstance(example, tuple) else ListVariable(items)
        self._drop(node)
        from .variables.builder import wrap_constant_like

        if not _foldable(example):
            # e.g. a context manager made by a @contextmanager function: one object made
            # at capture time would be shared (and consumed) by every later call
            unsupported(f"{getattr(node.target, '__name__', node.target)} returns a {type(example).__name__} "
                        f"object; it is made by the call, not folded into the graph")
        return wrap_constant_like(tx, example)

    def _eliminate_dead_code(self):
        """Drop unused pure nodes; in-place ops and global-state changes stay."""
        for node in reversed(list(self.graph.nodes)):
            if node.op in ("call_function", "call_method") and not node.users and not _is_impure(node):
                self.graph.erase_node(node)

    def _drop(self, node):
        if not node.users and not _is_impure(node):
            self.graph.erase_node(node)

    # -- compiling -----------------------------------------------------------------------
    def count_ops(self) -> int:
        return sum(1 for n in self.graph.nodes if n.op in ("call_function", "call_method", "call_module"))

    def compile(self, backend, output_vts, fullgraph=False):
        """Add the output node (a tuple of ``output_vts``) and compile with ``backend``.

        A backend that raises falls back to running the graph eagerly with one warning,
        unless ``config.suppress_errors`` is False or ``fullgraph`` is True: then
        :class:`BackendCompilerFailed` (a RuntimeError naming the backend and the
        original error) reaches the user, as under torch.compile.

        Returns ``(compiled_fn, gm)``; graphs without ops are run as they are and not
        counted (torch does not call the backend for them either).
        """
        self.graph.output(tuple(vt.node for vt in output_vts))
        self._eliminate_dead_code()
        gm = torch.fx.GraphModule(torch.nn.Module(), self.graph, class_name="GraphModule")
        gm.meta["torchkiln_sources"] = [i.source for i in self.inputs]
        for i in self.inputs:  # the guard checks these strides of the input before each call
            if isinstance(i.value, torch.Tensor) and i.source in self.guards.stride_sources:
                i.node.meta["torchkiln_guarded_strides"] = tuple(i.node.meta["example_value"].stride())
        if self.count_ops() == 0:
            return gm.forward, None
        counters["stats"]["unique_graphs"] += 1
        graph_code_log.debug("TRACED GRAPH %s\n%s", self.code_name, gm.print_readable(print_output=False))
        if trace.enabled:
            with trace.stage("trace"):
                trace.emit("graph", {"frame": self.code_name, "ops": self.count_ops(),
                                     "sources": [str(i.source) for i in self.inputs],
                                     "code": gm.print_readable(print_output=False)})
        example_inputs = [i.value for i in self.inputs]
        for wrap_backend in _backend_wrappers:
            backend = wrap_backend(backend)
        try:
            with trace.stage("backend"), strict_compile(fullgraph):  # fullgraph: no eager fallback
                compiled = backend(gm, example_inputs)
        except Exception as e:  # noqa: BLE001
            name = getattr(backend, "__name__", type(backend).__name__)
            if fullgraph or not config.suppress_errors:
                raise BackendCompilerFailed(name, e) from e
            warnings.warn(f"torchkiln: backend {name!r} raised {type(e).__name__}: {e}; running the graph eagerly")
            compiled = gm.forward
        return compiled, gm


_backend_wrappers: list = []


def register_backend_wrapper(wrap_backend) -> None:
    """``wrap_backend(backend) -> backend`` is applied to the backend of every graph compile.

    It returns ``backend`` itself when it has nothing to add; torchkiln.distributed
    registers the DDP bucket splitter (``config.optimize_ddp``) this way.
    """
    _backend_wrappers.append(wrap_backend)


_IMPURE = {operator.setitem, torch._C._set_grad_enabled, torch.amp.autocast_mode._enter_autocast,
           torch.amp.autocast_mode._exit_autocast, operator.iadd, operator.isub, operator.imul, operator.itruediv,
           operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul, operator.iand, operator.ior,
           operator.ixor, operator.ilshift, operator.irshift, torch._check, torch._check_is_size}


def _is_impure(node) -> bool:
    target = node.target
    if node.kwargs.get("inplace") is True or "out" in node.kwargs:
        return True
    if node.op == "call_method":
        return target.endswith("_") and not target.endswith("__") or target in ("__setitem__",)
    if target in _IMPURE:
        return True
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable
    name = getattr(target, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


_POW_FUNCTIONS = (torch.pow, operator.pow, torch.Tensor.pow, torch.Tensor.__pow__)


def _bool_pow_bool(op, target, args, kwargs):
    """``b ** True`` and ``b ** False`` of a bool tensor ``b`` as the calls that give
    eager's answer, bool both (a copy of ``b``; all True): the meta kernel reads the bool
    exponent as an int and says int64, so ``y.dtype`` read in the frame differed from
    eager's.  Returns ``(target, args, kwargs)`` of the replacement call, or None."""
    if kwargs or len(args) != 2:
        return None
    if op == "call_method":
        if target not in ("pow", "__pow__"):
            return None
    elif not any(target is f for f in _POW_FUNCTIONS):
        return None
    base, exponent = args
    fake = getattr(base, "example", None)
    if not (isinstance(fake, torch.Tensor) and fake.dtype == torch.bool and exponent.is_python_constant()
            and type(exponent.as_python_constant()) is bool):
        return None
    return (torch.clone if exponent.as_python_constant() else torch.ones_like), (base,), {}


_LOSSES_META_PROMOTES = (
    torch._C._nn.soft_margin_loss, torch._C._nn.huber_loss, torch._C._nn.binary_cross_entropy,
    torch.nn.functional.soft_margin_loss, torch.nn.functional.huber_loss, torch.nn.functional.binary_cross_entropy,
)


def _meta_promotes_loss(target, fake_args, fake_kwargs) -> bool:
    """A loss whose meta kernel (a decomposition) promotes its result to the widest dtype of
    input, target and weight, where eager's kernel returns the input's dtype:
    ``F.soft_margin_loss(x32, t64).dtype`` read in the frame said float64, eager's says
    float32.  Such a call graph-breaks and runs eagerly (codegen's eager_refusals covers
    the same calls where a graph reaches it whole)."""
    if not any(target is f for f in _LOSSES_META_PROMOTES):
        return False
    return len({a.dtype for a in (*fake_args, *fake_kwargs.values()) if isinstance(a, torch.Tensor)}) > 1


def forbid_data_ptr(fake) -> None:
    """Reading a fake tensor's data pointer raises (as under torch.compile), not just warns."""
    setter = getattr(torch._C, "_set_throw_on_mutable_data_ptr", None)
    if setter is not None:
        setter(fake)


def _contains_graph_value(value) -> bool:
    if isinstance(value, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, (tuple, list)):
        return any(_contains_graph_value(v) for v in value)
    return False
