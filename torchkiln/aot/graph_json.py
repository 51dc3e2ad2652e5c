"""An ATen FX graph as plain JSON data, and back (no pickle, no code to exec).

The AOT autograd cache stores the backward graph this way, so that a forward loaded
from the cache still hands compiled autograd its backward ATen graph to trace (a cold
compile does, through ``make_autograd_function(bw_module=)``).

Covered: placeholder / call_function / output nodes; targets that are ATen-style
operator overloads (``torch.ops.<ns>.<op>.<overload>``), ``operator`` and ``math``
functions and ``torch.sym_*`` found by name (nothing else resolves); arguments built from nodes,
``None``/bool/int/float/str, lists, tuples, dicts with str keys, ``torch.dtype``,
``torch.device``, ``torch.layout``, ``torch.memory_format``.  Anything else (tensor
constants, submodules) raises :class:`ValueError`: the caller stores no graph.
"""
from __future__ import annotations

import math
import operator
import re

import torch
import torch.fx

_ENUMS = {"dtype": (torch.dtype, lambda s: getattr(torch, s)),
          "layout": (torch.layout, lambda s: getattr(torch, s)),
          "memory_format": (torch.memory_format, lambda s: getattr(torch, s))}
_MODULES = {"operator": operator, "math": math, "torch": torch}


def _target_to_json(target) -> list:
    if isinstance(target, torch._ops.OpOverload):
        ns, name = target._schema.name.split("::")
        return ["op", ns, name, target._overloadname]
    module = getattr(target, "__module__", None) or ""
    qualname = getattr(target, "__qualname__", getattr(target, "__name__", ""))
    root = "operator" if module in ("_operator", "operator") else module.split(".")[0]
    if root in _MODULES and _lookup(root, qualname) is target:
        return ["fn", root, qualname]
    raise ValueError(f"target {target!r} has no stable name")


def _lookup(root: str, qualname: str):
    """``root.qualname`` where it is a function a graph may call (else None): any public
    ``operator``/``math`` function, and from ``torch`` only the SymInt helpers
    (``torch.sym_*``): data that names ``torch.load``, ``torch.os.system`` or another
    module's attribute resolves to nothing, so stored data can call no other code."""
    if root not in _MODULES or "." in qualname or not qualname.isidentifier():
        return None
    if root == "torch" and not re.fullmatch(r"_?sym_\w+", qualname):
        return None
    if root != "torch" and qualname.startswith("_"):
        return None
    obj = getattr(_MODULES[root], qualname, None)
    return obj if callable(obj) and not isinstance(obj, type) else None


def _target_from_json(t: list):
    if t[0] == "op":
        _, ns, name, overload = t
        if not all(isinstance(p, str) and p.isidentifier() and not p.startswith("__") for p in (ns, name, overload)):
            raise ValueError(f"bad operator name {t!r}")
        op = getattr(getattr(getattr(torch.ops, ns), name), overload)
        if not isinstance(op, torch._ops.OpOverload):
            raise ValueError(f"{ns}.{name}.{overload} is not an operator overload")
        return op
    target = _lookup(t[1], t[2])
    if target is None:
        raise ValueError(f"no {t[1]}.{t[2]}")
    return target


def _arg_to_json(a):
    if isinstance(a, torch.fx.Node):
        return {"node": a.name}
    if a is None or isinstance(a, (bool, int, str)):
        return a
    if isinstance(a, float):
        return {"float": repr(a)}
    if isinstance(a, (list, tuple)):
        items = [_arg_to_json(x) for x in a]
        return items if isinstance(a, list) else {"tuple": items}
    if isinstance(a, dict) and all(isinstance(k, str) for k in a):
        return {"dict": {k: _arg_to_json(v) for k, v in a.items()}}
    if isinstance(a, torch.device):
        return {"device": str(a)}
    for kind, (cls, _) in _ENUMS.items():
        if isinstance(a, cls):
            return {kind: str(a).split(".")[-1]}
    raise ValueError(f"argument {a!r} of type {type(a).__name__}")


def _arg_from_json(a, env: dict):
    if a is None or isinstance(a, (bool, int, str)):
        return a
    if isinstance(a, list):
        return [_arg_from_json(x, env) for x in a]
    (kind, value), = a.items()
    if kind == "node":
        return env[value]
    if kind == "float":
        return float(value)
    if kind == "tuple":
        return tuple(_arg_from_json(x, env) for x in value)
    if kind == "dict":
        return {k: _arg_from_json(v, env) for k, v in value.items()}
    if kind == "device":
        return torch.device(value)
    return _ENUMS[kind][1](value)


def graph_to_json(gm: torch.fx.GraphModule) -> list:
    """``gm``'s nodes as JSON data; raises ``ValueError`` for what is not covered."""
    nodes = []
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            nodes.append(["placeholder", n.name])
        elif n.op == "call_function":
            nodes.append(["call_function", n.name, _target_to_json(n.target), _arg_to_json(list(n.args)),
                          _arg_to_json(dict(n.kwargs))])
        elif n.op == "output":
            nodes.append(["output", _arg_to_json(n.args[0])])
        else:
            raise ValueError(f"{n.op} node {n.name}")
    return nodes


def graph_from_json(nodes: list) -> torch.fx.GraphModule:
    """The ``GraphModule`` of :func:`graph_to_json`'s data (raises ``ValueError``,
    ``KeyError`` or ``AttributeError`` for data it did not write)."""
    graph = torch.fx.Graph()
    env: dict = {}
    for entry in nodes:
        if entry[0] == "placeholder":
            env[entry[1]] = graph.placeholder(entry[1])
        elif entry[0] == "call_function":
            _, name, target, args, kwargs = entry
            env[name] = graph.create_node("call_function", _target_from_json(target),
                                          tuple(_arg_from_json(args, env)), _arg_from_json(kwargs, env), name=name)
        elif entry[0] == "output":
            graph.output(_arg_from_json(entry[1], env))
        else:
            raise ValueError(f"unknown node kind {entry[0]!r}")
    return torch.fx.GraphModule(torch.nn.Module(), graph)
