"""Indirect indices are checked in the generated kernels (issue 11, must-have 1).

An index read from a tensor (``x[i]``, gather, index_select, embedding, scatter,
index_put, take...) outside ``[-size, size)`` raises the exception eager raises
(IndexError or RuntimeError) with the index, the size and the ATen op; negative
indices wrap; a huge index does not crash the process.  Each case runs on the C++
path and on the Triton path (Triton's interpreter on CPU, where ``tl.device_assert``
is replaced by a raise).  Checks are elided where the range is provable (arange,
clamp, where-mask, remainder) and off under ``assert_indirect_indexing=False``.
"""
from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln.codegen import compile_fx_inner, config
from torchkiln.codegen.decompositions import decompositions


def _interpreter():
    try:
        from torchkiln.codegen.triton.generator import interpreter_active
        return interpreter_active()
    except ImportError:
        return False


BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.skipif(not _interpreter(), reason="needs TRITON_INTERPRET=1"))]


@pytest.fixture(params=BACKENDS)
def backend(request):
    with config.patch(cpu_backend=request.param):
        yield request.param


def _eager_error(fn, *args):
    try:
        fn(*args)
    except (IndexError, RuntimeError) as e:
        return type(e)
    raise AssertionError("eager did not raise")


def _raises_as_eager(fn, *args, backward=False):
    expected = _eager_error(fn, *args)
    compiled = torchkiln.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to eager would make the test vacuous
        with pytest.raises(expected) as info:
            out = compiled(*args)
            if backward:
                out.sum().backward()
    assert type(info.value) is expected  # not a subclass
    return str(info.value)


x10 = torch.randn(10)

# the four lines, plus scatter, index_put, take and more
BAD = {
    "index": (lambda x, i: x[i] * 2, (x10, torch.tensor([1, 12]))),
    "gather": (lambda x, i: torch.gather(x, 0, i) + 1, (x10, torch.tensor([3, 11]))),
    "index_select": (lambda x, i: x.index_select(0, i).sum(), (x10, torch.tensor([0, 10]))),
    "embedding": (lambda w, i: F.embedding(i, w) * 3, (torch.randn(5, 4), torch.tensor([1, 7]))),
    "scatter": (lambda x, i: x.scatter(0, i, torch.ones(2)) * 2, (x10, torch.tensor([1, 10]))),
    "scatter_add": (lambda x, i: x.scatter_add(0, i, torch.ones(2)) * 2, (x10, torch.tensor([1, 10]))),
    "index_put": (lambda x, i: x.index_put((i,), torch.ones(2)) * 2, (x10, torch.tensor([1, 10]))),
    "index_put_acc": (lambda x, i: x.index_put((i,), torch.ones(2), accumulate=True) * 2, (x10, torch.tensor([1, 10]))),
    "take": (lambda x, i: x.take(i) * 2, (x10, torch.tensor([1, 10]))),
    "index_copy": (lambda x, i: x.index_copy(0, i, torch.ones(2)) * 2, (x10, torch.tensor([1, 10]))),
    "negative_too_small": (lambda x, i: x[i] * 2, (x10, torch.tensor([-11]))),
    "huge": (lambda x, i: x[i] * 2, (x10, torch.tensor([2**40]))),
    # gather, scatter, index_select, embedding, index_copy do not wrap negatives: they raise
    "gather_negative": (lambda x, i: torch.gather(x, 0, i) + 1, (x10, torch.tensor([3, -1]))),
    "scatter_negative": (lambda x, i: x.scatter(0, i, torch.ones(2)) * 2, (x10, torch.tensor([1, -1]))),
    "index_select_negative": (lambda x, i: x.index_select(0, i).sum(), (x10, torch.tensor([0, -1]))),
    "embedding_negative": (lambda w, i: F.embedding(i, w) * 3, (torch.randn(5, 4), torch.tensor([1, -1]))),
    "index_copy_negative": (lambda x, i: x.index_copy(0, i, torch.ones(2)) * 2, (x10, torch.tensor([1, -1]))),
    "index_2d_second_dim": (lambda x, i, j: x[i, j] + 1, (torch.randn(3, 4), torch.tensor([0, 2]), torch.tensor([1, 4]))),
}


@pytest.mark.parametrize("name", list(BAD))
def test_out_of_range_raises_as_eager(backend, name):
    fn, args = BAD[name]
    msg = _raises_as_eager(fn, *args)
    if name.startswith("index_copy"):  # runs as the ATen kernel (index_put would wrap negatives)
        return
    assert "torchkiln" in msg and "aten." in msg  # names the op
    size = 4 if name == "index_2d_second_dim" else 5 if name.startswith("embedding") else 10
    low = 0 if name.endswith("_negative") else -size
    bad = next(v for v in args[-1].tolist() if not low <= v < size)
    assert f"{bad} " in msg and f"{size}" in msg


def test_process_is_fine_after_an_error(backend):
    fn = torchkiln.compile(lambda x, i: torch.gather(x, 0, i) * 2)
    with pytest.raises(RuntimeError):
        fn(x10, torch.tensor([2**40, 1]))
    ok = torch.tensor([3, 9])
    assert torch.equal(fn(x10, ok), torch.gather(x10, 0, ok) * 2)


