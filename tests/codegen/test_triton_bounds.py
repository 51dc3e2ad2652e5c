"""Generated Triton kernels never touch memory outside their operands' storages.

A real GPU faults on an out-of-bounds access (CUDA "illegal memory access", which also
poisons the process's CUDA context); Triton's interpreter just reads host memory, so the
op suite passes there regardless.  This file runs op cases through the interpreter with a
bounds checker: every kernel launch records the storages of its tensor arguments, and every
load, store and atomic whose mask is on must address an element inside one of them.

Regression: ``cat`` loaded its last part at ``index - start`` without a mask, so the rows
before that part read before the tensor (``prod``'s backward: cat of ones and a slice; an
illegal memory access on an H100).
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
from torchkiln.codegen.triton.generator import interpreter_active  # noqa: E402

pytestmark = pytest.mark.skipif(not interpreter_active(), reason="needs TRITON_INTERPRET=1 (no GPU)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ops  # noqa: E402


class OutOfBounds(AssertionError):
    pass


@pytest.fixture
def bounds_checked(monkeypatch):
    """Patches the interpreter so that an access outside the launch's storages raises."""
    from triton.runtime import interpreter as interp

    ranges: list[tuple[int, int]] = []
    init_args = interp.GridExecutor._init_args_hst

    def record_args(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        ranges.clear()
        for a in list(args_hst) + list(kwargs_hst.values()):
            if isinstance(a, torch.Tensor):
                s = a.untyped_storage()
                ranges.append((s.data_ptr(), s.data_ptr() + s.nbytes()))
        return args_hst, kwargs_hst

    def check(ptrs, mask, what):
        addrs = np.asarray(ptrs.data).astype(np.uint64)
        on = np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape)
        addrs = addrs[on]
        if addrs.size == 0:
            return
        size = np.uint64(ptrs.get_element_ty().primitive_bitwidth // 8 or 1)
        inside = np.zeros(addrs.shape, dtype=bool)
        for lo, hi in ranges:
            inside |= (addrs >= np.uint64(lo)) & (addrs + size <= np.uint64(hi))
        if not inside.all():
            bad = addrs[~inside][:4]
            near = [(int(b) - lo) // int(size) for b in bad for lo, _ in ranges[:1]]
            raise OutOfBounds(f"{what} outside the kernel's operands: {bad.size} addresses, e.g. element offsets "
                              f"{near} from the first operand's storage")

    def masked_load(self, ptrs, mask, other, *args):
        check(ptrs, mask, "load")
        return orig_load(self, ptrs, mask, other, *args)

    def masked_store(self, ptrs, value, mask, *args):
        check(ptrs, mask, "store")
        return orig_store(self, ptrs, value, mask, *args)

    def atomic_rmw(self, op, ptr, val, mask, *args):
        check(ptr, mask, "atomic")
        return orig_rmw(self, op, ptr, val, mask, *args)

    orig_load = interp.InterpreterBuilder.create_masked_load
    orig_store = interp.InterpreterBuilder.create_masked_store
    orig_rmw = interp.InterpreterBuilder.create_atomic_rmw
    monkeypatch.setattr(interp.GridExecutor, "_init_args_hst", record_args)
    monkeypatch.setattr(interp.InterpreterBuilder, "create_masked_load", masked_load)
    monkeypatch.setattr(interp.InterpreterBuilder, "create_masked_store", masked_store)
    monkeypatch.setattr(interp.InterpreterBuilder, "create_atomic_rmw", atomic_rmw)
    yield


def test_checker_catches_an_out_of_bounds_load(bounds_checked):
    import triton.language as tl

    @triton.jit
    def shifted_copy(src, dst, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(dst + i, tl.load(src + i - 1, i < n), i < n)

    x = torch.arange(8, dtype=torch.float32)
    with pytest.raises(Exception, match="outside the kernel's operands"):  # the interpreter wraps it
        shifted_copy[(1,)](x, torch.empty_like(x), 8, BLOCK=8)


# Cases whose lowering shifts or gathers indices (cat, pad, slices, flips, indirect loads).
FORWARD = ["cat", "cat_dim1", "stack", "constant_pad", "negative_pad", "reflect_pad", "slice_step", "slice_neg",
           "narrow_diag", "gather", "index", "index_put_acc", "embedding", "zero_size"]
BACKWARD = ["prod", "cat", "stack", "constant_pad", "negative_pad", "slice_step", "gather"]


@pytest.mark.parametrize("name", FORWARD)
def test_forward_in_bounds(bounds_checked, name):
    test_ops.test_forward(name, torch.float32, "triton")


@pytest.mark.parametrize("name", BACKWARD)
def test_backward_in_bounds(bounds_checked, name):
    test_ops.test_backward(name, torch.float32, "triton")
