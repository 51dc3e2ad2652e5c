"""GraphLowering: run an ATen FX graph through the lowering table.

Produces the ordered buffers (computed, extern), the graph inputs with the wrapper
code that binds each size symbol, and the lowered outputs.  Mirrors
``torch._inductor.graph.GraphLowering``.
"""
from __future__ import annotations

import operator

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import resolve_unbacked_bindings

from . import config, nodes
from . import layout as layout_opt
from .eager_refusals import eager_refuses
from .lowering import fallback_handler, lowerings, make_extern
from .nodes import InputBuffer, Layout, Pointwise, Reduction, TensorBox, to_sympy

aten = torch.ops.aten


UNBACKED_HINT = 8192  # example size of an unbacked symbol (as TorchInductor's unbacked_symint_fallback)


def _int_or(bound, default: int) -> int:
    try:
        return int(bound)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return default  # an infinite bound


class GraphLowering:
    """Lowers ``gm``; after :meth:`run`, ``buffers`` (program order), ``inputs`` and
    ``outputs`` describe the computation.  Raises on anything it cannot lower safely
    (the caller falls back to eager)."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs) -> None:
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.buffers: dict[str, nodes.Buffer] = {}
        self.inputs: list[tuple[str, object]] = []   # (placeholder name, InputBuffer | sympy expr | None)
        self.guarded_strides: set[str] = set()  # inputs whose strides the caller's guard checks
        self.symbol_sources: dict[sympy.Symbol, str] = {}
        self.outputs: list = []
        self.constants: dict[str, torch.Tensor] = {}  # get_attr tensors, wrapper globals
        self.current_node = None
        self.shape_env = None
        self._input_offsets: dict[str, sympy.Expr] = {}
        self._counter = 0
        self._indirect = 0
        self.unbacked_defs: dict[sympy.Symbol, str] = {}  # unbacked symbol -> extern kernel binding it

    # ---- helpers used by lowerings
    def register_buffer(self, make) -> nodes.Buffer:
        name = f"buf{self._counter}"
        self._counter += 1
        buf = make(name)
        self.buffers[name] = buf
        return buf

    def new_indirect_symbol(self) -> sympy.Symbol:
        self._indirect += 1
        return sympy.Symbol(f"i{self._indirect - 1}", integer=True)

    def hint(self, expr: sympy.Expr) -> int:
        """Example value of ``expr``; an unbacked symbol (no example) counts as
        :data:`UNBACKED_HINT` clamped into its value range: good for heuristics
        (block sizes, density checks), never for a decision about the result."""
        expr = sympy.sympify(expr)
        if not expr.free_symbols:
            return int(expr) if expr.is_integer else float(expr)
        if self.shape_env is None:
            raise RuntimeError(f"no hint for {expr}")
        value = expr.xreplace({s: sympy.Integer(v) for s, v in self.size_hints().items()})
        return int(value) if value.is_integer else float(value)

    def size_hints(self) -> dict:
        if self.shape_env is None:
            return {}
        hints = {s: int(v) for s, v in self._var_to_val().items()}
        for sym, vr in self.shape_env.var_to_range.items():
            if sym not in hints and sym.name.startswith("u"):
                lower = _int_or(vr.lower, 0)
                upper = _int_or(vr.upper, UNBACKED_HINT)
                hints[sym] = max(lower, min(UNBACKED_HINT, upper))
        return hints

    def is_unbacked(self, expr) -> bool:
        """Whether ``expr`` reads a data-dependent (unbacked) symbol."""
        return any(s.name.startswith("u") for s in sympy.sympify(expr).free_symbols)

    def bounds(self, expr):
        """The value range (sympy lower, upper) of ``expr`` known to the ShapeEnv."""
        vr = self.shape_env.bound_sympy(sympy.sympify(expr))
        return vr.lower, vr.upper

    def _var_to_val(self) -> dict:
        env = self.shape_env
        # torch >= 2.13 names it backed_var_to_val (var_to_val warns there)
        return env.backed_var_to_val if hasattr(type(env), "backed_var_to_val") or "backed_var_to_val" in vars(env) else env.var_to_val

    def layout_of(self, val: torch.Tensor) -> Layout:
        return Layout([to_sympy(s) for s in val.shape], [to_sympy(s) for s in val.stride()],
                      sympy.Integer(0), val.dtype, val.device)

    def storage_offset_of(self, buf) -> sympy.Expr:
        return self._input_offsets.get(buf.name, sympy.Integer(0))

    # ---- the lowering pass
    def __enter__(self):
        """Make this the graph lowerings and inner functions register with."""
        nodes._graph_stack.append(self)
        return self

    def __exit__(self, *exc):
        nodes._graph_stack.pop()
        return False

    def run(self):
        with self:
            env = {}
            for node in self.gm.graph.nodes:
                self.current_node = node
                env[node] = self._lower(node, env)
        return self

    def _note_shape_env(self, val):
        if isinstance(val, torch.Tensor):
            fake_mode = getattr(val, "fake_mode", None)
            if fake_mode is not None and fake_mode.shape_env is not None:
                self.shape_env = fake_mode.shape_env
        elif isinstance(val, torch.SymInt):
            self.shape_env = val.node.shape_env

    def _lower(self, node, env):
        val = node.meta.get("val")
        if node.op == "call_function" and node.meta.get("unbacked_bindings"):
            return self._lower_unbacked_def(node, env, val)
        if node.op == "placeholder":
            return self._placeholder(node, val)
        if node.op == "output":
            outs = node.args[0]
            # a forward graph's outputs past ``user_visible_outputs`` (aot/dispatch.py) are
            # saved for the backward, which is compiled for the strides they get here
            visible = node.meta.get("user_visible_outputs", len(outs))
            self.outputs = [self._output(env[o] if isinstance(o, torch.fx.Node) else o, o, i < visible)
                            for i, o in enumerate(outs)]
            return None
        if node.op == "get_attr":
            return self._constant(node)
        if node.op != "call_function":
            raise NotImplementedError(f"cannot lower {node.op} nodes")
        args = torch.fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
        if node.target is operator.getitem and isinstance(args[0], (tuple, list)):
            return args[0][args[1]]
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)) and not isinstance(val, torch.Tensor):
            return to_sympy(val)
        lower = lowerings.get(node.target)
        if lower is None or _has_non_kernel_dtype(node) or _eager_refuses(node) or _unchecked_zero_division(node):
            lower = fallback_handler
        result = lower(*args, **kwargs)
        if isinstance(result, TensorBox) and isinstance(val, torch.Tensor):
            self._maybe_realize(result, node, val)
        return result

    def _lower_unbacked_def(self, node, env, val):
        """An op that makes data-dependent sizes (``.item()``, ``nonzero``, a boolean
        mask...): its ATen kernel as an extern call whose wrapper line binds each new
        unbacked symbol from the result (``u0 = buf3.size(0)``) before anything reads it."""
        args = torch.fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
        for v in torch.utils._pytree.tree_leaves(val):
            self._note_shape_env(v)
        first = self._counter
        result = make_extern(node.target, args, kwargs, fallback=True)
        made = [self.buffers[f"buf{i}"] for i in range(first, self._counter)]
        extern = next(b for b in made if isinstance(b, nodes.ExternKernel))
        # AOT autograd's trace renamed its symbols to capture's (rebind_unbacked)
        extern.bindings = resolve_unbacked_bindings(self.shape_env, node.meta["unbacked_bindings"])
        for sym in extern.bindings:
            self.unbacked_defs[sym] = extern.name
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return to_sympy(val)
        return result

    def _placeholder(self, node, val):
        if isinstance(val, torch.Tensor):
            self._note_shape_env(val)
            buf = InputBuffer(node.name, self.layout_of(val))
            self.buffers[node.name] = buf
            if node.meta.get("torchkiln_guarded_strides") == tuple(val.stride()):
                self.guarded_strides.add(node.name)  # the caller's guard checked them (docs/interfaces.md)
            self._input_offsets[node.name] = to_sympy(val.storage_offset())
            self.inputs.append((node.name, buf))
            for dim, (size, stride) in enumerate(zip(val.shape, val.stride())):
                for what, s in (("size", size), ("stride", stride)):
                    expr = to_sympy(s)
                    if isinstance(expr, sympy.Symbol) and expr not in self.symbol_sources:
                        self.symbol_sources[expr] = f"{node.name}.{what}({dim})"
            return TensorBox(buf)
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            self._note_shape_env(val)
            expr = to_sympy(val)
            if isinstance(expr, sympy.Symbol) and expr not in self.symbol_sources:
                self.symbol_sources[expr] = node.name
            self.inputs.append((node.name, expr))
            return expr
        self.inputs.append((node.name, None))
        return val

    def _constant(self, node):
        """A tensor attribute of the graph module (a constant): a global of the wrapper."""
        value = self.gm
        for part in node.target.split("."):
            value = getattr(value, part)
        if not isinstance(value, torch.Tensor):
            raise NotImplementedError(f"constant {node.target} of type {type(value).__name__}")
        name = f"_const_{len(self.constants)}"
        self.constants[name] = value
        buf = InputBuffer(name, self.layout_of(value))
        self.buffers[name] = buf
        return TensorBox(buf)

    def _realize_stride(self, data, val):
        """Strides to store an intermediate in: eager's, or channels-last where the value
        reads a channels-last buffer the same way (codegen/layout.py)."""
        size = list(data.get_size())
        if layout_opt.prefers_channels_last(data, size):
            return layout_opt.channels_last_strides(size)
        return self._dense_stride(val)

    def _maybe_realize(self, box: TensorBox, node, val) -> None:
        data = box.data
        if isinstance(data, Reduction):
            box.realize(self._dense_stride(val))
        elif isinstance(data, Pointwise) and len(node.users) > 1 and (
                data.num_ops() > config.realize_ops_threshold
                or (data.device.type == "cpu" and _broadcast_downstream(node, val.numel())
                    and data.has_transcendental())
                or _many_reads(data, node)):
            box.realize(self._realize_stride(data, val))
        elif isinstance(data, Pointwise) and len(node.users) > 1:
            # kept inline; a consumer that stores a view of it stores it instead (nodes._realize_shared_root)
            box.shared_stride = self._realize_stride(data, val)

    def _dense_stride(self, val):
        """The fake value's strides when they describe a dense, non-overlapping tensor."""
        sizes = [self.hint(to_sympy(s)) for s in val.shape]
        strides = [self.hint(to_sympy(s)) for s in val.stride()]
        expected = 1
        for size, stride in sorted(zip(sizes, strides), key=lambda p: p[1]):
            if size == 1:
                continue
            if stride != expected:
                return None
            expected *= size
        return list(val.stride())

    def _output(self, value, node, user_visible: bool = True):
        if isinstance(value, TensorBox):
            val = node.meta["val"]
            stride = self._dense_stride(val)
            if (not user_visible and stride is not None and isinstance(value.data, Pointwise)
                    and layout_opt.reads_channels_last(value.data, value.get_size())):
                # a value saved for the backward (which takes the strides the forward
                # gives it, aot/dispatch.py) stored in the channels-last order of what it
                # reads: training's max-pool indices share the pooling's kernel
                stride = layout_opt.channels_last_strides(value.get_size())
            out = value.realize(stride)
            base = out.base if isinstance(out, nodes.ReinterpretView) else out
            if (user_visible and stride is not None and not isinstance(base, (InputBuffer, nodes.MutationBuffer))
                    and layout_opt.is_channels_last(out.layout) and not _same_strides(out.layout, stride)):
                # an intermediate stored in another layout (channels-last, codegen/layout.py):
                # outputs keep eager's strides
                copy = TensorBox(Pointwise(list(value.get_size()), value.dtype, value.device, value.make_loader()))
                out = copy.realize(stride)
            return out
        return value


