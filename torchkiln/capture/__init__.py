"""Graph capture from Python bytecode (the TorchDynamo part of the system).

Placeholder until the capture stage lands: ``compile`` returns the callable unchanged.
"""
from __future__ import annotations


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None, disable=False):
    if model is None:
        return lambda m: compile(m, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode, options=options, disable=disable)
    return model


def optimize(backend="inductor", *, nopython=False, guard_fail_fn=None, dynamic=None):
    return lambda fn: fn


def reset():
    pass


def disable(fn=None, recursive=True):
    return fn if fn is not None else (lambda f: f)


def graph_break():
    pass


def allow_in_graph(fn):
    return fn


def explain(fn, *args, **kwargs):
    raise NotImplementedError


def mark_dynamic(t, index, *, min=None, max=None):
    pass


def mark_static(t, index=None):
    pass


class OptimizedModule:
    pass
