"""View and mutation analysis: run the function once on fake tensors under
functionalization, before tracing, and record what a user could observe.

Mirrors torch.compile's ``ViewAndMutationMeta``: which inputs are mutated (data,
metadata, storage via ``set_()``) and whether autograd saw the mutation; which
outputs are inputs, views of inputs, views of intermediates, or plain; which need
grad; and whether the function flipped the global grad mode (it persists after the
call, as in eager).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Callable, Optional

import torch
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.utils._python_dispatch import TorchDispatchMode

from .functional import (
    from_fun,
    functional_mode,
    has_data_mutation,
    has_metadata_mutation,
    has_storage_mutation,
    mutations_hidden_from_autograd,
    to_fun,
)


@dataclasses.dataclass
class InputInfo:
    mutates_data: bool = False
    mutates_metadata: bool = False
    mutates_storage: bool = False
    mutation_hidden_from_autograd: bool = True
    requires_grad: bool = False
    requires_grad_after: bool = False  # the new value requires grad (e.g. ``x.add_(w)``)

    @property
    def mutated(self) -> bool:
        return self.mutates_data or self.mutates_metadata or self.mutates_storage

    @property
    def mutation_needs_grad(self) -> bool:
        """The new value must flow through autograd (a differentiable output)."""
        return self.mutates_data and self.requires_grad_after and not self.mutation_hidden_from_autograd


# Output kinds.
PLAIN = "plain"                        # a fresh tensor (or a non-tensor value)
IS_INPUT = "is_input"                  # the input object itself
ALIAS_OF_INPUT = "alias_of_input"      # a view of input ``base_index``
ALIAS_OF_OUTPUT = "alias_of_output"    # a view of the plain output ``base_index``
ALIAS_OF_INTERMEDIATE = "alias_of_intermediate"  # a view of intermediate base ``base_index``


@dataclasses.dataclass
class OutputInfo:
    kind: str
    base_index: Optional[int] = None
    requires_grad: bool = False
    is_tensor: bool = True
    fake: object = None  # the fake value, for sizes/strides of regenerated views
    view_without_grad_fn: bool = False  # a view made under no_grad: no autograd history
    view_metas: object = None  # the view ops from the base (functionalization's ViewMeta list), to replay

    @property
    def differentiable(self) -> bool:
        """Returned through the autograd.Function with a tangent (not regenerated)."""
        return self.kind == PLAIN and self.is_tensor and self.requires_grad and _floating(self.fake)


def _floating(t) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


@dataclasses.dataclass
class ViewAndMutationMeta:
    inputs: list[InputInfo]
    outputs: list[OutputInfo]
    num_intermediate_bases: int
    intermediate_bases_require_grad: list[bool]
    grad_enabled_after: Optional[bool]  # None: the function left grad mode alone
    fw_out_fakes: list  # fake value of each forward-graph output, for tangents

    @property
    def fw_differentiable_fakes(self) -> list:
        return [f for f, d in zip(self.fw_out_fakes, self.fw_output_differentiable()) if d]

    @functools.cached_property
    def mutated_inputs(self) -> list[int]:
        """Indices of inputs whose new value the forward graph returns, in order."""
        return [i for i, info in enumerate(self.inputs) if info.mutated]

    def fw_output_differentiable(self) -> list[bool]:
        """Per forward-graph output (mutated inputs, user outputs, intermediate bases)."""
        diff = [self.inputs[i].mutation_needs_grad for i in self.mutated_inputs]
        diff += [o.differentiable for o in self.outputs]
        diff += list(self.intermediate_bases_require_grad)
        return diff

    @property
    def needs_autograd(self) -> bool:
        return any(self.fw_output_differentiable())

    def without_intermediate_bases(self) -> "ViewAndMutationMeta":
        """A copy where views of intermediates are plain outputs (for bare exported graphs)."""
        n_bases = self.num_intermediate_bases
        outputs = [dataclasses.replace(o, kind=PLAIN, base_index=None) if o.kind == ALIAS_OF_INTERMEDIATE else o
                   for o in self.outputs]
        return dataclasses.replace(self, outputs=outputs, num_intermediate_bases=0, intermediate_bases_require_grad=[],
                                   fw_out_fakes=self.fw_out_fakes[:len(self.fw_out_fakes) - n_bases])

    def describe(self) -> str:
        lines = []
        for i, info in enumerate(self.inputs):
            if info.mutated:
                lines.append(f"input {i}: data={info.mutates_data} metadata={info.mutates_metadata} "
                             f"storage={info.mutates_storage} hidden_from_autograd={info.mutation_hidden_from_autograd}")
        for k, o in enumerate(self.outputs):
            lines.append(f"output {k}: {o.kind} base={o.base_index} requires_grad={o.requires_grad}")
        return "\n".join(lines)


def collect_intermediate_bases(outs, inputs) -> list:
    """The bases of outputs that are views of intermediates that are not outputs themselves."""
    bases = []
    for o in outs:
        base = _view_base(o)
        if base is None or any(base is a for a in inputs) or any(base is p for p in outs):
            continue
        if not any(base is b for b in bases):
            bases.append(base)
    return bases


def _view_base(o):
    if isinstance(o, torch.Tensor) and o._is_view() and o._base is not None:
        return o._base
    return None


# In-place ops whose result dtype is ``torch.result_type(self, other)``.
_PROMOTING_IN_PLACE = {torch.ops.aten.add_, torch.ops.aten.sub_, torch.ops.aten.mul_}


def _type_name(dtype) -> str:
    """``torch.float32`` -> ``Float``, as eager's cast error names it."""
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}.get(dtype, str(dtype))


