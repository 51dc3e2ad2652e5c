"""The cyclic garbage collector paused around building and dropping a large acyclic
structure (a parse tree of a warm-start record's hundreds of guard expressions).

Every container object created counts towards CPython's next collection, and one
alive during a collection is promoted and counts towards the next *full* one; once
``torch`` (or transformers) is imported a full collection scans millions of objects
(0.2-0.3 s here).  A tree freed by reference counting before the block ends leaves
the counts as they were, so pausing the collector for the block saves the
collections it would have caused and nothing is left for later (Mercurial's
``util.nogc`` does the same for its parsers).  Only for blocks that create no
reference cycles.
"""
from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def nogc():
    """Within the block, no cyclic garbage collection runs (restored on exit,
    also on an exception; a no-op where the collector is already off)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
