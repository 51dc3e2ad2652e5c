"""A one-line progress display for long compiles: frame, stage, kernels compiled n/N.

Shown on stderr (with ``rich``) only when stderr is a terminal and
``TORCHKILN_PROGRESS`` is not ``0``, and only once a frame's compile has run for
``DELAY_S`` seconds, so short compiles print nothing.  Fed by :mod:`.trace`'s
``frame``/``stage`` context managers and by codegen's :func:`add_kernels`; every
function here returns at once when the display is off.
"""
from __future__ import annotations

import os
import sys
import time

DELAY_S = 1.0

enabled = os.environ.get("TORCHKILN_PROGRESS", "1") != "0" and sys.stderr.isatty()

_frame: str | None = None
_stage = ""
_started = 0.0
_kernels: list = []  # (count, done()) per graph whose kernels are building
_live = None


class _Line:
    def __rich__(self):
        from rich.text import Text

        total = sum(n for n, _ in _kernels)
        done = sum(n for n, is_done in _kernels if is_done())
        elapsed = time.perf_counter() - _started
        return Text(f"torchkiln compiling {_frame} | {_stage} | kernels compiled {done}/{total} | {elapsed:.1f} s",
                    style="dim")


def start_frame(name: str) -> None:
    """A top-level frame compile begins."""
    global _frame, _started, _stage
    if not enabled:
        return
    _frame, _stage, _started = name, "capture", time.perf_counter()
    _kernels.clear()


def set_stage(name: str) -> None:
    """The frame's compile entered stage ``name``."""
    global _stage
    if _frame is None:
        return
    _stage = name
    _maybe_show()


def add_kernels(count: int, done) -> None:
    """``count`` kernels started building; ``done()`` says whether their build finished."""
    if _frame is None or not count:
        return
    _kernels.append((count, done))
    _maybe_show()


def current_stage() -> str:
    """The stage shown now (restored by :mod:`.trace` when a nested stage ends)."""
    return _stage


def end_frame() -> None:
    """The top-level frame compile ended: remove the display."""
    global _frame, _live
    if _live is not None:
        _live.stop()
        _live = None
    _frame = None
    _kernels.clear()


def _maybe_show() -> None:
    global _live
    if _live is None and time.perf_counter() - _started >= DELAY_S:
        from rich.console import Console
        from rich.live import Live

        _live = Live(_Line(), console=Console(stderr=True), refresh_per_second=4, transient=True)
        _live.start()
