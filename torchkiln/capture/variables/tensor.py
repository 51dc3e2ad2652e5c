"""Trackers for tensors and symbolic ints: each holds an FX node and a fake example value.

Operations on a :class:`TensorVariable` run on its FakeTensor (under capture's
FakeTensorMode, so shapes, dtypes and devices propagate exactly) and are recorded as
``call_function`` / ``call_method`` nodes, as TorchDynamo's TensorVariable does.
Reading a tensor's value in Python (``bool(t)``, ``t.item()``, ``t.tolist()``) is a graph
break, unless ``config.capture_scalar_outputs``: then ``.item()``/``.tolist()`` stay in the
graph as unbacked symbols (``u0``...), and a branch on one that the ShapeEnv cannot
decide is the graph break (:func:`data_dependent_break`).
"""
from __future__ import annotations

import contextlib
import operator

import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from ...config import config
from .base import ConstantVariable, VariableTracker, unsupported

# Attributes answered from the fake value without a graph node.
_STATIC_ATTRS = {"dtype", "device", "layout", "ndim", "requires_grad", "is_cuda", "is_sparse", "is_quantized",
                 "is_meta", "is_nested", "is_mkldnn"}
# Methods answered from the fake value (return Python values about metadata).
_STATIC_METHODS = {"dim", "ndimension", "is_floating_point", "is_complex", "element_size", "get_device",
                   "is_contiguous", "is_signed", "nelement", "numel", "stride", "storage_offset", "size",
                   "is_inference", "has_names", "__len__"}
# In-place ops that change sizes, strides, offset or storage (not only values).
_METADATA_MUTATIONS = {"t_", "transpose_", "swapdims_", "swapaxes_", "unsqueeze_", "squeeze_", "as_strided_",
                       "resize_", "resize_as_", "set_", "detach_"}
_BREAK_METHODS = {"item", "tolist", "numpy", "__bool__", "data_ptr", "backward", "register_hook",
                  "untyped_storage", "storage", "__index__", "__int__", "__float__", "nonzero_static"}


class TensorVariable(VariableTracker):
    """A tensor in the graph: ``node`` (fx.Node) and ``example`` (FakeTensor)."""

    def __init__(self, node, example, source=None, class_type=torch.Tensor):
        self.node = node
        self.example = example
        self.source = source
        self.class_type = class_type

    def python_type(self):
        return self.class_type

    def truth(self, tx):
        unsupported("data-dependent control flow: Tensor.__bool__ (branching on a tensor's value)")

    def reconstruct(self, cg):
        return cg.graph_output(self)

    def var_getattr(self, tx, name):
        from .builder import wrap_constant_like
        from .containers import SizeVariable

        ex = self.example
        if name == "shape":
            return SizeVariable.from_size(tx, self, ex.shape)
        if name in _STATIC_ATTRS:
            return wrap_constant_like(tx, getattr(ex, name))
        if name == "is_leaf":
            return ConstantVariable(not ex.requires_grad or self.node.op == "placeholder")
        if name in ("grad", "grad_fn", "_base", "_version"):
            unsupported(f"Tensor.{name}")
        if name in ("T", "mT", "H", "mH", "real", "imag", "data"):
            return tx.output.call_function(tx, getattr, [self, ConstantVariable(name)], {})
        if callable(getattr(torch.Tensor, name, None)):
            from .base import MethodVariable

            return MethodVariable(self, name)
        unsupported(f"Tensor attribute {name}")

    def call_method(self, tx, name, args, kwargs):
        from .builder import wrap_constant_like
        from .containers import SizeVariable

        if name in _BREAK_METHODS:
            if name in ("item", "tolist") and not args and not kwargs and config.capture_scalar_outputs:
                # unbacked SymInt/SymFloat/SymBool values (u0, ...), as under torch.compile
                return tx.output.call_method(tx, name, [self], {})
            unsupported(f"Tensor.{name}() reads a tensor's value in Python")
        if name in _STATIC_METHODS:
            if name == "size" and not kwargs:
                if not args:
                    return SizeVariable.from_size(tx, self, self.example.shape)
                return SizeVariable.from_size(tx, self, self.example.shape).getitem(tx, args[0])
            cargs = [a.as_python_constant() for a in args]
            ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
            value = getattr(self.example, name)(*cargs, **ckw)
            if _has_symbols(value):
                return tx.output.call_method(tx, name, [self, *args], kwargs)
            return wrap_constant_like(tx, value)
        if name == "type" and not args and not kwargs:
            return ConstantVariable(self.example.type())
        if name == "__setitem__":
            tx.output.call_function(tx, operator.setitem, [self, *args], {})
            return ConstantVariable(None)
        if name == "__getitem__":
            if len(args) == 1 and isinstance(args[0], SymNodeVariable) and isinstance(args[0].example, torch.SymInt):
                # x[n] with a SymInt: Tensor.__getitem__ would specialise it through __index__
                return tx.output.call_method(tx, "select", [self, ConstantVariable(0), args[0]], {})
            return tx.output.call_function(tx, operator.getitem, [self, *args], {})
        if name == "__len__":
            return self.call_method(tx, "size", [ConstantVariable(0)], {})
        if name in ("__contains__",):
            unsupported("Tensor.__contains__ reads a tensor's value")
        if name in ("requires_grad_", "retain_grad") and self.node.op == "placeholder":
            unsupported(f"Tensor.{name} on a graph input")
        if name == "retain_grad":  # the graph's outputs are new tensors: it runs on those, eagerly
            unsupported("Tensor.retain_grad inside the graph")
        if name == "requires_grad_":
            # a tensor of the graph cannot become a leaf that requires grad (nor stop
            # requiring it) inside the graph; no change is a no-op (as torch.compile)
            flag = (list(args) + list(kwargs.values()) + [ConstantVariable(True)])[0]
            if flag.is_python_constant() and bool(flag.as_python_constant()) == self.example.requires_grad:
                return self
            unsupported("Tensor.requires_grad_ changes requires_grad inside the graph")
        if name in _METADATA_MUTATIONS and self.node.op == "placeholder":
            # the input's fake (shared with the backend's fakes) would take the new
            # sizes/strides/storage, so the compiled graph would see them as the input's;
            # torch.compile breaks the graph here too
            unsupported(f"Tensor.{name} changes a graph input's sizes, strides or storage")
        return tx.output.call_method(tx, name, [self, *args], kwargs)

    def unpack_var_sequence(self, tx):
        size = self.example.shape[0] if self.example.dim() else None
        if size is None or not isinstance(size, int):
            unsupported("iterating over a tensor with a dynamic or missing dim 0")
        return [tx.output.call_function(tx, operator.getitem, [self, ConstantVariable(i)], {}) for i in range(size)]

    def __repr__(self):
        return f"TensorVariable({self.node.name})"


