"""Run-time helpers of generated Triton launchers: block sizes and index width.

Launch parameters are chosen per call from the actual sizes (so one compiled graph
serves every value of a dynamic size): a pointwise kernel gets ``XBLOCK``; a reduction
kernel is *persistent* (one tile spans the whole reduced row) when the row fits in
``PERSISTENT_RNUMEL`` elements, otherwise *looped* over ``RBLOCK``-wide tiles.  Under the
interpreter (CPU tensors) blocks are larger, since each program costs Python overhead.
"""
from __future__ import annotations

import functools
import time

PERSISTENT_RNUMEL = 2048
_INT32_LIMIT = 2**31 - 1


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


@functools.lru_cache(maxsize=4096)
def pointwise_config(xnumel: int, interpret: bool) -> tuple[int, int]:
    """``(XBLOCK, num_warps)`` for a pointwise kernel over ``xnumel`` points."""
    if interpret:
        xblock = min(next_power_of_2(xnumel), 8192)
        return xblock, max(1, min(4, xblock // 128))
    # H100 (CUDA-graph replay, benchmarks in docs/codegen_triton.md): 2048-wide blocks
    # of 4 warps beat 1024 on a 3M-element add by 25%; equal on 16M-element GELU
    xblock = min(next_power_of_2(xnumel), 2048 if xnumel >= 1 << 20 else 1024)
    return xblock, max(1, min(4, xblock // 128))


@functools.lru_cache(maxsize=4096)
def reduction_config(xnumel: int, rnumel: int, interpret: bool, outer: bool = False) -> tuple[bool, int, int, int]:
    """``(persistent, XBLOCK, RBLOCK, num_warps)`` for a reduction of ``xnumel`` rows of ``rnumel``.

    ``outer``: memory is contiguous along the kept dims, not the reduced one (a sum over
    rows, as in bias gradients); tiles are then wide in ``x`` so that loads coalesce.
    """
    if interpret:  # large tiles: each program costs Python time
        if rnumel <= PERSISTENT_RNUMEL:
            rblock, persistent = next_power_of_2(max(rnumel, 1)), True
        else:
            rblock, persistent = 2048, False
        xblock = max(1, min(next_power_of_2(xnumel), 16384 // rblock, 64))
        elems = xblock * rblock
        return persistent, xblock, rblock, 2 if elems <= 256 else 4 if elems <= 2048 else 8
    # H100, kernel time under CUDA-graph replay (docs/codegen_triton.md, "Block sizes"):
    if outer:  # 32x32 tiles of 8 warps: 2x faster than 64x64 on column sums
        rblock = min(next_power_of_2(max(rnumel, 1)), 32)
        xblock = max(1, min(next_power_of_2(xnumel), 32))
        return rnumel <= rblock, xblock, rblock, 8 if xblock * rblock >= 1024 else 4
    if rnumel <= PERSISTENT_RNUMEL:
        # ~2048-element tiles (2 rows of 1024, 16 of 128), 8 warps; rows of 2048 in
        # pairs with 4 warps (logsumexp 4096x2048: 10.4 us vs 14.2 looped)
        rblock = next_power_of_2(max(rnumel, 1))
        xblock = max(1, min(next_power_of_2(xnumel), max(2048 // rblock, 2), 64))
        elems = xblock * rblock
        warps = 4 if elems >= 4096 else max(1, min(8, elems // 256))
        return True, xblock, rblock, warps
    # long rows: one row a program, 2048-wide tiles, 16 warps (softmax 8192x8192:
    # 197 us vs 381 us with 4 rows of 1024 and 8 warps; torch.compile 179 us)
    return False, 1, 2048, 16


def int_spec(n: int) -> int:
    """What Triton specializes a (specialized) int argument on: ``== 1`` (a constant),
    divisible by 16, and beyond int32 (passed as int64); one small int for launch keys."""
    return (n == 1) | ((n % 16 == 0) << 1) | ((n > _INT32_LIMIT) << 2)


def cuda_context() -> tuple[int, int]:
    """``(device index, raw stream)``: the current CUDA device and its current stream,
    read once per wrapper call and passed to every launcher of the graph."""
    import torch

    dev = torch._C._cuda_getDevice()
    return dev, torch._C._cuda_getCurrentRawStream(dev)


class Launcher:
    """Launches one ``@triton.jit`` function through a binding made once per specialization.

    The generated launcher computes a key with everything Triton specializes a compiled
    kernel on (constexprs, ``num_warps``, 16-byte alignment of each pointer, ``int_spec``
    of specialized ints, int64 sizes, the device) and calls ``bound[key](grid, stream,
    *args)``; the first call of a key compiles (or loads from Triton's cache) through
    ``JITFunction.run(warmup=True)`` and binds the compiled kernel's launcher, so later
    launches skip Triton's per-call argument binding, specialization and cache lookup.
    ``args`` are all of the jit function's parameters in order, constexprs included
    (as ``JITFunction.run`` passes them to the compiled kernel).
    """

    __slots__ = ("fn", "bound")

    def __init__(self, fn) -> None:
        self.fn = fn
        self.bound: dict = {}

    def bind(self, key, args: tuple, options: dict):
        t0 = time.perf_counter()
        kernel = self.fn.run(*args, grid=None, warmup=True, **options)
        kernel = kernel.result() if hasattr(kernel, "result") else kernel
        launch = _bound_launch(kernel)
        self.bound[key] = launch
        bind_stats["binds"] += 1
        bind_stats["seconds"] += time.perf_counter() - t0
        return launch


# Bindings made in this process and the seconds they took (a compile, or a load from
# the cache, then the C launcher and the binary's load): benchmarks/compile_profile.py
bind_stats = {"binds": 0, "seconds": 0.0}


def _bound_launch(kernel):
    """``launch(grid, stream, *args)`` for a compiled kernel (1-D grid)."""
    from triton import knobs

    if _hooks_active(knobs.runtime.launch_enter_hook) or _hooks_active(knobs.runtime.launch_exit_hook):
        def hooked(grid, stream, *args):  # a profiler's hooks get what JITFunction.run gives them
            meta = kernel.launch_metadata((grid, 1, 1), stream, *args)
            kernel.run(grid, 1, 1, stream, kernel.function, kernel.packed_metadata, meta,
                       knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *args)
        return hooked
    from . import static_launcher

    if static_launcher.enabled():
        launch = static_launcher.bind(kernel)  # one launcher for all kernels: no C build per signature
        if launch is not None:
            return launch
    run = kernel.run  # loads the binary into the current context
    function, packed = kernel.function, kernel.packed_metadata
    raw = getattr(run, "launch", None)
    if (raw is not None and _direct_launch() and getattr(run, "global_scratch_size", 1) == 0
            and getattr(run, "profile_scratch_size", 1) == 0):
        # Triton 3.5/3.6's CudaLauncher.__call__ without its per-call scratch allocation
        coop, pdl = run.launch_cooperative_grid, run.launch_pdl

        def direct(grid, stream, *args):
            raw(grid, 1, 1, stream, function, coop, pdl, None, None, packed, None, None, None, *args)
        return direct

    def launch(grid, stream, *args):
        run(grid, 1, 1, stream, function, packed, None, None, None, *args)
    return launch


def _hooks_active(hook) -> bool:
    """Whether a Triton launch hook is set: None (older Triton) or an empty ``HookChain``
    (Triton 3.5+, where the knob is never None) means no."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return calls is None or bool(calls)


@functools.cache
def _direct_launch() -> bool:
    import triton

    return triton.__version__.startswith(("3.5.", "3.6."))


def needs_int64(numel: int, *tensors) -> bool:
    """Whether index arithmetic may exceed int32: ``numel`` points or a large storage."""
    if numel > _INT32_LIMIT:
        return True
    for t in tensors:
        if t.untyped_storage().nbytes() // max(t.element_size(), 1) > _INT32_LIMIT:
            return True
    return False


class IndexOutOfBounds(Exception):
    """Raised by :func:`interpret_check_index` inside an interpreted kernel; the launcher
    turns it into the exception eager raises (:func:`raise_index_error`)."""

    def __init__(self, op: str, dim: int, index: int, size: int) -> None:
        super().__init__(op, dim, index, size)
        self.op, self.dim, self.index, self.size = op, dim, index, size


def interpret_check_index(raw, idx, size, mask, msg, op, dim):
    """``kiln_check_index`` under the interpreter (where ``tl.device_assert`` does
    nothing without debug options): raises :class:`IndexOutOfBounds` for the first
    wrapped index ``idx`` outside ``[0, size)`` where ``mask`` holds, else returns ``idx``."""
    import numpy as np

    def data(t):
        t = getattr(t, "value", t)  # constexpr
        return np.asarray(t.handle.data if hasattr(t, "handle") else t)

    i, w, m, n = data(raw), data(idx), data(mask), data(size)
    bad = ((w < 0) | (w >= n)) & (m != 0)
    if bad.any():
        first = np.broadcast_to(i, bad.shape)[bad].flat[0]
        raise IndexOutOfBounds(str(data(op)), int(data(dim)), int(first), int(n.max()))
    return idx


def raise_index_error(error: BaseException) -> None:
    """Re-raise a kernel launch's ``error``: as eager's IndexError/RuntimeError when an
    index check failed in it (the interpreter wraps it in ``InterpreterError``)."""
    from ..bounds import index_error

    e = error
    while e is not None and not isinstance(e, IndexOutOfBounds):
        e = e.__cause__
    if e is None:
        raise error
    raise index_error(e.op, e.dim, e.index, e.size) from None
