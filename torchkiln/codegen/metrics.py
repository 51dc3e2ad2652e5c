"""Code generator metrics (as ``torch._inductor.metrics``): reset with :func:`reset`.

``generated_kernel_count``: fused kernels generated; ``fallback_ops``: Counter of ATen
ops that ran as extern fallbacks for lack of a lowering; ``extern_kernel_count``:
extern calls (mm, conv, fallbacks) emitted; ``graphs_compiled`` and
``eager_fallbacks`` (graphs that failed to compile and ran eagerly).
"""
from __future__ import annotations

import collections

generated_kernel_count = 0
extern_kernel_count = 0
graphs_compiled = 0
eager_fallbacks = 0
fallback_ops: collections.Counter = collections.Counter()


def reset() -> None:
    global generated_kernel_count, extern_kernel_count, graphs_compiled, eager_fallbacks
    generated_kernel_count = 0
    extern_kernel_count = 0
    graphs_compiled = 0
    eager_fallbacks = 0
    fallback_ops.clear()