@contextlib.contextmanager
def data_dependent_break(what: str):
    """Turns the ShapeEnv's refusal to guess a data-dependent value (an expression over
    unbacked symbols from ``.item()``, ``nonzero``...) into a graph break naming it."""
    try:
        yield
    except GuardOnDataDependentSymNode as e:
        expr = getattr(e, "cond", None)
        unsupported(f"data-dependent branch: {what} {expr if expr is not None else 'a data-dependent value'}, "
                    "which capture cannot decide (its value comes from a tensor's data); use torch._check "
                    "to state it, or torch.cond")


def _has_symbols(value) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, (tuple, list)):
        return any(_has_symbols(v) for v in value)
    return False


class SymNodeVariable(VariableTracker):
    """A symbolic int/float/bool (a size expression over ShapeEnv symbols) in the graph."""

    def __init__(self, node, example, source=None):
        self.node = node
        self.example = example
        self.source = source

    def python_type(self):
        return {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}.get(type(self.example), type(self.example))

    def truth(self, tx):
        with data_dependent_break("branching on"):
            return bool(self.example)  # ShapeEnv records the guard this implies

    def as_python_constant(self):
        unsupported("a symbolic size is not a constant")

    def evaluate_int(self) -> int:
        """Specialise to the current value (adds a ShapeEnv guard)."""
        with data_dependent_break("converting to a Python int"):
            return int(self.example)

    def specialize(self) -> ConstantVariable:
        """Its current value as a constant, guarded (a ShapeEnv guard ``s0 == 3``: another
        value recompiles), as torch.compile does where a Python value is needed: a dict or
        set key, ``str()``/``repr()``/``format()``, an f-string."""
        cast = self.python_type()
        with data_dependent_break(f"using as a Python {cast.__name__}"):
            return ConstantVariable(cast(self.example))

    def reconstruct(self, cg):
        return cg.graph_output(self)

    def call_method(self, tx, name, args, kwargs):
        return tx.output.call_method(tx, name, [self, *args], kwargs)

    def __repr__(self):
        return f"SymNodeVariable({self.example})"


def specialize_symbolic(vt):
    """``vt``, or its guarded constant value when it is a symbolic int/float/bool."""
    return vt.specialize() if isinstance(vt, SymNodeVariable) else vt
