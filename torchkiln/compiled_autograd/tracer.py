"""The compiler object the autograd engine drives while it captures one backward.

The C++ engine (``torch._C._dynamo.compiled_autograd``, see ``protocol.py``) walks the
autograd graph, builds a cache key from every node (type, saved-tensor metadata,
sizes, hooks) and, on a miss, calls a fresh :class:`AutogradCapture`:
``begin_capture`` with the lifted inputs (grad outputs, saved tensors, leaves), then one
callback per node in the engine's execution order, then ``end_capture``.  Each
callback records into one FX graph:

* ATen backward formulas (``apply_functional``, ``validate_outputs``, ``accumulate``)
  are run on fake tensors under a ``ProxyTorchDispatchMode``, so the graph holds the
  ATen ops themselves (``aten.mul.Tensor``, ``aten.mm.default``...).
* Python ``autograd.Function.backward`` is a ``call_backward(ctx, saved, *grads)`` node,
  never run at capture: it runs on each backward, and when the graph is compiled with
  ``torchkiln.compile`` capture inlines it (tensor work in the graph, side effects
  replayed, reads of ``ctx`` guarded, a graph break where it cannot trace), as torch's
  compiled autograd does with Dynamo.  One whose class sets ``_torchkiln_opaque_backward``
  (FSDP2's collectives) is a ``call_backward_opaque`` node that capture never inlines.
  torchkiln's own compiled Functions contribute their backward ATen graph.
* Hooks (tensor pre-hooks, node pre/post hooks, saved-tensor unpack hooks) become
  ``call_hook(hooks[i], ...)`` nodes: the hook runs at runtime (or is inlined by capture
  when the graph is compiled), never at capture time.
* ``accumulate_grad`` records the leaf and its gradient; the graph returns the
  gradient and :class:`~torchkiln.compiled_autograd.runtime.CompiledBackward` assigns or
  accumulates it into ``.grad`` as eager's ``AccumulateGrad`` does, then runs the
  post-accumulate-grad hooks.  Accumulates that come before a backward that may read
  ``.grad`` (``call_backward_opaque``) are done in the graph instead, by a
  ``runtime.accumulate_grads`` node placed before it.

Graph signature: ``forward(inputs, sizes, scalars, hooks, packed_data)``: ``inputs`` the
lifted tensors, ``sizes`` the sizes that changed between calls (each passed as a
``(0, n)``-shaped tensor so that a compiler with ``dynamic=True`` keeps ``n`` symbolic),
``scalars`` lifted ints/floats, ``hooks`` hook callables and ``ctx`` objects,
``packed_data`` the packed saved tensors of saved-tensor hooks.  It returns
``[*autograd.grad outputs, *leaf gradients]``.
"""
from __future__ import annotations

import contextlib
import itertools
import operator
from typing import Any, Callable, Sequence

import torch
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import (
    ProxyTorchDispatchMode,
    PythonKeyTracer,
    disable_autocast_cache,
    disable_proxy_modes_tracing,
    fetch_object_proxy,
    track_tensor_tree,
)
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from torch._subclasses.fake_tensor import FakeTensorMode

from ..utils.counters import counters
from . import logs, runtime
from .runtime import AccumulateRecord, call_backward, call_backward_opaque, call_hook

PLACEHOLDERS = ("inputs", "sizes", "scalars", "hooks", "packed_data")
_capture_ids = itertools.count()
# Functional backward formulas the engine binds by name, once per process (it remembers
# the names it bound): name -> (fn(grads, *args) -> grads, traceable).
_functions: dict[str, tuple[Callable, bool]] = {}


def reset_capture_ids() -> None:
    global _capture_ids
    _capture_ids = itertools.count()


class _Source(torch._guards.Source):
    """Names a lifted value (``inputs[3]``) for ShapeEnv's symbols."""

    def __init__(self, text: str) -> None:
        object.__setattr__(self, "_text", text)

    @property
    def name(self):
        return _CallableStr(self._text)  # torch 2.13 reads ``.name``; 2.11 calls ``.name()``

    def guard_source(self):
        return torch._guards.GuardSource.LOCAL

    def reconstruct(self, codegen):
        raise NotImplementedError

    def __hash__(self):
        return hash(self._text)

    def __eq__(self, other):
        return isinstance(other, _Source) and other._text == self._text