def _same_strides(layout, stride) -> bool:
    return all(sympy.simplify(n - 1) == 0 or sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0
               for n, a, b in zip(layout.size, layout.stride, stride))


# Element types generated kernels compute in; an op reading or making any other (complex,
# uint16/32/64, float8...) runs its ATen kernel, so the rest of the graph still compiles.
KERNEL_DTYPES = frozenset({
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool,
})


def _eager_refuses(node) -> bool:
    """A call eager raises on (eager_refusals): its ATen kernel runs, and raises."""
    meta = lambda v: v.meta.get("val")  # noqa: E731
    args = torch.fx.node.map_arg(node.args, meta)
    return eager_refuses(node.target, args, torch.fx.node.map_arg(node.kwargs, meta))


_INTEGER_DIVISIONS = (aten.div, aten.floor_divide, aten.remainder, aten.fmod)


def _unchecked_zero_division(node) -> bool:
    """An integer division or remainder by a divisor that may be 0, of CPU tensors under
    Triton kernels (``cpu_backend="triton"``, a test mode): eager's CPU kernels raise
    ZeroDivisionError and Triton kernels have no divisor check (C++ kernels have one), so
    its ATen kernel runs instead.  CUDA's eager kernels do not raise: kernels there keep
    it, at no cost."""
    if getattr(node.target, "overloadpacket", None) not in _INTEGER_DIVISIONS:
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.device.type != "cpu" or config.cpu_backend != "triton":
        return False
    if val.dtype.is_floating_point or val.dtype.is_complex:
        return False  # true division, or a float operand
    divisor = node.args[1] if len(node.args) > 1 else node.kwargs.get("other")
    return not (isinstance(divisor, (int, bool)) and divisor != 0)


