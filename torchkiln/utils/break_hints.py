"""One-line suggestions for known graph-break kinds (used by ``explain`` and the report).

``hint(reason) -> (kind, suggestion)``, matched on the break reason text that capture
writes; an unknown reason gives ``("other", "")``.
"""
from __future__ import annotations

import re

# (kind, pattern on the reason, suggestion); first match wins.
_HINTS = (
    ("data-dependent branch", r"data-dependent control flow|Tensor\.__bool__",
     "data-dependent branch: set capture_scalar_outputs or use torch.where (or torch.cond) instead of `if tensor:`"),
    ("scalar read", r"Tensor\.(item|tolist)\(\)|reads a tensor's value",
     "reading a tensor's value in Python: set torchkiln.config.capture_scalar_outputs = True, or keep it a tensor"),
    ("explicit break", r"graph_break\(\) called",
     "an explicit torchkiln.graph_break(): remove it if the split is not wanted"),
    ("print", r"print\(\)",
     "print() in the compiled region: remove it, or print outside the compiled function"),
    ("context manager", r"with-block on",
     "only grad-mode and autocast with-blocks are traced: move this with-block out of the compiled function"),
    ("generator", r"generator|coroutine|yield",
     "generators are not traced: return a list, or compile the generator's caller's tensor code instead"),
    ("dynamic size", r"symbolic size is not a constant|dynamic or missing dim",
     "a size became symbolic: mark it static (torchkiln.mark_static) or compile with dynamic=False"),
    ("skipped function", r"call to skipped function",
     "a function capture does not trace into (stdlib or C code): move the call out of the compiled region, "
     "or torchkiln.allow_in_graph(fn) if it only computes on tensors"),
    ("unsupported call", r"calling .* object|constructing |inside a compiled frame|raised \w+:",
     "a call capture does not trace: torchkiln.allow_in_graph(fn) if it is tensor-only, else move it out"),
    ("unsupported bytecode", r"unsupported bytecode",
     "a bytecode capture does not handle yet: please report it with the function that contains it"),
)
_COMPILED = tuple((kind, re.compile(pattern), text) for kind, pattern, text in _HINTS)


def hint(reason: str) -> tuple[str, str]:
    """``(kind, one-line suggestion)`` for a graph-break reason; ``("other", "")`` if unknown."""
    for kind, pattern, text in _COMPILED:
        if pattern.search(reason):
            return kind, text
    return "other", ""
