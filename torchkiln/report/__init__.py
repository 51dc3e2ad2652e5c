"""``torchkiln report DIR``: a ``TORCHKILN_TRACE`` directory rendered as one HTML page.

``write_report(trace_dir, out_path)`` loads every trace file under ``trace_dir`` and
writes a self-contained page (no network: styles, script and highlighted code inline);
see :mod:`.html` for its layout.  Mirrors what ``tlparse`` does for ``TORCH_TRACE``.
"""
from __future__ import annotations

from .html import render
from .records import load


def write_report(trace_dir: str, out_path: str) -> str:
    """Render ``trace_dir``'s traces into ``out_path``; returns ``out_path``.

    Raises ``FileNotFoundError`` when ``trace_dir`` holds no trace file.
    """
    page = render(load(trace_dir))
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(page)
    return out_path


__all__ = ["load", "render", "write_report"]
