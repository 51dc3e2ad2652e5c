"""Codegen's ``TORCHKILN_TRACE`` records for one compiled graph (see docs/interfaces.md).

``ir`` (a summary of the lowered buffers), one ``kernel`` per generated kernel
(source, kind, fused nodes), ``extern_calls`` and ``wrapper``.  Called only while the
trace is on.
"""
from __future__ import annotations

import itertools
import re

from ..utils import trace
from .ir import Reduce, Store
from .nodes import ComputedBuffer, ExternKernel, InputBuffer

_graph_ids = itertools.count()


def trace_graph(graph, entries: list, kernels: list, generator, wrapper_source: str) -> None:
    """Emit the records of one graph; ``entries`` is the finalized schedule."""
    with trace.stage("trace"):  # the trace's own cost, shown apart in the report
        _emit(graph, entries, kernels, generator, wrapper_source)


def _emit(graph, entries, kernels, generator, wrapper_source) -> None:
    gid = next(_graph_ids)
    buffers = list(graph.buffers.values())
    externs = [e for e in entries if isinstance(e, ExternKernel)]
    trace.emit("ir", {"graph_id": gid, "buffers": len(buffers),
                      "computed": sum(isinstance(b, ComputedBuffer) for b in buffers),
                      "inputs": sum(isinstance(b, InputBuffer) for b in buffers),
                      "kernels": len(kernels), "extern_kernels": len(externs),
                      "lines": [_describe(b) for b in buffers]})
    source = generator.source()
    sources = _split_kernels(source, [k.name for k in kernels])
    language = "cpp" if "extern \"C\"" in source else "python"
    for k in kernels:
        stores = [s.buffer for loop in k.loops for s in loop.body if isinstance(s, Store)]
        reductions = [s.reduction_type for loop in k.loops for s in loop.body if isinstance(s, Reduce)]
        trace.emit("kernel", {"graph_id": gid, "name": k.name, "kind": "reduction" if reductions else "pointwise",
                              "fused": list(dict.fromkeys(stores)), "reductions": reductions,
                              "language": language, "source": sources.get(k.name, ""), "ir": str(k)})
    trace.emit("extern_calls", {"graph_id": gid, "calls": [
        {"name": e.name, "op": str(e.op), "fallback": bool(e.fallback)} for e in externs]})
    trace.emit("wrapper", {"graph_id": gid, "source": wrapper_source})


def _describe(buf) -> str:
    layout = getattr(buf, "layout", None)
    size = f" {list(layout.size)} {layout.dtype}" if layout is not None and hasattr(layout, "size") else ""
    op = f" = {buf.op}" if isinstance(buf, ExternKernel) else ""
    return f"{buf.name}: {type(buf).__name__}{size}{op}"


def _split_kernels(source: str, names: list[str]) -> dict[str, str]:
    """Each kernel's own text in a generator's source: from the first line (or
    decorator) that defines it, or a function named ``<name>_<suffix>``, to the next
    kernel's first definition."""
    if not names:
        return {}
    lines = source.splitlines()
    starts = {}
    for name in names:
        pattern = re.compile(rf"^\S.*\b{re.escape(name)}(_\w+)?\s*\(")  # Triton: name_persistent, name_launch...
        for i, line in enumerate(lines):
            if pattern.match(line):
                while i > 0 and lines[i - 1].startswith("@"):
                    i -= 1
                starts[name] = i
                break
    order = sorted(starts.items(), key=lambda kv: kv[1])
    out = {}
    for (name, start), nxt in zip(order, order[1:] + [(None, len(lines))]):
        out[name] = "\n".join(lines[start:nxt[1]]).rstrip() + "\n"
    return out
