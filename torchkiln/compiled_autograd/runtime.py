"""What a captured backward calls at runtime.

* ``call_hook(hook, *args, hook_type=)``: a hook node of the graph; a hook that returns
  ``None`` leaves its argument unchanged (as eager's engine does).
* ``call_backward(ctx, saved_tensors, *grads, expected=)``: a custom Python
  ``autograd.Function.backward``, called as eager calls it (capture inlines it when the
  graph is compiled); ``call_backward_opaque`` the same, never inlined.
* :class:`CompiledBackward`: the wrapper the engine caches with the compiled graph; it
  turns the engine's arguments into the graph's, runs it, runs C++ tensor pre-hooks
  (``retain_grad``) on the gradients they saw, and then does eager's
  ``AccumulateGrad`` for every leaf: assign ``.grad`` when it is ``None`` (a graph
  output the caller could also see is cloned, strides follow the leaf's), add in
  place otherwise; then the leaf's post-accumulate-grad hooks; then the final
  callbacks that Python queued with ``Variable._execution_engine.queue_callback``
  while the graph ran (the engine's compiled path drops them).
* ``accumulate_grads``: the same ``AccumulateGrad`` as a graph node, for the leaves
  whose ``.grad`` a later untraced backward may read.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable, Sequence

import warnings

import torch

from ..exc import Unsupported
from . import protocol, state


def call_hook(hook: Callable, *args: Any, hook_type: str) -> Any:
    """Run one hook; ``None`` means "unchanged" (returns the first argument)."""
    result = hook(*args)
    return args[0] if result is None else result


_store = object.__setattr__  # a plain attribute store, past LiftedCtx.__setattr__


class LiftedCtx:
    """A custom Function's real ``ctx`` whose ``saved_tensors`` are the lifted ones: the
    engine releases a node's saved variables before the compiled backward runs (unless
    ``retain_graph``), so ``ctx.saved_tensors`` itself would raise eager's "backward
    through the graph a second time" error.  Every other attribute is the real ctx's,
    read and written (as torch's ``FakeBackwardCFunction``, but writes reach the real
    ctx too).  A plain class, so that capture can build and inline it."""

    def __init__(self, ctx, saved_tensors: Sequence[torch.Tensor]) -> None:
        _store(self, "_ctx", ctx)
        _store(self, "saved_tensors", tuple(saved_tensors))

    @property
    def saved_variables(self):
        return self.saved_tensors

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def __setattr__(self, name, value):
        setattr(self._ctx, name, value)


def call_backward(ctx, saved_tensors: Sequence[torch.Tensor], *grads: Any, expected: Sequence) -> tuple:
    """Call a custom Function's Python backward on the real ``ctx`` with the lifted saved
    tensors.  When the captured graph is compiled with ``torchkiln.compile``, capture
    inlines this call as it inlines any function: the backward's tensor work joins the
    graph, its Python side effects (a list append, an attribute store) are replayed on
    every call, what it reads of ``ctx`` is guarded, and what capture cannot trace is a
    graph break, run eagerly on each backward (as torch's compiled autograd and Dynamo
    do).  Uncompiled, the backward simply runs on each backward, as eager runs it."""
    result = ctx._forward_cls.backward(LiftedCtx(ctx, saved_tensors), *grads)
    return _validate_grads(ctx, result if isinstance(result, tuple) else (result,), expected)


def _validate_grads(ctx, grads: tuple, expected: Sequence) -> tuple:
    """Eager's check of a custom backward's result against its forward's inputs
    (``expected[i]``: ``(dtype, device, size)``, ``None`` where no gradient is wanted):
    the count (extra results must be ``None``), a broadcast gradient summed back to the
    input's size, another dtype cast; eager's errors otherwise."""
    name = type(ctx).__name__
    if len(grads) < len(expected) or any(g is not None for g in grads[len(expected):]):
        raise RuntimeError(f"function {name} returned an incorrect number of gradients "
                           f"(expected {len(expected)}, got {len(grads)})")
    out = []
    for i, (grad, meta) in enumerate(zip(grads, expected)):
        if grad is None or meta is None:
            out.append(None)
            continue
        dtype, device, size = meta
        if list(grad.shape) != list(size):
            if not _expandable(size, grad.shape):
                raise RuntimeError(f"Function {name} returned an invalid gradient at index {i} - got "
                                   f"{list(grad.shape)} but expected shape compatible with {list(size)}")
            grad = grad.sum_to_size(size)
        if grad.dtype != dtype:
            grad = grad.to(dtype)
        out.append(grad)
    return tuple(out)


def _expandable(size, target) -> bool:
    if len(size) > len(target):
        return False
    return all(s == 1 or s == t for s, t in zip(reversed(list(size)), reversed(list(target))))


def call_backward_opaque(ctx, saved_tensors: Sequence[torch.Tensor], *grads: Any, expected: Sequence) -> tuple:
    """:func:`call_backward` that capture never inlines (a graph break): for backwards
    marked ``_torchkiln_opaque_backward`` (FSDP2's collectives) or that the engine gives
    opaque state (``BackwardState``, opaque objects)."""
    return call_backward(ctx, saved_tensors, *grads, expected=expected)


call_backward_opaque._torchkiln_disable = True


def unwrap_size(x) -> int:
    """A size passed as a ``(0, n)`` tensor (so it stays symbolic when compiled) -> ``n``."""
    if isinstance(x, torch.Tensor):
        return x.size(1)
    return x


def wrap_size(n: int):
    return torch.empty(0, n) if n > 0 else n


def clone_like(x: torch.Tensor) -> torch.Tensor:
    """A tensor with ``x``'s metadata (for a hook's result: hooks keep shapes)."""
    return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device, layout=x.layout)


def copy_slices_prologue(inputs, base_sizes, base_strides, base_storage_offset,
                         view_sizes, view_strides, view_storage_offset):
    """First half of eager's ``CopySlices`` (in-place op on a view): the grad of the base."""
    grad = inputs[0]
    result = grad.new_empty_strided(base_sizes, base_strides)
    result.copy_(grad)
    grad_slice = result.as_strided(view_sizes, view_strides, view_storage_offset - base_storage_offset)
    return [result, grad_slice, grad_slice.clone(memory_format=torch.contiguous_format)]