class _CallableStr(str):
    def __call__(self):
        return str(self)


def _opaque_function(fn: Callable, name: str) -> Callable:
    """A non-traceable backward (a C++ custom node's) as a named Python function, so the
    graph's code can call it (the engine's binding has no name); capture breaks there."""
    def opaque_backward(*args):
        return fn(*args)

    opaque_backward.__name__ = opaque_backward.__qualname__ = f"opaque_{name}"
    opaque_backward._torchkiln_disable = True
    return opaque_backward


_SCALAR_TYPES = {0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64, 5: torch.float16,
                 6: torch.float32, 7: torch.float64, 9: torch.complex64, 10: torch.complex128, 11: torch.bool,
                 15: torch.bfloat16}


def _empty_from_metadata(meta) -> torch.Tensor:
    """An empty tensor as an output's metadata says.  Two forms reach here: ``(layout,
    device, dtype, size)`` (a functional backward's outputs) and, for a C++ custom node on
    torch 2.13, the packed ``InputMetadata``: ``((layout, _, device, scalar type number,
    ...), size, is_tensor_subclass, ...)``."""
    if isinstance(meta[0], tuple):
        options, size = meta[0], meta[1]
        dtype = _SCALAR_TYPES.get(options[3]) if isinstance(options[3], int) else options[3]
        if dtype is None:
            raise AssertionError(f"compiled autograd: unknown scalar type {options[3]} in output metadata")
        layout = options[0] if isinstance(options[0], torch.layout) else torch.strided
        return torch.empty(size, dtype=dtype, layout=layout, device=options[2])
    layout, device, dtype, size = meta
    return torch.empty(size, dtype=dtype, layout=layout, device=device)


