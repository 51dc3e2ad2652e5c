"""The engine boundary: ``torch._C._dynamo.compiled_autograd``, the C++ autograd engine's
capture protocol (the one part of ``torch._C._dynamo`` torchkiln may use; DESIGN.md).

``set_autograd_compiler(factory, dynamic)`` makes every backward run through the
engine's compiled path: it builds a cache key from the autograd graph and on a miss
calls ``factory()`` for a compiler object (:class:`~.tracer.AutogradCapture`) and drives
it; ``clear_cache()`` drops the engine's cache; ``set_verbose_logger(logger)`` makes it
report why a key missed.  The protocol is private and changes between torch minor
versions; what torchkiln relies on is pinned below and checked at import
(:func:`unverified_reason`).

Verified on 2.13 (here) and 2.11 (the GPU machine, CPython 3.12, torch 2.11.0+cu130:
tests/compiled_autograd 52 passed with capture on); every callback below is exercised by
tests/compiled_autograd.  Differences between the two are handled where marked.

======================  =============================================  ======================================
engine -> compiler      torch 2.13                                     torch 2.11 (verified)        
======================  =============================================  ======================================
set_autograd_compiler   (factory, dynamic) -> (prior, prior_dynamic)   same
begin_capture           (inputs, sizes, scalars, origins,              same
                        accumulate_grad, check_nans)
                        -> (compile_id, inputs, sizes, scalars)
bind_function           (name, fn, is_custom_function, is_traceable)   same; names bound once per process
apply_functional        (name, grads, args, output_metadata)           same
validate_outputs        (_, outputs, args, output_metadata)            same
proxy_call_backward     (inputs, output_metadatas, saved_tensors,      same
                        backward_idx, ctx, backward_state_idx,
                        opaque_object_indices)
accumulate_grad         (variable, variable_grad, grad,                (variable, grad, has_post_hooks) -> None:
                        has_post_hooks) -> grad                        the engine asserts the None
                                                                       (stuff.is_none(), python_compiled_
                                                                       autograd.cpp:305, the GPU log's
                                                                       assert); handled (3-argument form)
tensor/node hooks       tensor_pre_hook(inputs, id, i),                same
                        cpp_tensor_pre_hook(inputs, id, i),
                        pre_hook(inputs, id), post_hook(outputs,
                        inputs, id), post_acc_grad_hook(input, id),
                        unpack_hook(hook_id, data_id)
set_node_origin         (node_name, nodecall_index, pyobj)             same
end_capture             (outputs) -> (runtime_wrapper, compiled_fn)    same
runtime_wrapper         (compiled_fn, inputs, sizes, scalars, hooks,   same
                        packed_data) -> list of grad outputs
set_verbose_logger      a logger the engine ``.debug``s (borrowed:     same
                        kept alive by logs.ENGINE_LOGGER)
call_cpp_tensor_pre_    (hook_id, grad), valid while the engine's      same
hooks                   compiled call runs
======================  =============================================  ======================================

Only the versions in ``VERIFIED`` (every callback above run by tests/compiled_autograd
on that torch) get our compiler: on any other minor version ``enable`` warns once and
runs the backward on the plain eager engine (:func:`unverified_reason`), since a
protocol mismatch surfaces inside the C++ engine as an INTERNAL ASSERT (torch 2.11:
``stuff.is_none()`` at python_compiled_autograd.cpp:305), not as a clean error.
``TORCHKILN_CA_UNVERIFIED_PROTOCOL=1`` captures anyway: how a new version is verified.
"""
from __future__ import annotations

import os

import torch

VERIFIED = {(2, 11), (2, 13), (2, 15)}  # 2.15: tests/compiled_autograd 54 passed (CPU, opt-in run)
OPT_IN = "TORCHKILN_CA_UNVERIFIED_PROTOCOL"  # =1: capture on an unverified torch anyway (to verify it)
REQUIRED = ("set_autograd_compiler", "clear_cache", "set_verbose_logger", "call_cpp_tensor_pre_hooks")


def torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def engine():
    """The engine's capture-protocol module (``torch._C._dynamo.compiled_autograd``)."""
    return torch._C._dynamo.compiled_autograd


def unverified_reason() -> str | None:
    """``None`` when this torch's engine protocol is one torchkiln verified, else why the
    backward runs eagerly instead (the warning text and the tests' skip reason).  Asked
    at every ``enable`` (every training step's backward): a verified version's answer is
    kept per ``VERIFIED`` without reading the environment (~4 us a step); otherwise it
    depends on the opt-in switch too and is kept per (``VERIFIED``, switch)."""
    verified = (id(VERIFIED), len(VERIFIED))
    if _reason[0] == verified:
        return None
    key = (*verified, os.environ.get(OPT_IN))
    if _reason[1] != key:
        reason = _unverified_reason()
        _reason[:] = [verified if reason is None and torch_version() in VERIFIED else None, key, reason]
    return _reason[2]


_reason: list = [None, None, None]  # [verified key or None, (verified key, opt-in switch), reason]


def _unverified_reason() -> str | None:
    major, minor = torch_version()
    if (major, minor) not in VERIFIED and os.environ.get(OPT_IN) != "1":
        return f"compiled autograd: torch {major}.{minor}'s engine protocol is not verified; running the backward eagerly"
    missing = [name for name in REQUIRED if not hasattr(engine(), name)]
    if missing:
        return f"compiled autograd: torch {torch.__version__}'s engine lacks {missing}; running the backward eagerly"
    return None


def set_compiler(factory, dynamic: bool):
    """Install ``factory`` (or ``None``); returns the prior ``(factory, dynamic)``.  The
    first call rebinds ``set_compiler`` to the engine's C function itself: a training
    step calls it four times (``enable`` in and out, the engine compiler off and back
    on around the compiled graph), each through two module lookups and a Python frame
    otherwise (only called where the engine has it: a verified protocol)."""
    global set_compiler
    set_compiler = engine().set_autograd_compiler
    return set_compiler(factory, dynamic)


def set_verbose_logger(logger) -> None:
    engine().set_verbose_logger(logger)


def clear_cache() -> None:
    engine().clear_cache()