def copy_slices_epilogue(needs_input_grad, result, res, grad_slice):
    """Second half of ``CopySlices``: write the view's grad into the base's grad."""
    grad_inputs = [None] * len(needs_input_grad)
    for i, needed in enumerate(needs_input_grad):
        if needed and res[i] is not None:
            if i == 0:
                grad_slice.copy_(res[i])
                grad_inputs[i] = result
            else:
                grad_inputs[i] = res[i]
    return grad_inputs


@dataclasses.dataclass
class AccumulateRecord:
    """One ``AccumulateGrad`` of the captured backward: the leaf is ``inputs[input_index]``."""

    input_index: int
    grad: Any = None
    post_hooks: tuple = ()
    origin: str = ""

    def finish(self, post_hooks: list[int]) -> "AccumulateRecord":
        return AccumulateRecord(self.input_index, None, tuple(post_hooks), self.origin)


def accumulate_into(leaf: torch.Tensor, new: torch.Tensor, input_ids: set, shared: bool = False) -> None:
    """Eager's ``AccumulateGrad`` with grad mode off (compiled autograd has no create_graph):
    a new gradient is stolen unless it is (a view of) a graph input, which the caller may
    hold, or ``shared`` (held elsewhere: a CUDA graph's static output, which the next
    replay overwrites; eager copies a gradient it does not own alone too), or breaks the
    leaf's layout; then it is copied into the leaf's strides."""
    old = leaf.grad
    if old is None:
        base = new._base if new._is_view() else new
        if new.layout == torch.strided and (shared or new.stride() != leaf.stride() or id(base) in input_ids
                                            or id(new) in input_ids):
            grad = torch.empty_strided(leaf.size(), leaf.stride(), dtype=new.dtype, device=new.device)
            grad.copy_(new)
            new = grad
        leaf.grad = new.detach() if new.requires_grad else new
    elif old.is_sparse and not new.is_sparse:
        leaf.grad = new + old
    else:
        old += new