class AutogradCapture:
    """One capture of one backward; the engine creates it on a cache miss.

    Method names and signatures are those the engine calls (``protocol.py`` pins them
    per torch version).  ``compiler_fn(gm)`` turns the finished graph into the callable
    the engine caches.
    """

    def __init__(self, compiler_fn: Callable, verbose: bool = False) -> None:
        self.compiler_fn = compiler_fn
        self.verbose = verbose
        self.deferred_cpp_hooks: list = []
        self.stack = contextlib.ExitStack()
        self.shape_env = ShapeEnv()
        self.fake_mode = FakeTensorMode(allow_fallback_kernels=True, allow_non_fake_inputs=True,
                                        shape_env=self.shape_env)
        self.tracer = PythonKeyTracer()
        self.proxy_mode = ProxyTorchDispatchMode(self.tracer, "symbolic")
        self.accumulates: list[AccumulateRecord] = []
        self.accumulate_positions: list = []  # the last graph node when each accumulate came
        self.post_acc_hooks: dict[int, list[int]] = {}
        self.input_index: dict[int, int] = {}
        self.symnode_proxies: dict = {}
        self.origin = ""
        self.node_names: list[str] = []

    # ---- begin / end -------------------------------------------------------
    def begin_capture(self, inputs: list, sizes: list, scalars: list, origins: list,
                      accumulate_grad: bool, check_nans: bool):
        if check_nans:
            raise RuntimeError("torchkiln compiled autograd does not support anomaly mode (check_nan)")
        if torch.is_grad_enabled():
            raise RuntimeError("torchkiln compiled autograd does not support create_graph=True (double backward); "
                               "run it outside compiled_autograd.enable()")
        counters["compiled_autograd"]["captures"] += 1
        self.id = next(_capture_ids)
        self.accumulates_into_leaves = accumulate_grad
        self.tracer.root = torch.nn.Module()
        self.tracer.graph = torch.fx.Graph(tracer_cls=PythonKeyTracer)
        self.tracer.tensor_attrs = {}
        p_inputs, p_sizes, p_scalars, self.p_hooks, self.p_packed = (
            self.tracer.create_proxy("placeholder", name, (), {}) for name in PLACEHOLDERS)
        self.p_inputs = p_inputs
        inputs_origins, sizes_origins, scalars_origins = origins
        self.inputs_origins = inputs_origins
        self.num_inputs = len(inputs)
        for i, x in enumerate(inputs):
            inputs[i] = self._fake(x, f"inputs[{i}]")
            self.input_index[id(inputs[i])] = i
        self._bind(inputs, [p_inputs[i] for i in range(len(inputs))])
        sym_sizes = []
        for i, n in enumerate(sizes):
            s = self.shape_env.create_unspecified_symint_and_symbol(n, _Source(f"sizes[{i}]"), DimDynamic.DYNAMIC)
            proxy = self.tracer.create_proxy("call_function", runtime.unwrap_size, (p_sizes[i],), {})
            sym_sizes.append(s)
            if isinstance(s, torch.SymInt):
                self.symnode_proxies[s.node] = proxy
                self._bind([s], [proxy])
        for i, v in enumerate(scalars):
            src = _Source(f"scalars[{i}]")
            if isinstance(v, int):
                scalars[i] = self.shape_env.create_unspecified_symint_and_symbol(v, src, DimDynamic.DYNAMIC)
            elif isinstance(v, float):
                scalars[i] = self.shape_env.create_symfloatnode(
                    self.shape_env.create_unspecified_symbol(v, source=src, dynamic_dim=DimDynamic.DYNAMIC),
                    hint=v, source=src)
            else:
                raise AssertionError(f"unexpected lifted scalar {type(v)}")
            proxy = p_scalars[i]
            if isinstance(scalars[i], (torch.SymInt, torch.SymFloat)):
                self.symnode_proxies[scalars[i].node] = proxy
                self._bind([scalars[i]], [proxy])
        self.stack.enter_context(self.fake_mode)
        self.stack.enter_context(self.proxy_mode)
        self.stack.enter_context(disable_autocast_cache())
        self.stack.enter_context(torch.fx.experimental.symbolic_shapes._suppress_guards(self.shape_env))
        return str(self.id), inputs, sym_sizes, scalars

    def end_capture(self, outputs):
        self.set_node_origin("", -1, None)
        self.stack.close()
        results = [self.to_proxy(o) for o in outputs]
        self._accumulate_before_opaque_calls()
        acc_grads = [self.to_proxy(rec.grad) for rec in self.accumulates]
        hook_grads = [self.to_proxy(g) for _, g in self.deferred_cpp_hooks]
        self.tracer.create_node("output", "output", (self.tracer.create_arg(results + acc_grads + hook_grads),), {})
        for node in self.tracer.graph.nodes:
            for field in ("tensor_meta", "example_value", "val"):
                node.meta.pop(field, None)
        self._dce()
        used_sizes = self._remove_unused_sizes()
        used_inputs = self._remove_unused_inputs()
        gm = torch.fx.GraphModule(self.tracer.root, self.tracer.graph, f"CompiledAutograd{self.id}")
        gm._torchkiln_engine_graph = True  # called only by the engine, for its key (compiler_fn_for_backend)
        records = [rec.finish(self.post_acc_hooks.get(rec.input_index, [])) for rec in self.accumulates]
        logs.log_graph(gm, self.id, records, self.verbose, used_inputs)
        wrapper = runtime.CompiledBackward(len(results), records, [h for h, _ in self.deferred_cpp_hooks],
                                           used_sizes, self.id, gm, used_inputs)
        counters["compiled_autograd"]["graphs"] += 1
        return wrapper, self.compiler_fn(gm)

    def _accumulate_before_opaque_calls(self) -> None:
        """Eager's engine sets ``.grad`` when a leaf's ``AccumulateGrad`` runs, and an
        untraced ``Function.backward`` that runs later may read it (FSDP2's post-backward
        reduce-scatters ``.grad`` of the unsharded parameters).  So the accumulates that
        come before a ``call_backward_opaque`` node, or a ``call_backward`` node whose
        backward's own code reads a ``.grad`` attribute, become one
        ``runtime.accumulate_grads`` node placed just before it (a graph break when the
        graph is compiled); the rest stay deferred to the runtime wrapper, which does them
        after the graph.  Hooks and other backwards (inlined when the graph is compiled)
        see the ``.grad`` of before the backward."""
        order = {node: i for i, node in enumerate(self.tracer.graph.nodes)}
        opaque = [node for node in self.tracer.graph.nodes if node.op == "call_function" and (
            node.target is call_backward_opaque or (node.target is call_backward and node.meta.get("reads_grad")))]
        if not opaque or not self.accumulates:
            return
        pending = sorted(range(len(self.accumulates)), key=lambda i: order[self.accumulate_positions[i]])
        moved = set()
        for call in opaque:
            batch = [i for i in pending if i not in moved and order[self.accumulate_positions[i]] < order[call]]
            if not batch:
                continue
            moved.update(batch)
            records = [self.accumulates[i] for i in batch]
            with self.tracer.graph.inserting_before(call):
                self.tracer.create_proxy("call_function", runtime.accumulate_grads, (
                    self.p_inputs, [r.input_index for r in records], [self.to_proxy(r.grad) for r in records],
                    self.p_hooks, [tuple(self.post_acc_hooks.get(r.input_index, ())) for r in records]), {})
        keep = [i for i in range(len(self.accumulates)) if i not in moved]
        self.accumulates = [self.accumulates[i] for i in keep]
        self.accumulate_positions = [self.accumulate_positions[i] for i in keep]

    def close(self) -> None:
        self.stack.close()

    def log_compile_reasons(self, reasons) -> None:
        logs.verbose("compile reasons: %s", reasons)

    # ---- node callbacks ----------------------------------------------------
    def set_node_origin(self, node_name: str, nodecall_index: int, pyobj) -> None:
        self._tag_new_nodes()
        if pyobj is not None and hasattr(pyobj, "_forward_cls"):
            node_name = getattr(pyobj._forward_cls, "_torchkiln_origin", None) or node_name
        self.origin = f"{node_name} (NodeCall {nodecall_index})" if node_name else ""
        if node_name:
            self.node_names.append(self.origin)

    def bind_function(self, fn_name: str, fn: Callable, is_custom_function: bool, is_traceable: bool) -> str:
        name = fn_name
        if is_custom_function:
            name = f"CppNode{fn_name}{sum(k.startswith('CppNode' + fn_name) for k in _functions)}"
        _functions[name] = (fn if is_traceable else _opaque_function(fn, name), is_traceable)
        return name

    def apply_functional(self, fn_name: str, grads, args, output_metadata):
        fn, traceable = _functions[fn_name]
        if not traceable:
            return self._opaque(fn, (grads, *args), output_metadata)
        return list(fn(grads, *args))

    def validate_outputs(self, _, outputs, args, output_metadata):
        fn, _traceable = _functions["validate_outputs"]
        return list(fn(outputs, *args))

    def proxy_call(self, fn, args, output_metadata):
        return self._opaque(fn, args, output_metadata)

    def accumulate(self, old_var, new_var):
        return old_var + new_var

    def accumulate_grad(self, variable, variable_grad, grad, has_post_hooks=None):
        """2.13: ``(variable, variable_grad, grad, has_post_hooks) -> grad``.  The older
        3-argument call ``(variable, grad, has_post_hooks)`` (torch 2.11's engine) must
        return ``None``: that engine asserts it (``stuff.is_none()``)."""
        three_argument = has_post_hooks is None
        if three_argument:
            grad, has_post_hooks = variable_grad, bool(grad)
        index = self.input_index.get(id(variable))
        if index is None:
            raise AssertionError("compiled autograd: accumulate_grad on a tensor that is not a lifted input")
        self.accumulates.append(AccumulateRecord(index, grad, origin=self.origin))
        self.accumulate_positions.append(self._graph_checkpoint())
        return None if three_argument else grad

    def proxy_call_backward(self, inputs, output_metadatas, saved_tensors, backward_idx, ctx,
                            maybe_backward_state_idx=None, opaque_object_indices=()):
        if (maybe_backward_state_idx is not None or opaque_object_indices
                or getattr(ctx._forward_cls, "_torchkiln_opaque_backward", False)):
            return self._call_backward_node(call_backward_opaque, ctx, inputs, output_metadatas, saved_tensors,
                                            backward_idx)
        traced = getattr(ctx._forward_cls, "_torchkiln_trace_backward", None)
        if traced is None:  # Python: a call_backward node, run (or inlined by capture) per backward
            return self._call_backward_node(call_backward, ctx, inputs, output_metadatas, saved_tensors,
                                            backward_idx)
        checkpoint = self._graph_checkpoint()
        try:
            grads = traced(ctx, saved_tensors, list(inputs))  # torchkiln's compiled Function: its ATen graph
        except Exception:  # noqa: BLE001 - any failure to trace means: call it at runtime
            self._rollback(checkpoint)
            return self._call_backward_node(call_backward_opaque, ctx, inputs, output_metadatas, saved_tensors,
                                            backward_idx)
        if not isinstance(grads, tuple):
            grads = (grads,)
        return tuple(g if meta is not None else None for g, meta in zip(grads, output_metadatas))

    def _call_backward_node(self, target, ctx, inputs, output_metadatas, saved_tensors, backward_idx):
        """A ``target(ctx, saved_tensors, *grads, expected=...)`` node; its outputs are
        empty tensors as the engine's metadata says (``expected`` makes the real ones so)."""
        expected = [None if meta is None else (meta[2], meta[1], list(meta[3])) for meta in output_metadatas]
        proxy = self.tracer.create_proxy("call_function", target,
                                         (self.p_hooks[backward_idx], self.to_proxy(list(saved_tensors)),
                                          *self.to_proxy(list(inputs))),
                                         {"expected": self.to_proxy(expected)})
        backward = getattr(ctx._forward_cls.backward, "__code__", None)
        proxy.node.meta["reads_grad"] = backward is None or "grad" in backward.co_names
        with disable_proxy_modes_tracing():
            outs = []
            for meta in output_metadatas:
                if meta is None:
                    outs.append(None)
                    continue
                layout, device, dtype, size = meta
                outs.append(torch.empty(size, dtype=dtype, layout=layout, device=device))
        self._bind_outputs(outs, proxy)
        return tuple(outs)

    def call_copy_slices_prologue(self, inputs, base_sizes, base_strides, base_storage_offset,
                                  view_sizes, view_strides, view_storage_offset):
        return runtime.copy_slices_prologue(inputs, base_sizes, base_strides, base_storage_offset,
                                            view_sizes, view_strides, view_storage_offset)

    def call_copy_slices_epilogue(self, needs_input_grad, result, res, grad_slice):
        return runtime.copy_slices_epilogue(needs_input_grad, result, res, grad_slice)

    def allocate_dummy(self):
        with disable_proxy_modes_tracing():
            return torch.zeros([0, 123456789])

    # ---- hooks: one call_hook node each; the hook runs at runtime ----------------
    def _hook_node(self, hook_id: int, args: tuple, hook_type: str):
        return self.tracer.create_proxy("call_function", call_hook,
                                        (self.p_hooks[hook_id], *[self.to_proxy(a) for a in args]),
                                        {"hook_type": hook_type})

    def tensor_pre_hook(self, inputs, hook_id: int, i: int):
        proxy = self._hook_node(hook_id, (inputs[i],), "tensor_pre_hook")
        inputs[i] = self._like(inputs[i], proxy)
        return inputs

    def cpp_tensor_pre_hook(self, inputs, hook_id: int, i: int):
        # C++ tensor pre-hooks (retain_grad's) read the gradient and store it: the graph
        # returns that gradient and the runtime runs the hooks on it after the graph.
        self.deferred_cpp_hooks.append((hook_id, inputs[i]))
        return inputs

    def pre_hook(self, inputs, hook_id: int):
        proxy = self._hook_node(hook_id, (list(inputs),), "pre_hook")
        return self._like_list(inputs, proxy)

    def post_hook(self, outputs, inputs, hook_id: int):
        proxy = self._hook_node(hook_id, (list(outputs), list(inputs)), "post_hook")
        return self._like_list(outputs, proxy)

    def post_acc_grad_hook(self, input, hook_id: int):
        index = self.input_index.get(id(input))
        if index is None:
            raise AssertionError("compiled autograd: post-accumulate-grad hook on a tensor that is not a lifted input")
        self.post_acc_hooks.setdefault(index, []).append(hook_id)
        return [input]

    def unpack_hook(self, hook_id: int, data_id: int):
        proxy = self.tracer.create_proxy("call_function", call_hook,
                                         (self.p_hooks[hook_id], self.p_packed[data_id]),
                                         {"hook_type": "unpack_hook"})
        out = self.allocate_dummy()
        self._bind([out], [proxy])
        return out

    # ---- helpers -------------------------------------------------------------
    def _fake(self, x: torch.Tensor, name: str):
        if not isinstance(x, torch.Tensor):
            raise AssertionError(f"compiled autograd: lifted input {name} is a {type(x).__name__}")
        ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * x.dim())
        return self.fake_mode.from_tensor(x, source=_Source(name), symbolic_context=ctx)

    def _like(self, x, proxy):
        with disable_proxy_modes_tracing():
            out = runtime.clone_like(x)
        self._bind([out], [proxy])
        return out

    def _like_list(self, xs, proxy):
        with disable_proxy_modes_tracing():
            outs = [runtime.clone_like(x) if x is not None else None for x in xs]
        self._bind_outputs(outs, proxy)
        return outs

    def _opaque(self, fn, args, output_metadata):
        proxy = self.tracer.create_proxy("call_function", fn, pytree.tree_map(self.to_proxy, args), {})
        outs = []
        with disable_proxy_modes_tracing():
            for meta in output_metadata:
                outs.append(None if meta is None else _empty_from_metadata(meta))
        self._bind_outputs(outs, proxy)
        return outs

    def _bind_outputs(self, outs, proxy):
        pairs = [(o, proxy[i]) for i, o in enumerate(outs) if o is not None]
        if pairs:
            self._bind([o for o, _ in pairs], [p for _, p in pairs])

    def _bind(self, objects, proxies):
        track_tensor_tree(objects, proxies, constant=None, tracer=self.tracer)

    def to_proxy(self, t):
        if t is None:
            return None
        if isinstance(t, list):
            return [self.to_proxy(x) for x in t]
        if isinstance(t, tuple):
            return tuple(self.to_proxy(x) for x in t)
        if isinstance(t, (torch.SymInt, torch.SymFloat)):
            proxy = self.symnode_proxies.get(t.node)
            if proxy is not None:
                return proxy
            slot = fetch_object_proxy(self.tracer, t)
            return slot() if callable(slot) else slot
        if not isinstance(t, torch.Tensor):
            return t
        return fetch_object_proxy(self.tracer, t).proxy

    def _tag_new_nodes(self) -> None:
        for node in reversed(self.tracer.graph.nodes):
            if "ca_origin" in node.meta:
                break
            node.meta["ca_origin"] = self.origin

    def _graph_checkpoint(self):
        return list(self.tracer.graph.nodes)[-1]

    def _rollback(self, last) -> None:
        graph = self.tracer.graph
        nodes = list(graph.nodes)
        for node in reversed(nodes[nodes.index(last) + 1:]):
            graph.erase_node(node)

    def _dce(self) -> None:
        """Dead nodes out; ``inputs[i]`` reads no node uses go too (a leaf that only
        ``CompiledBackward`` accumulates into, a saved tensor no formula read), which
        :meth:`_remove_unused_inputs` then leaves out of what the graph receives."""
        impure = {call_hook, call_backward, call_backward_opaque, runtime.accumulate_grads}
        keep = set()
        for ph in self.tracer.graph.find_nodes(op="placeholder"):
            if ph.target != "inputs":
                keep.update(ph.users)

        def is_impure(node):
            return node in keep or (node.op == "call_function" and node.target in impure) or node.is_impure()

        self.tracer.graph.eliminate_dead_code(is_impure)

    def _remove_unused_inputs(self) -> list[int] | None:
        """The engine's indices of the inputs the graph reads, when it reads some of them
        only through ``inputs[i]`` (renumbered in order: the runtime passes only those), so
        that the compiled graph neither receives, guards nor stride-checks a leaf that only
        ``CompiledBackward`` accumulates into (hooked_small: 9 of 28 inputs); else None
        (every input passed: the graph reads all, or passes the list on, to
        ``accumulate_grads``)."""
        inputs = next(n for n in self.tracer.graph.find_nodes(op="placeholder") if n.target == "inputs")
        if any(user.target is not operator.getitem or not isinstance(user.args[1], int) for user in inputs.users):
            return None
        used = sorted({user.args[1] for user in inputs.users})
        if len(used) == self.num_inputs:
            return None
        position = {i: k for k, i in enumerate(used)}
        for user in list(inputs.users):
            user.args = (inputs, position[user.args[1]])
        return used

    def _remove_unused_sizes(self) -> list[int]:
        """Drop the sizes no node reads; returns the engine's indices of those kept
        (the runtime passes only them, renumbered in order)."""
        sizes = next(n for n in self.tracer.graph.find_nodes(op="placeholder") if n.target == "sizes")
        used = []
        for getitem in list(sizes.users):
            if any(user.users for user in getitem.users):
                used.append(getitem.args[1])
                getitem.args = (sizes, len(used) - 1)
            else:
                for user in list(getitem.users):
                    self.tracer.graph.erase_node(user)
                self.tracer.graph.erase_node(getitem)
        return used
