"""Capture cost on long functions: how much work a break, a loop or a long constant
container costs (resume functions reused, not nested; one guard for many constants)."""
import math

import torch

import torchkiln
from torchkiln.capture import resume
from torchkiln.capture.guards import GuardBuilder, _items_match
from torchkiln.testing import CompileCounter, same
from torchkiln.utils.counters import counters

from capture_helpers import randn


def _resume_names():
    return {code.co_name for code in resume._cache.values()}


def test_break_in_a_loop_resumes_from_the_original_code():
    """Each iteration's break resumes in one resume function of ``f`` (as TorchDynamo's
    ContinueExecutionCache), not in a resume function of the previous resume function."""
    def f(x, items):
        out = []
        for v in items:
            x = x + v
            torchkiln.graph_break()
            out.append(x * 2)
        return x, out

    torchkiln.reset()
    before = set(resume._cache)
    opt = torchkiln.compile(f, backend="eager")
    x = randn(3)
    items = [torch.full((3,), float(i)) for i in range(6)]
    assert same(f(x, items), opt(x, items))
    made = [resume._cache[k] for k in set(resume._cache) - before]
    assert made and all("torchkiln_resume_in_torchkiln" not in c.co_name for c in made), [c.co_name for c in made]
    assert len({c for c in made if not c.co_name.startswith("torchkiln_handle")}) == 1
    assert same(f(x, items), opt(x, items))  # cached entries


def test_break_in_a_loop_inside_a_resume_function_still_right():
    """Two breaks per iteration, a while loop and a nested call: every resume position
    maps back to the original code and the frame computes what CPython computes."""
    def g(t):
        torchkiln.graph_break()
        return t - 1

    def f(x, n):
        i = 0
        acc = []
        while i < n:
            x = g(x) * 2
            torchkiln.graph_break()
            if i % 2:
                acc.append(i)
            torchkiln.graph_break()
            i += 1
        return x, acc

    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(f, backend=cnt)
    x = randn(4)
    for n in (3, 5, 5):
        assert same(f(x, n), opt(x, n))
    names = _resume_names()
    assert not any(n.startswith("torchkiln_resume_in_torchkiln") for n in names), names


def _guard_sizes(monkeypatch):
    """Number of parts of every guard built from now on."""
    sizes = []
    build = GuardBuilder.build

    def counting(self):
        sizes.append(len(self.parts))
        return build(self)
    monkeypatch.setattr(GuardBuilder, "build", counting)
    return sizes


def test_long_constant_iterator_is_one_guard(monkeypatch):
    """A for loop over a long range handed to a resume function: one check for all the
    items it has left, not a TYPE and an EQUALS check per item."""
    def f(x):
        for i in range(200):
            x = x + i
            torchkiln.graph_break()
            if i == 2:
                break
        return x

    torchkiln.reset()
    sizes = _guard_sizes(monkeypatch)
    opt = torchkiln.compile(f, backend="eager")
    x = randn(3)
    assert same(f(x), opt(x))
    assert len(sizes) >= 3 and max(sizes) < 40, sizes


def test_long_constant_list_guard_recompiles_on_any_change(monkeypatch):
    state = {"vals": list(range(20))}

    def f(x):
        return x + sum(state["vals"])

    torchkiln.reset()
    sizes = _guard_sizes(monkeypatch)
    cnt = CompileCounter()
    opt = torchkiln.compile(f, backend=cnt)
    x = randn(3)
    assert same(f(x), opt(x))
    for change in (lambda v: v.__setitem__(7, 100), lambda v: v.__setitem__(3, 3.0), lambda v: v.append(1),
                   lambda v: v.__setitem__(0, True)):
        change(state["vals"])
        assert same(f(x), opt(x)), state["vals"]
    assert max(sizes) < 20, sizes  # one check for the 20 items


def test_items_match_types_values_and_nan():
    assert _items_match([9, 1, 2.5, "a"], 1, (1, 2.5, "a"))
    assert not _items_match([9, 1, 2.5, "a"], 0, (1, 2.5, "a"))
    assert not _items_match([1.0], 0, (1,))
    assert not _items_match([True], 0, (1,))
    assert _items_match([math.nan, None], 0, (math.nan, None))
    assert not _items_match([math.nan], 0, (1.0,))


def test_break_counter_bounded_in_a_long_loop():
    """A break inside a 100-iteration loop captures a bounded number of frames."""
    def f(x):
        for i in range(100):
            x = x + 1
            torchkiln.graph_break()
        return x

    torchkiln.reset()
    counters.clear()
    opt = torchkiln.compile(f, backend="eager")
    x = randn(2)
    assert same(f(x), opt(x))
    assert sum(counters["graph_break"].values()) <= 12
