"""Wall-clock timing and peak memory of a benchmark step.

Times are medians of ``repeat`` calls after ``warmup`` calls (CUDA is synchronised
around each call).  Peak memory is ``torch.cuda.max_memory_allocated`` on a GPU; on
CPU, where tracemalloc does not see torch's allocations, it is the process's resident
set size high-water mark (``resource.getrusage``), reset first through
``/proc/self/clear_refs`` where Linux allows it, so that it covers the measured steps
only.  RSS includes the weights, the Python runtime and memory the allocator keeps.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import resource
import statistics
import sys
import time
from typing import Callable

import torch


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable, device: str):
    """``(result, seconds)`` of one call of ``fn``."""
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - start


def median_seconds(fn: Callable, device: str, warmup: int, repeat: int) -> float:
    """Median wall time of ``repeat`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    _sync(device)
    return statistics.median(timed(fn, device)[1] for _ in range(max(1, repeat)))


def _reset_rss_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def release_free_memory() -> None:
    """Collect garbage and hand free heap pages back to the OS (glibc ``malloc_trim``),
    so that the next RSS peak counts live memory rather than what an earlier variant left."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _rss_peak_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


class PeakMemory:
    """``with PeakMemory(device) as m: ...`` then ``m.mb`` (MiB) and ``m.kind``.

    ``kind`` is ``"cuda"`` (allocated tensor memory), ``"rss"`` (resident set size
    peak within the block) or ``"rss-since-start"`` when the peak could not be reset.
    """

    def __init__(self, device: str) -> None:
        self.device = str(device)
        self.mb = float("nan")
        self.kind = ""

    def __enter__(self):
        release_free_memory()
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.kind = "cuda"
        else:
            self.kind = "rss" if _reset_rss_peak() else "rss-since-start"
        return self

    def __exit__(self, *exc):
        if self.kind == "cuda":
            torch.cuda.synchronize()
            self.mb = torch.cuda.max_memory_allocated() / 2**20
        else:
            self.mb = _rss_peak_mb()
        return False


@contextlib.contextmanager
def threads(n: int):
    """Run with ``torch.set_num_threads(n)``; restores the previous setting."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