def accumulate_grads(inputs: Sequence[torch.Tensor], indices: Sequence[int], grads: Sequence[torch.Tensor],
                     hooks: Sequence[Callable], post_hooks: Sequence[tuple]) -> None:
    """Accumulate ``grads[k]`` into the leaf ``inputs[indices[k]]`` and run its
    post-accumulate-grad hooks (``hooks[j]`` for ``j`` in ``post_hooks[k]``), as eager's
    ``AccumulateGrad`` does, inside the graph: a graph node placed before the untraced
    backward that may read the ``.grad`` (capture breaks the graph here)."""
    input_ids = {id(x) for x in inputs}
    with torch.no_grad():
        for index, grad, hook_ids in zip(indices, grads, post_hooks):
            leaf = inputs[index]
            accumulate_into(leaf, grad, input_ids)
            for hook_id in hook_ids:
                if hooks[hook_id](leaf) is not None:
                    raise RuntimeError("Tensor post accumulate grad hooks should return None.")


accumulate_grads._torchkiln_disable = True


def _run_final_callbacks(callbacks: list) -> None:
    """Run the callbacks Python queued with ``Variable._execution_engine.queue_callback(cb)``
    while a compiled backward ran (a hook's, FSDP2's post-backward callback), in order: the
    engine's compiled path never runs the graph task's final callbacks, so
    :class:`CompiledBackward` collects them (through :class:`_QueueingEngine`) and runs
    them after the graph and its accumulates, as eager's engine runs them at the end of
    the backward.  A callback that queues another: it runs too, after this one."""
    variable = torch.autograd.Variable
    engine = variable._execution_engine
    variable._execution_engine = _QueueingEngine(engine, callbacks)
    try:
        i = 0
        while i < len(callbacks):
            callbacks[i]()
            i += 1
    finally:
        variable._execution_engine = engine