class _LeafInplaceCheck(TorchDispatchMode):
    """Raise eager's error for an in-place op (``add_``, ``set_``, ``copy_``...), with grad
    enabled, on an input that is a leaf requiring grad or a view of one.  Functional
    tensors do not carry that check, so this mode sits above the functionalization."""

    def __init__(self, leaves):
        super().__init__()
        self.leaves = leaves

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        schema_args = func._schema.arguments
        writes_self = bool(schema_args) and schema_args[0].alias_info is not None and schema_args[0].alias_info.is_write
        if writes_self and func.overloadpacket in _PROMOTING_IN_PLACE and len(args) > 1:
            # functionalization makes ``x.mul_(y)`` a mul and a copy_ (which casts): eager
            # refuses a result type the output cannot hold (int tensor times a float)
            result = torch.result_type(args[0], args[1])
            if not torch.can_cast(result, args[0].dtype):
                raise RuntimeError(f"result type {_type_name(result)} can't be cast to the desired output type "
                                   f"{_type_name(args[0].dtype)}")
        if writes_self and torch.is_grad_enabled() and args and isinstance(args[0], torch.Tensor):
            t = args[0]
            if any(t is leaf for leaf in self.leaves):
                raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
            # a view that needs no grad (``w.detach()``, ``w.data``, a view made under
            # no_grad) may be written, as in eager
            if t._is_view() and t.requires_grad and any(t._base is leaf for leaf in self.leaves):
                raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
        return func(*args, **(kwargs or {}))


def _ignore_fresh_unbacked_symbols(fake_args):
    for a in fake_args:
        mode = getattr(a, "fake_mode", None)
        if mode is not None and mode.shape_env is not None:
            return mode.shape_env.ignore_fresh_unbacked_symbols()
    return contextlib.nullcontext()


