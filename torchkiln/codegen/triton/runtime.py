"""Run-time helpers of generated Triton launchers: block sizes and index width.

Launch parameters are chosen per call from the actual sizes (so one compiled graph
serves every value of a dynamic size): a pointwise kernel gets ``XBLOCK``; a reduction
kernel is *persistent* (one tile spans the whole reduced row) when the row fits in
``PERSISTENT_RNUMEL`` elements, otherwise *looped* over ``RBLOCK``-wide tiles.  Under the
interpreter (CPU tensors) blocks are larger, since each program costs Python overhead.
"""
from __future__ import annotations

PERSISTENT_RNUMEL = 1024
_INT32_LIMIT = 2**31 - 1


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def pointwise_config(xnumel: int, interpret: bool) -> tuple[int, int]:
    """``(XBLOCK, num_warps)`` for a pointwise kernel over ``xnumel`` points."""
    cap = 8192 if interpret else 1024
    xblock = min(next_power_of_2(xnumel), cap)
    return xblock, max(1, min(4, xblock // 128))


def reduction_config(xnumel: int, rnumel: int, interpret: bool, outer: bool = False) -> tuple[bool, int, int, int]:
    """``(persistent, XBLOCK, RBLOCK, num_warps)`` for a reduction of ``xnumel`` rows of ``rnumel``.

    ``outer``: memory is contiguous along the kept dims, not the reduced one (a sum over
    rows, as in bias gradients); tiles are then wide in ``x`` so that loads coalesce.
    """
    tile = 16384 if interpret else 4096
    if outer and not interpret:
        rblock = min(next_power_of_2(max(rnumel, 1)), 64)
        xblock = max(1, min(next_power_of_2(xnumel), tile // rblock, 64))
        return rnumel <= rblock, xblock, rblock, 4 if xblock * rblock <= 2048 else 8
    if rnumel <= PERSISTENT_RNUMEL:
        rblock = next_power_of_2(max(rnumel, 1))
        persistent = True
    else:
        rblock = 1024 if not interpret else 2048
        persistent = False
    xblock = max(1, min(next_power_of_2(xnumel), tile // rblock, 64))
    elems = xblock * rblock
    warps = 2 if elems <= 256 else 4 if elems <= 2048 else 8
    return persistent, xblock, rblock, warps


def needs_int64(numel: int, *tensors) -> bool:
    """Whether index arithmetic may exceed int32: ``numel`` points or a large storage."""
    if numel > _INT32_LIMIT:
        return True
    for t in tensors:
        if t.untyped_storage().nbytes() // max(t.element_size(), 1) > _INT32_LIMIT:
            return True
    return False
