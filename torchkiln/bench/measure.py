"""Timing and peak memory of a benchmark step.

Times are wall-clock (CUDA is synchronised around each call), or the calling
thread's CPU time for CPU steps at one thread (:func:`cpu_clock`).  Peak memory is
``torch.cuda.max_memory_allocated`` on a GPU; on CPU, where tracemalloc does not see torch's allocations, it is the process's resident
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


def cpu_clock(device: str, threads: int) -> Callable[[], float] | None:
    """The clock of CPU steady-state steps, None on a GPU (wall time, median).

    At one thread every ATen and generated kernel runs on the calling thread, so its
    CPU time (``time.thread_time``) is the step's cost without the time other processes
    of a shared machine took from it; with more threads, wall time (worker threads'
    work is not on the caller's clock).  The suite takes the minimum of the steps."""
    if str(device).startswith("cuda"):
        return None
    return time.thread_time if threads == 1 else time.perf_counter


def timed(fn: Callable, device: str, clock: Callable[[], float] | None = None):
    """``(result, seconds)`` of one call of ``fn`` on ``clock`` (wall time by default)."""
    clock = clock or time.perf_counter
    _sync(device)
    start = clock()
    out = fn()
    _sync(device)
    return out, clock() - start


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
