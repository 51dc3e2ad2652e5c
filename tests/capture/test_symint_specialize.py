"""A symbolic int (an int argument made dynamic by automatic dynamic, a tensor size under
``dynamic=True``) used where a Python value is needed (a dict or set key, ``str()``,
``repr()``, ``format()``, ``str.format``, an f-string) is specialized to its value with a
guard, as torch.compile does: no graph break, the result CPython gives, and a call with
another value recompiles instead of returning the stale value."""
import pytest
import torch

import torchkiln
from torchkiln.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset():
    torchkiln.reset()
    yield
    torchkiln.reset()


def _check(fn, calls, **kw):
    cnt = CompileCounter()
    cfn = torchkiln.compile(fn, backend=cnt, **kw)
    for args in calls:
        assert repr(cfn(*args)) == repr(fn(*args)), args
    return cnt


def as_python_values(x, n):
    d = {n: "k"}
    return x + len(d), f"n={n:03d}", str(n), repr(n), format(n, "x"), "{}|{}".format(n, "a"), d[n], n in {n}


def test_int_argument_made_dynamic():
    cnt = _check(as_python_values, [(torch.ones(2), n) for n in (3, 4, 5, 5)])
    assert cnt.frame_count == 3  # one per value: 3, then 4 (automatic dynamic, specialized), 5; no break


def size_as_python_values(x):
    s = x.shape[0]
    return x * 2, f"{s}", str(s), {s: 1}, {s: "a"}.get(s)


def test_tensor_size_under_dynamic_true():
    cnt = _check(size_as_python_values, [(torch.ones(n),) for n in (3, 4, 4, 5)], dynamic=True)
    assert cnt.frame_count == 3


def branch_on_size(x):
    if x.shape[0] == 3:
        return x + 1
    return x - 1


def test_size_specialized_by_a_branch_is_guarded():
    """The guard of a size specialized during the trace was dropped (the placeholder's size
    reads as an int after the specialization): n=4 reused the n=3 graph, x + 1."""
    _check(branch_on_size, [(torch.ones(n),) for n in (3, 4, 5)], dynamic=True)


def builtin_methods_on_a_symint(x, n):
    return x + (3).__add__(n), "ab".count("a", 0, n)


def test_constant_method_with_a_symint_argument_does_not_fail_capture():
    """A pure method of a constant looked up as a bound method, called with a symbolic
    argument, looped between the two call paths (RecursionError: the frame ran eagerly)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "capture of ... failed" would be a warning
        _check(builtin_methods_on_a_symint, [(torch.ones(1), n) for n in (1, 2, 3)])
