"""Process-wide event counters, as ``torch._dynamo.utils.counters``.

``counters`` is a ``defaultdict(Counter)``; stages bump e.g.
``counters["stats"]["unique_graphs"]``, ``counters["graph_break"][reason]``,
``counters["aot_autograd"]["autograd_cache_hit"]``,
``counters["inductor"]["fxgraph_cache_miss"]``.
"""
from __future__ import annotations

import collections

counters: collections.defaultdict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def reset_counters() -> None:
    """Clear every counter (``torchkiln.reset()`` calls this)."""
    counters.clear()
