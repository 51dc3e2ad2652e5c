"""``torchkiln.explain(fn)(*args, **kwargs)``: what capture made of one call.

Mirrors ``torch._dynamo.explain``: it resets every cache, runs ``fn`` once under a
backend that records each graph, and reports the graphs, their count, the graph
breaks with their reasons and the user's ``file:line``, the ops of each graph and the
guards; then it resets again.
"""
from __future__ import annotations

import dataclasses
import linecache
import warnings
from typing import Any, Callable

import torch

from ..utils.break_hints import hint
from .eval_frame import CompileContext, reset


@dataclasses.dataclass
class ExplainOutput:
    """The report of :func:`explain` (``torch._dynamo.backends.debugging.ExplainOutput``).

    ``graph_break_count`` is ``graph_count - 1`` (at least 0), as torch counts it;
    ``break_reasons`` lists every break site once, each with ``.reason`` and
    ``.user_stack`` (``"file:line"``).  ``out_guards`` holds the guard code of every cache entry.
    ``str()`` also shows each break's user source lines and, for known break kinds, a
    one-line suggestion (:func:`torchkiln.utils.break_hints.hint`).
    """

    graphs: list[torch.fx.GraphModule]
    graph_count: int
    graph_break_count: int
    break_reasons: list[Any]
    op_count: int
    ops_per_graph: list[list[Any]]
    out_guards: list[str]

    def __str__(self) -> str:
        lines = [f"Graph Count: {self.graph_count}", f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {self.op_count}", "Break Reasons:"]
        for i, br in enumerate(self.break_reasons, 1):
            lines += [f"  Break Reason {i}:", f"    Reason: {br.reason}", "    User Stack:", f"      {br.user_stack}"]
            lines += _user_lines(br.user_stack)
            suggestion = hint(br.reason)[1]
            if suggestion:
                lines.append(f"    Suggestion: {suggestion}")
        lines.append("Ops per Graph:")
        for i, ops in enumerate(self.ops_per_graph, 1):
            lines.append(f"  Ops {i}:")
            lines += [f"    {getattr(op, '__name__', op)}" for op in ops]
        lines.append("Out Guards:")
        for i, guard in enumerate(self.out_guards, 1):
            lines += [f"  Guard {i}:", f"    {guard}"]
        return "\n".join(lines) + "\n"


_OPS = ("call_function", "call_method", "call_module")


def _user_lines(user_stack: str, before: int = 2) -> list[str]:
    """The user's source lines up to the break's line (``>`` marks it), read with linecache."""
    filename, _, line = user_stack.rpartition(":")
    if not line.isdigit():
        return []
    lineno = int(line)
    out = []
    for n in range(max(1, lineno - before), lineno + 1):
        text = linecache.getline(filename, n).rstrip()
        if text:
            out.append(f"      {'>' if n == lineno else ' '} {n:4d} | {text}")
    return out


def explain(fn: Callable, *extra_args, **extra_kwargs):
    """``explain(fn)(*args, **kwargs) -> ExplainOutput`` (``torch._dynamo.explain``).

    Calls ``fn`` once, compiled with a recording eager backend; ``fn``'s side effects
    happen as in a normal call.  Clears every in-memory cache before and after.
    ``explain(fn, *args)`` is accepted with a ``FutureWarning``, as in torch.
    """

    def inner(*args, **kwargs) -> ExplainOutput:
        reset()
        graphs: list[torch.fx.GraphModule] = []
        ops_per_graph: list[list[Any]] = []
        break_reasons: list[Any] = []
        out_guards: list[str] = []

        def recording_backend(gm, example_inputs):
            graphs.append(gm)
            ops_per_graph.append([node.target for node in gm.graph.nodes if node.op in _OPS])
            return gm.forward

        def on_entry(entry) -> None:
            # A break inside an inlined callee is met by the caller and again by the callee's
            # own frame: list each break site once.
            seen = {(br.reason, br.user_stack) for br in break_reasons}
            break_reasons.extend(br for br in entry.break_reasons if (br.reason, br.user_stack) not in seen)
            out_guards.extend(entry.guard.code_parts)

        context = CompileContext(recording_backend)
        context.on_entry = on_entry
        try:
            context(fn)(*args, **kwargs)
        finally:
            reset()
        return ExplainOutput(graphs=graphs, graph_count=len(graphs), graph_break_count=max(len(graphs) - 1, 0),
                             break_reasons=break_reasons, op_count=sum(map(len, ops_per_graph)),
                             ops_per_graph=ops_per_graph, out_guards=out_guards)

    if extra_args or extra_kwargs:
        warnings.warn("explain(f, *args, **kwargs) is deprecated, use explain(f)(*args, **kwargs) instead.",
                      FutureWarning, stacklevel=2)
        return inner(*extra_args, **extra_kwargs)
    return inner