def run_analysis(fn: Callable, fake_args: list) -> ViewAndMutationMeta:
    """Run ``fn(*fake_args)`` under functionalization and classify inputs and outputs.

    ``fn`` returns a tuple or list.  Errors eager would raise (e.g. an in-place op on a
    leaf that requires grad) are raised here.  The global grad mode is restored
    afterwards; a change is recorded in ``grad_enabled_after``.
    """
    grad_before = torch.is_grad_enabled()
    try:
        # data-dependent sizes (nonzero, masked_select, item) made here are never bound to
        # a graph output: the trace that follows makes its own
        with _ignore_fresh_unbacked_symbols(fake_args), functional_mode():
            f_args = [to_fun(a) for a in fake_args]
            leaves = [fa for a, fa in zip(fake_args, f_args)
                      if isinstance(a, torch.Tensor) and a.is_leaf and a.requires_grad]
            with _LeafInplaceCheck(leaves):
                outs = list(fn(*f_args))
            grad_after = torch.is_grad_enabled()
            inputs = []
            for a, fa in zip(fake_args, f_args):
                info = InputInfo(requires_grad=isinstance(a, torch.Tensor) and a.requires_grad)
                if isinstance(fa, FunctionalTensor):
                    info.mutates_data = has_data_mutation(fa)
                    info.mutates_storage = has_storage_mutation(fa, a)
                    info.mutates_metadata = info.mutates_storage or has_metadata_mutation(fa, a)
                    # a leaf that requires grad can only have been written through an alias
                    # autograd does not see (``w.data``, ``w.detach()``): eager raises for
                    # the others (checked above), and the leaf keeps no history
                    info.mutation_hidden_from_autograd = mutations_hidden_from_autograd(fa) or (
                        a.is_leaf and a.requires_grad)
                    info.requires_grad_after = fa.requires_grad and _floating(fa)
                inputs.append(info)
            bases = collect_intermediate_bases(outs, f_args)
            outputs = [_classify(o, outs, f_args, bases) for o in outs]
            bases_rg = [b.requires_grad and _floating(b) for b in bases]
            fw_out_fakes = [from_fun(f_args[i]) for i, info in enumerate(inputs) if info.mutated]
            fw_out_fakes += [from_fun(o) for o in outs] + [from_fun(b) for b in bases]
    finally:
        torch._C._set_grad_enabled(grad_before)
    return ViewAndMutationMeta(
        inputs=inputs,
        outputs=outputs,
        num_intermediate_bases=len(bases),
        intermediate_bases_require_grad=bases_rg,
        grad_enabled_after=None if grad_after == grad_before else grad_after,
        fw_out_fakes=fw_out_fakes,
    )


def _view_metas(o):
    """The view ops that make ``o`` from its base, when they replay without symbols.

    A view of an input mutated in the graph has sizes/strides/offset of the graph's
    fresh copy, not of the user's tensor; replaying the views on the user's tensor gives
    eager's (a transpose of a sliced, then clamped input)."""
    try:
        seq = torch._C._functionalization.get_view_meta_sequence(o.elem)
    except (AttributeError, RuntimeError, TypeError):
        return None
    if not seq or any(getattr(vm, "has_symbolic_inputs", True) for vm in seq):
        return None
    return seq


def _classify(o, outs, f_args, bases) -> OutputInfo:
    if not isinstance(o, torch.Tensor):
        return OutputInfo(PLAIN, is_tensor=False, fake=o)
    fake = from_fun(o)
    rg = o.requires_grad
    no_history = o._is_view() and o.grad_fn is None
    for i, a in enumerate(f_args):
        if o is a:
            return OutputInfo(IS_INPUT, i, rg, fake=fake)
    base = _view_base(o)
    if base is None:
        return OutputInfo(PLAIN, requires_grad=rg, fake=fake)
    for i, a in enumerate(f_args):
        if base is a:
            return OutputInfo(ALIAS_OF_INPUT, i, rg, fake=fake, view_without_grad_fn=no_history,
                              view_metas=_view_metas(o))
    for k, p in enumerate(outs):
        if base is p:
            return OutputInfo(ALIAS_OF_OUTPUT, k, rg, fake=fake, view_without_grad_fn=no_history)
    for k, b in enumerate(bases):
        if base is b:
            return OutputInfo(ALIAS_OF_INTERMEDIATE, k, rg, fake=fake, view_without_grad_fn=no_history)
    raise AssertionError("unreachable: every view base is an input, an output or a collected base")
