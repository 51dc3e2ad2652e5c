"""Runtime wrappers around the compiled forward/backward graphs.

* ``make_autograd_function``: a ``torch.autograd.Function`` per compiled graph pair, as
  torch.compile builds.  The forward runs the compiled forward graph and saves what the
  partitioner chose; the backward runs the compiled backward graph (compiled with the
  forward; a tangent that arrives as an expanded scalar, as from ``out.sum()``, is passed
  as is to a backward compiled for that layout).  Outputs that do not need grad are
  marked non-differentiable; missing (``None``) gradients are materialized as zeros.
  A backward that itself is differentiated raises
  ``RuntimeError("torch.compile with aot_autograd does not currently support double
  backward")`` when that second gradient is taken.
* ``finish_call``: the epilogue everything a user observes goes through: input
  mutations are written back (``copy_``, ``as_strided_``, ``set_``; under ``no_grad``
  when eager's mutation was), aliased outputs are regenerated as real views of their
  base, and a grad-mode change made inside the graph persists.
* ``call_compiled``: calls a compiled graph, boxed (one list argument, torch's
  ``_boxed_call`` convention) or not.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch

from .analysis import ALIAS_OF_INPUT, ALIAS_OF_INTERMEDIATE, ALIAS_OF_OUTPUT, IS_INPUT, PLAIN, ViewAndMutationMeta
from .broadcast_tangents import is_broadcast_scalar

DOUBLE_BACKWARD_ERROR = "torch.compile with aot_autograd does not currently support double backward"


def call_compiled(fn: Callable, args: list) -> list:
    if getattr(fn, "_boxed_call", False):
        return list(fn(list(args)))
    return list(fn(*args))


def function_apply(fn_cls: type) -> Callable:
    """``fn_cls.apply`` for a compiled graph's ``autograd.Function``, without its Python
    prologue on each call.  ``Function.apply`` (torch 2.11-2.15) passes every argument
    through functorch's ``unwrap_if_dead`` (a functorch wrapper that outlived its
    transform is unwrapped) and then calls the C ``_FunctionBase.apply``; that costs
    ~0.3 us per argument, and a training forward passes every parameter.  A
    ``Parameter`` is never such a wrapper (functorch wraps into plain tensors), so only
    the other tensor arguments are unwrapped here; under an active functorch transform
    the call goes through ``fn_cls.apply`` as before."""
    c_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, fn_cls)
    transforms_active = torch._C._are_functorch_transforms_active
    unwrap_if_dead = torch._C._functorch.unwrap_if_dead
    parameter, tensor = torch.nn.Parameter, torch.Tensor

    def apply(*args):
        if transforms_active():
            return fn_cls.apply(*args)
        return c_apply(*[a if type(a) is parameter or not isinstance(a, tensor) else unwrap_if_dead(a) for a in args])

    return apply


class _NoDoubleBackward(torch.autograd.Function):
    """Runs the compiled backward; differentiating through it raises (as torch does)."""

    @staticmethod
    def forward(ctx, bw_fn, *args):
        return tuple(call_compiled(bw_fn, args))

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(DOUBLE_BACKWARD_ERROR)


def make_autograd_function(fw_fn: Callable, get_bw_fn: Callable[..., Callable], meta: ViewAndMutationMeta,
                           num_saved_tensors: int, num_fw_outs: int, forward_in_grad_mode: bool = False,
                           broadcast_ok: frozenset = frozenset(), bw_module: torch.fx.GraphModule | None = None,
                           load_bw_module: Callable[[], torch.fx.GraphModule | None] | None = None,
                           in_graph=()):
    """The ``autograd.Function`` class for one compiled forward/backward pair.

    ``forward(ctx, *args)`` takes the graph inputs (tensors and SymInts) and returns the
    forward outputs (mutated inputs' new values, user outputs, intermediate bases); the
    compiled forward returns those, then ``num_saved_tensors`` saved tensors, then the
    saved SymInts.
    ``get_bw_fn(broadcast=())`` returns the compiled backward graph, for the tangents at
    positions ``broadcast`` arriving as expanded scalars (compiling it on first call);
    only positions in ``broadcast_ok`` are passed that way, the others are made
    contiguous.  ``forward_in_grad_mode``: run the forward graph on detached inputs with grad mode on, for kernels that only
    produce what their backward needs when it is (oneDNN RNN layers' workspace).
    ``bw_module``: the backward ATen graph; compiled autograd traces it into the graph of
    the whole backward (``_torchkiln_trace_backward``) instead of calling the compiled one.
    ``load_bw_module``: instead of ``bw_module``, a function returning it (or None: it
    does not load; compiled autograd then calls the compiled backward), called when
    compiled autograd first traces this backward (an AOT autograd cache hit parses the
    stored graph only then).
    ``in_graph``: mutated inputs the forward graph writes itself; their new values are
    not among its outputs.
    """
    diff_mask = meta.fw_output_differentiable()
    if in_graph:
        diff_mask = [d for k, d in enumerate(diff_mask) if k >= len(meta.mutated_inputs)
                     or meta.mutated_inputs[k] not in in_graph]
    mutated_data = [i for i in meta.mutated_inputs if meta.inputs[i].mutates_data and i not in in_graph]
    all_differentiable = all(diff_mask) and len(diff_mask) == num_fw_outs

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            if forward_in_grad_mode:
                with torch.enable_grad():
                    outs = call_compiled(fw_fn, [a.detach() if isinstance(a, torch.Tensor) else a for a in args])
            else:
                outs = call_compiled(fw_fn, args)
            fw_outs = outs[:num_fw_outs]
            saved = outs[num_fw_outs:num_fw_outs + num_saved_tensors]
            syms = outs[num_fw_outs + num_saved_tensors:]
            # A saved input (or view of one) that the epilogue will overwrite is saved by
            # value: the backward may recompute from the pre-mutation value.
            if mutated_data:
                ptrs = {args[i].untyped_storage().data_ptr() for i in mutated_data}
                saved = [t.clone() if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in ptrs else t
                         for t in saved]
            ctx.save_for_backward(*saved)
            ctx.saved_syms = syms
            ctx.num_args = len(args)
            ctx.tangent_meta = [(o.shape, o.dtype, o.device) for o, d in zip(fw_outs, diff_mask) if d]
            if all_differentiable:
                return tuple(fw_outs)
            result, non_differentiable = [], []
            for o, d in zip(fw_outs, diff_mask):
                if isinstance(o, torch.Tensor) and not d:
                    o = o.detach()
                    non_differentiable.append(o)
                result.append(o)
            # one call: each call replaces the set of the previous one (only the last tensor
            # marked stayed non-differentiable; a buffer's clone came out requiring grad)
            ctx.mark_non_differentiable(*non_differentiable)
            return tuple(result)

        @staticmethod
        def backward(ctx, *grad_outs):
            tangents, broadcast = [], []
            grads_in = (g for g, d in zip(grad_outs, diff_mask) if d)
            for i, (g, (shape, dtype, device)) in enumerate(zip(grads_in, ctx.tangent_meta)):
                if g is None:
                    g = torch.zeros(shape, dtype=dtype, device=device)
                elif i in broadcast_ok and is_broadcast_scalar(g):
                    broadcast.append(i)  # passed as is, to a backward compiled for it
                elif g.layout != torch.strided:  # a sparse grad (of to_sparse): the backward was traced dense
                    g = g.to_dense()
                elif not g.is_contiguous():
                    g = g.contiguous()
                tangents.append(g)
            args = [*ctx.saved_syms, *ctx.saved_tensors, *tangents]
            bw_fn = get_bw_fn(tuple(broadcast)) if broadcast else get_bw_fn()
            if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
                grads = _NoDoubleBackward.apply(bw_fn, *args)
            else:
                grads = call_compiled(bw_fn, args)
            grads = list(grads)
            return tuple(grads) + (None,) * (ctx.num_args - len(grads))

        @staticmethod
        def _compiled_autograd_key(ctx):
            # The saved SymInts are baked into a compiled-autograd capture: part of its key.
            # (Asked by the engine on every compiled-autograd backward.)
            syms = ctx.saved_syms
            if not syms:
                return (ctx._autograd_function_id,)
            return (ctx._autograd_function_id, *[int(s) for s in syms])

        if bw_module is not None or load_bw_module is not None:
            @staticmethod
            def _torchkiln_trace_backward(ctx, saved_tensors, grad_outs):
                module = bw_module if bw_module is not None else load_bw_module()
                if module is None:  # compiled autograd falls back to calling the compiled backward
                    raise RuntimeError("the stored backward graph does not load")
                tangents = []
                grads_in = (g for g, d in zip(grad_outs, diff_mask) if d)
                for g, (shape, dtype, device) in zip(grads_in, ctx.tangent_meta):
                    tangents.append(torch.zeros(shape, dtype=dtype, device=device) if g is None else g.contiguous())
                grads = list(module(*ctx.saved_syms, *saved_tensors, *tangents))
                return tuple(grads) + (None,) * (ctx.num_args - len(grads))

    return CompiledFunction


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return False


def _view_metadata(base: torch.Tensor, graph_out: torch.Tensor, fake):
    """Size, stride, offset of the view to regenerate: the graph output's when it is a
    real view of ``base``, else the static metadata recorded at compile time."""
    if _shares_storage(base, graph_out):
        return graph_out.size(), graph_out.stride(), graph_out.storage_offset()
    stride, offset = fake.stride(), fake.storage_offset()
    if all(isinstance(s, int) for s in stride) and isinstance(offset, int):
        return graph_out.size(), stride, offset
    return graph_out.size(), graph_out.stride(), graph_out.storage_offset()


def regenerate_view(base: torch.Tensor, graph_out: torch.Tensor, info, fake) -> torch.Tensor:
    """``base.as_strided(...)``: made under ``no_grad`` when eager's view had no history."""
    size, stride, offset = _view_metadata(base, graph_out, fake)
    if not info.requires_grad and base.requires_grad:
        # a view of ``base.detach()`` (eager's ``x.detach().view(...)``): a view made under
        # no_grad of a tensor that requires grad still requires it
        base = base.detach()
    ctx = contextlib.nullcontext() if info.requires_grad and not info.view_without_grad_fn else torch.no_grad()
    with ctx:
        if info.view_metas is not None:
            view = torch._C._functionalization.apply_view_meta_sequence(base, info.view_metas)
            if view.shape == graph_out.shape and view.dtype == graph_out.dtype:
                return view
        if _is_reshape_of(base, graph_out.dtype, size, stride, offset):
            # base.view: autograd records a ViewBackward (a reshape of the gradient), where
            # as_strided's backward zero-fills and scatters a base-sized gradient on every
            # step (a language model's logits, a view of the head's matmul output)
            view = base.view(size)
        else:
            view = _reinterpret(base, graph_out.dtype).as_strided(size, stride, offset)
        if view.is_conj() != graph_out.is_conj():  # _conj's lazy conjugation bit
            view = view.conj()
        if view.is_neg() != graph_out.is_neg():
            view = torch._neg_view(view)
        return view


def _is_reshape_of(base: torch.Tensor, dtype, size, stride, offset) -> bool:
    """Whether ``base.as_strided(size, stride, offset)`` is ``base.view(size)``: a
    contiguous base seen whole, with contiguous strides, at its own offset."""
    if base.dtype != dtype or offset != base.storage_offset() or not base.is_contiguous():
        return False
    expected, numel = [], 1
    for s in reversed(list(size)):
        expected.append(numel)
        numel *= s
    return numel == base.numel() and all(a == b for a, b, n in zip(stride, reversed(expected), size) if n != 1)


def _reinterpret(base: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``base``'s storage seen as ``dtype`` (``view_as_complex``/``view_as_real``/
    ``view(dtype)`` outputs), for ``as_strided`` with the output's element units."""
    if base.dtype == dtype:
        return base
    if base.is_complex() and not dtype.is_complex and dtype.itemsize * 2 == base.dtype.itemsize:
        return torch.view_as_real(base)
    if dtype.is_complex and not base.is_complex() and base.dtype.itemsize * 2 == dtype.itemsize:
        n = base.untyped_storage().nbytes() // base.element_size()
        return torch.view_as_complex(base.as_strided((n // 2, 2), (2, 1), 0))
    if dtype.itemsize == base.dtype.itemsize:
        return base.view(dtype)
    n = base.untyped_storage().nbytes() // base.element_size()
    return base.as_strided((n,), (1,), 0).view(dtype)


def apply_input_mutation(inp: torch.Tensor, new: torch.Tensor, info, fake) -> None:
    """Write a mutated input's new value back into the user's tensor."""
    if info.mutates_storage:
        with torch.no_grad():
            inp.set_(new)
        return
    if info.mutates_metadata:
        size, stride, offset = _view_metadata(inp, new, fake)
        with torch.no_grad():
            inp.as_strided_(size, stride, offset)
    if info.mutates_data:
        inp, new = _without_broadcast_dims(inp, new)
        if info.mutation_needs_grad:
            inp.copy_(new)
        else:
            with torch.no_grad():
                inp.copy_(new)


def _without_broadcast_dims(inp: torch.Tensor, new: torch.Tensor):
    """``inp`` and ``new`` with ``inp``'s stride-0 dims narrowed to their first element.

    Eager's ``fill_``/``zero_`` write an expanded tensor (every element of a stride-0 dim
    is one memory location); ``copy_`` into it would raise, so only one is written."""
    if inp.layout != torch.strided or all(st != 0 or sz <= 1 for sz, st in zip(inp.shape, inp.stride())):
        return inp, new
    if new.shape != inp.shape:
        new = new.expand(inp.shape)
    for d, (sz, st) in enumerate(zip(inp.shape, inp.stride())):
        if st == 0 and sz > 1:
            inp, new = inp.narrow(d, 0, 1), new.narrow(d, 0, 1)
    return inp, new


def nothing_to_finish(meta: ViewAndMutationMeta, returned_mutations: list) -> bool:
    """Whether :func:`finish_call` would return the first ``len(meta.outputs)`` graph
    outputs as they are: no mutation to write back, no alias to regenerate, grad mode
    left alone."""
    return not returned_mutations and meta.grad_enabled_after is None and all(o.kind == PLAIN for o in meta.outputs)


def finish_call(args: list, fw_outs: list, meta: ViewAndMutationMeta, returned_mutations: list) -> list:
    """Apply input mutations and regenerate aliased outputs; returns the user outputs.

    ``returned_mutations``: the input indices whose new values lead ``fw_outs``.
    """
    n_mut, n_out = len(returned_mutations), len(meta.outputs)
    fakes = meta.fw_out_fakes
    fake_of_mut = {i: fakes[k] for k, i in enumerate(meta.mutated_inputs)}
    for i, new in zip(returned_mutations, fw_outs[:n_mut]):
        apply_input_mutation(args[i], new, meta.inputs[i], fake_of_mut[i])
    user = fw_outs[n_mut:n_mut + n_out]
    bases = fw_outs[n_mut + n_out:]
    offset = len(meta.mutated_inputs)
    results = []
    for k, info in enumerate(meta.outputs):
        o = user[k]
        if info.kind == IS_INPUT:
            o = args[info.base_index]
        elif info.kind == ALIAS_OF_INPUT:
            o = regenerate_view(args[info.base_index], o, info, fakes[offset + k])
        elif info.kind == ALIAS_OF_OUTPUT:
            o = regenerate_view(user[info.base_index], o, info, fakes[offset + k])
        elif info.kind == ALIAS_OF_INTERMEDIATE:
            o = regenerate_view(bases[info.base_index], o, info, fakes[offset + k])
        results.append(o)
    if meta.grad_enabled_after is not None:
        torch._C._set_grad_enabled(meta.grad_enabled_after)
    return results