def test_negative_indices_wrap(backend):
    cases = [(lambda x, i: x[i] * 2, (x10, torch.tensor([-1, -10, 3]))),
             (lambda x, i: x.take(i) * 2, (x10, torch.tensor([[-1, 0], [-10, 5]]))),
             (lambda x, i: x.index_put((i,), torch.ones(2)), (x10, torch.tensor([-1, 3]))),
             (lambda x, i: x.index_put((i,), torch.ones(2), accumulate=True), (x10, torch.tensor([-1, 9])))]
    for fn, args in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.testing.assert_close(torchkiln.compile(fn)(*args), fn(*args))


def test_backward_with_the_same_indices(backend):
    """embedding's and gather's backward scatter-add the gradient with the same
    (wrapped, checked) indices; a bad index raises in the forward, as eager."""
    i = torch.tensor([[1, 4], [0, 4]])

    def fn(w, i):
        return (F.embedding(i, w) * 3).sum() + torch.gather(w, 0, i[:, :1].expand(2, 4)).sum() + w[i - 5].sum()

    w = torch.randn(5, 4, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torchkiln.compile(fn)(w, i).backward()
    g = w.grad.clone()
    w.grad = None
    fn(w, i).backward()
    torch.testing.assert_close(g, w.grad)
    _raises_as_eager(lambda w, i: F.embedding(i, w) * 3, torch.randn(5, 4, requires_grad=True),
                     torch.tensor([1, 5]), backward=True)


def _kernel_source(fn, *args, **patch):
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    with config.patch(debug=True, **patch):
        compiled = compile_fx_inner(gm, list(args))
        compiled(*args)
    src = compiled.kernel_source
    return src[re.search(r'extern "C" \w+ kernel|@triton.jit\ndef kernel', src).start():]  # the kernels


PROVABLE = {
    "arange": (lambda x: (x[torch.arange(10)] * 2,), (torch.randn(10, 16),)),
    "clamp": (lambda x, i: (x[i.clamp(0, 9)] * 2,), (torch.randn(10, 16), torch.tensor([1, 12]))),
    "where_mask": (lambda x, i: (x[torch.where((i >= 0) & (i < 10), i, 0)] * 2,),
                   (torch.randn(10, 16), torch.tensor([1, 12]))),
    "remainder": (lambda x, i: (x[i % 10] * 2,), (torch.randn(10, 16), torch.tensor([1, 12]))),
}


@pytest.mark.parametrize("name", list(PROVABLE))
def test_provable_ranges_are_not_checked(name):
    fn, args = PROVABLE[name]
    src = _kernel_source(fn, *args)
    assert "kiln_check_index" not in src and " < 0 ? " not in src
    torch.testing.assert_close(fn(*args)[0], compile_fx_inner(make_fx(fn, decomposition_table=decompositions())(*args), list(args))(*args)[0])


def test_checks_are_hoisted_out_of_the_inner_loop():
    """embedding: one check per row (token), before the vectorized loop over columns."""
    src = _kernel_source(lambda w, i: (F.embedding(i, w) * 3,), torch.randn(50, 64), torch.randint(0, 50, (8,)))
    lines = src.splitlines()
    check = next(n for n, line in enumerate(lines) if "kiln_check_index(" in line)
    simd = next(n for n, line in enumerate(lines) if "#pragma omp simd" in line and n > check - 10)
    assert check < simd


def test_config_switch_turns_checks_off():
    fn, args = (lambda w, i: (F.embedding(i, w) * 3,)), (torch.randn(50, 64), torch.randint(0, 50, (8,)))
    assert "kiln_check_index(" in _kernel_source(fn, *args)
    assert "kiln_check_index(" not in _kernel_source(fn, *args, assert_indirect_indexing=False)


@pytest.mark.skipif(not _interpreter(), reason="needs TRITON_INTERPRET=1")
def test_triton_kernel_asserts():
    src = _kernel_source(lambda x, i: (torch.gather(x, 0, i) + 1,), x10, torch.tensor([3, 1]), cpu_backend="triton")
    assert "kiln_check_index(" in src and "debug=True" in src


_CUDA_CHILD = """
import torch, torchkiln
x, i = torch.randn(10, device="cuda"), torch.tensor([3, 1], device="cuda")
f = torchkiln.compile(lambda x, i: torch.gather(x, 0, i) + 1)
assert torch.equal(f(x, i), torch.gather(x, 0, i) + 1)
print("VALID OK", flush=True)
try:
    f(x, torch.tensor([3, 11], device="cuda"))
    torch.cuda.synchronize()
except RuntimeError as e:
    print("RAISED", str(e)[:300], flush=True)
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (real Triton, tl.device_assert)")
def test_cuda_device_assert_fires():
    """On a GPU an out-of-range index trips tl.device_assert (the CUDA context is lost
    afterwards, as under torch.compile, so this runs in a child process)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    child = subprocess.run([sys.executable, "-c", _CUDA_CHILD], env=env, capture_output=True, text=True, timeout=600)
    out = child.stdout + child.stderr
    assert "VALID OK" in out, out[-3000:]
    assert "RAISED" in out or "device-side assert" in out or "index out of bounds" in out, out[-3000:]