class _QueueingEngine:
    def __init__(self, engine, callbacks: list) -> None:
        self._engine = engine
        self._callbacks = callbacks

    def queue_callback(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    # Capture breaks the graph here: reached as ``torch.autograd.Variable._execution_engine``
    # (a torch attribute, so a constant to capture), a compiled hook would drop the append.
    queue_callback._torchkiln_disable = True

    def __getattr__(self, name: str):
        return getattr(self._engine, name)


# references to a graph output at the refcount check in CompiledBackward._accumulate:
# the local ``grad`` and getrefcount's argument (the outputs list's slot is cleared first)
_OWN_REFS = 2
_getrefcount = sys.getrefcount
_Tensor, _strided, _is_grad_enabled = torch.Tensor, torch.strided, torch.is_grad_enabled
_variable = torch.autograd.Variable


class CompiledBackward:
    """``runtime_wrapper(compiled_fn, inputs, sizes, scalars, hooks, packed_data)``.

    Returns the ``torch.autograd.grad`` outputs (a list); leaf gradients are written
    into ``.grad`` here.  Called by the engine on every cache hit, so the path is flat:
    no generator context managers, the engine's compiler swapped off and on with two
    C calls, one pass over the leaves.
    """

    def __init__(self, num_outputs: int, accumulates: list[AccumulateRecord], cpp_hooks: list[int],
                 used_sizes: list[int], capture_id: int, graph: torch.fx.GraphModule,
                 used_inputs: list[int] | None = None) -> None:
        self.num_outputs = num_outputs
        self.accumulates = accumulates
        # (output position, leaf position in inputs, post-accumulate-grad hook ids) per leaf
        self.leaf_plan = tuple((num_outputs + k, rec.input_index, rec.post_hooks) for k, rec in enumerate(accumulates))
        self.cpp_hooks = cpp_hooks
        self.used_sizes = used_sizes
        self.used_inputs = used_inputs  # None: the graph takes every input
        self.capture_id = capture_id
        self.graph = graph
        self.fallback = False

    def __call__(self, compiled_fn, inputs, sizes, scalars, hooks, packed_data=()):
        sizes = [wrap_size(sizes[i]) for i in self.used_sizes] if self.used_sizes else []
        engine = _variable._execution_engine
        callbacks: list = []
        _variable._execution_engine = _QueueingEngine(engine, callbacks)  # post-accumulate-grad hooks may queue too
        try:
            prior_in_graph, state.in_graph = state.in_graph, True
            try:
                used = self.used_inputs
                outs = self._run(compiled_fn, inputs if used is None else [inputs[i] for i in used],
                                 sizes, scalars, hooks, packed_data)
            finally:
                state.in_graph = prior_in_graph
            outs = list(outs)  # ours to clear slot by slot (a compiler_fn may keep what it returned)
            if self.cpp_hooks:  # C++ tensor pre-hooks (retain_grad) on the gradients they saw
                cpp = protocol.engine()
                for hook_id, grad in zip(self.cpp_hooks, outs[len(outs) - len(self.cpp_hooks):]):
                    cpp.call_cpp_tensor_pre_hooks(hook_id, grad)
            if self.leaf_plan:
                if _is_grad_enabled():
                    with torch.no_grad():
                        self._accumulate(outs, inputs, hooks)
                else:
                    self._accumulate(outs, inputs, hooks)
            results = outs[:self.num_outputs]
        finally:
            _variable._execution_engine = engine
        if callbacks:
            _run_final_callbacks(callbacks)
        return results

    def _accumulate(self, outs: list, inputs, hooks) -> None:
        """Eager's ``AccumulateGrad`` per leaf (:func:`accumulate_into`), then its
        post-accumulate-grad hooks.  ``outs[pos]`` is dropped from the list before the
        refcount check, so a count above the loop's own references means something
        else holds the gradient (not ours to steal).  The common case of a training
        step, a new dense gradient with the leaf's strides that nothing else holds
        assigned to a leaf without one, is inlined (one microsecond per leaf matters
        with a hook on every parameter).  Both row-major is eager's layout contract
        (``obeys_layout_contract``: strides of size-1 dims aside, the leaf's), asked
        without making two stride tuples."""
        input_ids = None
        for pos, index, post_hooks in self.leaf_plan:
            grad = outs[pos]
            outs[pos] = None
            leaf = inputs[index]
            old = leaf.grad
            if old is None:
                # a graph input returned as is has a reference in ``inputs`` too (read
                # above, so intact): the refcount check covers it, no id set needed
                if (_getrefcount(grad) <= _OWN_REFS and type(grad) is _Tensor and not grad._is_view()
                        and not grad.requires_grad and grad.layout is _strided
                        and (grad.is_contiguous() and leaf.is_contiguous() or grad.stride() == leaf.stride())):
                    leaf.grad = grad  # what accumulate_into does for it, without its checks' calls
                else:
                    shared = _getrefcount(grad) > _OWN_REFS  # before the calls below push more references
                    if input_ids is None:
                        input_ids = {id(x) for x in inputs}
                    accumulate_into(leaf, grad, input_ids, shared)
            elif old.is_sparse and not grad.is_sparse:
                leaf.grad = grad + old
            else:
                old += grad
            if post_hooks:
                for hook_id in post_hooks:
                    if hooks[hook_id](leaf) is not None:
                        raise RuntimeError("Tensor post accumulate grad hooks should return None.")

    def _run(self, compiled_fn, *args):
        if self.fallback:
            return self.graph(*args)
        prior = protocol.set_compiler(None, False)  # compiling the graph may itself use autograd
        try:
            return compiled_fn(*args)
        except Unsupported as e:  # raised while capturing, before any of the graph ran
            warnings.warn(f"compiled autograd: compiling backward graph {self.capture_id} failed ({e}); "
                          "running it uncompiled")
            self.fallback = True
            return self.graph(*args)
        finally:
            protocol.set_compiler(*prior)
