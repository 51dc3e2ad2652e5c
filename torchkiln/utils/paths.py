"""Where torchkiln keeps its persistent cache on disk."""
from __future__ import annotations

import os


def cache_dir(*parts: str) -> str:
    """The cache root, or a folder below it, created if missing.

    The root is ``$TORCHKILN_CACHE_DIR``, else ``$XDG_CACHE_HOME/torchkiln``, else
    ``~/.cache/torchkiln`` (read on every call, so tests may point it elsewhere).
    """
    root = os.environ.get("TORCHKILN_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "torchkiln")
    path = os.path.join(root, *parts)
    os.makedirs(path, exist_ok=True)
    return path
