"""Collectives in captured graphs.

Functional collectives (``torch.distributed._functional_collectives``: ``all_reduce``,
``all_gather_tensor``/``_single``, ``reduce_scatter_tensor``/``_single``, ``broadcast``,
``wait_tensor``) are captured as ``torch.ops._c10d_functional`` op nodes followed by
``wait_tensor``, which is what those functions run under tracing (TorchDynamo rewrites
them the same way).  The process group is resolved to its name
while capturing; a group read from a source is guarded by identity.  Downstream the ops
are ordinary functional ATen ops: AOT traces them as they are, codegen calls them as
extern kernels, and the data dependence of ``wait_tensor`` on the collective's output
keeps the two in order.  The ``*_autograd`` variants are not handled (their ops differ
between torch releases): capture inlines them as any other function.

In-place collectives on a process group (``torch.distributed.all_reduce(t)`` and the
rest) mutate their argument through the process group's own work queue and are not
traceable: capture makes them graph breaks with a reason that names the functional
alternative, and they run eagerly between the graphs.
"""
from __future__ import annotations

import inspect

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed import distributed_c10d as c10d

from ..capture.variables.base import ConstantVariable, unsupported
from ..capture.variables.functions import register_call_handler

_ops = torch.ops._c10d_functional


def _constant(vt, what: str):
    if not vt.is_python_constant():
        unsupported(f"functional collective: {what} must be a constant, got {vt}")
    return vt.as_python_constant()


def _group_value(tx, vt):
    """The real group argument (ProcessGroup, ranks, DeviceMesh or group name), guarded."""
    if vt.is_python_constant():
        return vt.as_python_constant()
    value = getattr(vt, "value", None)
    if value is None:
        items = getattr(vt, "items", None)
        if items is not None:  # a list/tuple of ranks or (DeviceMesh, dim)
            return type(items)(_group_value(tx, item) for item in items)
        unsupported(f"functional collective: group {vt} is not a process group, ranks or device mesh")
    source = getattr(vt, "source", None)
    if source is not None:
        tx.output.guards.id_match(source, value)
    return value


def _resolve(tx, group_vt, tag_vt) -> tuple[str, int]:
    """``(group name, group size)`` of a functional collective's group argument."""
    group = _group_value(tx, group_vt)
    tag = _constant(tag_vt, "tag")
    try:
        name = funcol._resolve_group_name(group, tag)
        size = c10d._resolve_process_group(name).size()
    except Exception as e:  # noqa: BLE001
        unsupported(f"functional collective: cannot resolve group {group!r} ({type(e).__name__}: {e})")
    return str(name), size


def _bind(fn, args, kwargs):
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        unsupported(f"{fn.__name__}: {e}")
    out = {}
    for name, param in inspect.signature(fn).parameters.items():
        if name in bound.arguments:
            out[name] = bound.arguments[name]
        elif param.default is not inspect.Parameter.empty:
            out[name] = ConstantVariable(param.default)
    return out


def _call(tx, op, *args):
    return tx.output.call_function(tx, op, [a if hasattr(a, "is_python_constant") else ConstantVariable(a)
                                            for a in args], {})


def _wait(tx, vt):
    return _call(tx, _ops.wait_tensor.default, vt)


def _all_reduce(fn):
    def handler(tx, args, kwargs):
        a = _bind(fn, args, kwargs)
        name, _ = _resolve(tx, a["group"], a["tag"])
        op = _constant(a["reduceOp"], "reduceOp").lower()
        return _wait(tx, _call(tx, _ops.all_reduce.default, a["self"], op, name))
    return handler


def _all_gather(fn):
    def handler(tx, args, kwargs):
        a = _bind(fn, args, kwargs)
        name, size = _resolve(tx, a["group"], a["tag"])
        dim = _constant(a["gather_dim"], "gather_dim")
        out = _wait(tx, _call(tx, _ops.all_gather_into_tensor.default, a["self"], size, name))
        if dim != 0:  # the ranks' shards are stacked along dim 0: move them to gather_dim
            chunks = tx.output.call_function(tx, torch.chunk, [out, ConstantVariable(size)], {"dim": ConstantVariable(0)})
            out = tx.output.call_function(tx, torch.cat, [chunks], {"dim": ConstantVariable(dim)})
        return out
    return handler


def _reduce_scatter(fn):
    def handler(tx, args, kwargs):
        a = _bind(fn, args, kwargs)
        name, size = _resolve(tx, a["group"], a["tag"])
        dim = _constant(a["scatter_dim"], "scatter_dim")
        op = _constant(a["reduceOp"], "reduceOp").lower()
        inp = a["self"]
        if dim != 0:  # each rank's slice of scatter_dim becomes one block of dim 0
            chunks = tx.output.call_function(tx, torch.chunk, [inp, ConstantVariable(size)], {"dim": ConstantVariable(dim)})
            inp = tx.output.call_function(tx, torch.cat, [chunks], {"dim": ConstantVariable(0)})
        return _wait(tx, _call(tx, _ops.reduce_scatter_tensor.default, inp, op, size, name))
    return handler


def _broadcast(fn):
    def handler(tx, args, kwargs):
        a = _bind(fn, args, kwargs)
        name, _ = _resolve(tx, a["group"], a["tag"])
        src = _constant(a["src"], "src")
        return _wait(tx, _call(tx, _ops.broadcast.default, a["self"], src, name))
    return handler


def _wait_tensor(tx, args, kwargs):
    if len(args) != 1 or kwargs:
        unsupported("wait_tensor takes one tensor")
    return _wait(tx, args[0])


_IN_PLACE = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
             "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "reduce", "gather", "scatter",
             "all_to_all", "all_to_all_single", "barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv",
             "monitored_barrier")


def _in_place_break(name: str):
    functional = {"all_reduce": "all_reduce", "all_gather_into_tensor": "all_gather_tensor",
                  "reduce_scatter_tensor": "reduce_scatter_tensor", "broadcast": "broadcast",
                  "all_to_all_single": "all_to_all_single"}.get(name)
    hint = (f"; use torch.distributed._functional_collectives.{functional} to capture it" if functional else "")

    def handler(tx, args, kwargs):
        unsupported(f"torch.distributed.{name} is an in-place collective on a process group "
                    f"(not traceable; it runs eagerly between graphs){hint}")
    return handler


def install() -> None:
    """Register the capture handlers for functional and in-place collectives."""
    for names, make in ((("all_reduce",), _all_reduce),
                        (("all_gather_tensor", "all_gather_single"), _all_gather),
                        (("reduce_scatter_tensor", "reduce_scatter_single"), _reduce_scatter),
                        (("broadcast",), _broadcast)):
        for name in names:
            fn = getattr(funcol, name, None)
            if fn is not None:
                register_call_handler(fn, make(fn))
    register_call_handler(funcol.wait_tensor, _wait_tensor)
    for name in _IN_PLACE:
        for owner in (dist, c10d):
            fn = getattr(owner, name, None)
            if fn is not None:
                register_call_handler(fn, _in_place_break(name))


install()