def _has_non_kernel_dtype(node) -> bool:
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    return any(isinstance(v, torch.Tensor) and v.dtype not in KERNEL_DTYPES
               for v in torch.utils._pytree.tree_leaves(vals))


# ATen ops lowered to reductions (after decomposition): a value they read is loaded
# whole by them, so storing it there costs one write
_REDUCTION_OPS = frozenset(getattr(torch.ops.aten, name) for name in (
    "sum", "prod", "amax", "amin", "argmax", "argmin", "max", "min", "any", "all", "mean", "var_mean", "var"))


def _many_reads(data: Pointwise, node) -> bool:
    """Whether a pointwise value with several users is stored rather than recomputed by
    each: it loads more than ``config.realize_reads_threshold`` buffers
    (TorchInductor's ``realize_reads_threshold``), or 3+ and a reduction reads it.  A
    transformer's residual stream ``x + attn + mlp`` was otherwise rebuilt from the
    embedding and every earlier layer's outputs by each layer norm (nanoGPT layer 6
    read 8 buffers per element), and kernels of identical layers differed.  The C++
    kernels too: each norm's re-read of 4-8 buffers comes from L3/DRAM after the GEMMs
    between them (hf_t5's final RMSNorm: 5 us alone, 26-40 us in the model); 1 thread,
    kiln/torch.compile inference (min of 40 steps, same run) hf_t5 0.975 -> 0.927,
    nanogpt 0.891 -> 0.806, gpt2_block 0.892 -> 0.836, hf_gpt2 0.930 -> 0.890.  Broadcast
    loads (a bias, a row's mean) are not counted: recomputing them costs no memory pass
    (a layer norm's backward recomputes ``(mm + bias + x - mean) * rstd`` where the
    partitioner saved a linear's ``mm``, aot/unfuse_addmm.py)."""
    reads = data.num_reads()
    if reads > config.realize_reads_threshold:
        return True
    return reads >= 3 and any(getattr(u.target, "overloadpacket", None) in _REDUCTION_OPS for u in node.users)


def _broadcast_downstream(node, numel, depth: int = 2) -> bool:
    """Whether a user of ``node`` (or a user of a user) has more elements than ``numel``:
    inlined there, a math call (cos, exp...) in ``node``'s expression would run once per
    broadcast element.  Llama's rotary cos/sin, (batch, seq, head_dim), were recomputed
    for every head of q and k in every layer."""
    if not isinstance(numel, int):
        return False  # symbolic sizes: comparing them would need a guard
    for user in node.users:
        val = user.meta.get("val")
        if isinstance(val, torch.Tensor) and isinstance(val.numel(), int) and val.numel() > numel:
            return True
        if depth > 1 and _broadcast_downstream(user, numel, depth - 1):
            return True
    return False
