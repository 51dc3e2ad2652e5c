"""Enum attributes and iterators over mutable containers keep CPython's behaviour
under capture (issue 10): nothing read at trace time hides a later change.

Each case runs eagerly and compiled on fresh copies of its arguments and compares the
outcome (result, or the exception's type)."""
from __future__ import annotations

import copy
import enum

import pytest
import torch

import torchkiln


@pytest.fixture(autouse=True)
def _reset():
    torchkiln.reset()
    yield
    torchkiln.reset()


def _outcome(fn, args):
    try:
        return "ok", fn(*copy.deepcopy(args))
    except Exception as e:  # noqa: BLE001 - the exception's type is the outcome
        return "raised", type(e)


def same_as_eager(fn, *args):
    eager = _outcome(fn, args)
    got = _outcome(torchkiln.compile(fn, backend="eager"), args)
    assert repr(got) == repr(eager)
    return got


class _Counting:
    """A descriptor computing a new value on every read."""

    def __init__(self):
        self.reads = 0

    def __get__(self, obj, typ=None):
        self.reads += 1
        return self.reads


class Mode(enum.Enum):
    A = 1
    B = 2
    reads = _Counting()  # a descriptor in an enum body is no member

    def __init__(self, value):
        self.scale = value * 10  # an attribute stored on the member (Planet.mass style)


def test_enum_descriptor_attribute_runs_on_every_call():
    f = torchkiln.compile(lambda x, m: x + m.reads, backend="eager")
    before = Mode.__dict__["reads"].reads
    assert [f(torch.zeros(1), Mode.A).item() for _ in range(3)] == [before + 1, before + 2, before + 3]


def test_enum_member_attribute_is_guarded():
    f = torchkiln.compile(lambda x, m: x + m.scale, backend="eager")
    assert f(torch.zeros(1), Mode.A).item() == 10
    assert f(torch.zeros(1), Mode.B).item() == 20
    try:
        Mode.A.scale = 7
        assert f(torch.zeros(1), Mode.A).item() == 7
    finally:
        Mode.A.scale = 10


def _global_member(x):
    return x + Mode.B.scale


def test_enum_member_attribute_read_through_a_global_is_guarded():
    f = torchkiln.compile(_global_member, backend="eager")
    assert f(torch.zeros(1)).item() == 20
    try:
        Mode.B.scale = 3
        assert f(torch.zeros(1)).item() == 3
    finally:
        Mode.B.scale = 20


def _iter_then_add(x, d):
    it = iter(d)
    d["c"] = 3
    return list(it)


def _for_reversed_adding(x, d):
    out = x
    for k in reversed(d):
        out = out + d[k]
        d[k + "z"] = 0
    return out


def _reversed_view_pop(x, d):
    r = reversed(d.values())
    d.pop("a")
    return list(r)


def _items_sees_new_value(x, d):
    it = iter(d.items())
    d["b"] = 5
    return list(it), list(reversed(d.items()))


def _values_view_is_live(x, d):
    v = d.values()
    d["b"] = 7
    return list(v), bool(v)


def _del_add_same_size(x, d):
    it = iter(d)
    next(it)
    del d["a"]
    d["c"] = 3
    return list(it)


def _set_iter_then_add(x, s):
    it = iter(s)
    s.add(99)
    return list(it)


def _break_then_mutate(x, d):
    out = x
    for k in d:
        torchkiln.graph_break()
        d[k + "x"] = 1
        out = out + 1
    return out


def _reversed_dict_across_break(x, d):
    it = reversed(d)
    out = x + d[next(it)]
    torchkiln.graph_break()
    return out + d[next(it)], type(it).__name__


def _reversed_tuple(x, t):
    it = reversed(t)
    out = x + next(it)
    torchkiln.graph_break()
    return out + next(it), type(it).__name__, next(it, "end")


def _reversed_list_sees_writes(x, lst):
    it = reversed(lst)
    out = x + next(it)
    torchkiln.graph_break()
    lst[0] = 50
    return out + next(it), type(it).__name__


@pytest.mark.parametrize("fn, arg", [
    (_iter_then_add, {"a": 1}), (_for_reversed_adding, {"a": 1, "b": 2}), (_reversed_view_pop, {"a": 1, "b": 2}),
    (_items_sees_new_value, {"a": 1, "b": 2}), (_values_view_is_live, {"a": 1, "b": 2}),
    (_del_add_same_size, {"a": 1, "b": 2}), (_set_iter_then_add, {1, 2}), (_break_then_mutate, {"a": 1, "b": 2}),
    (_reversed_dict_across_break, {"a": 1, "b": 2}), (_reversed_tuple, (1, 2)), (_reversed_list_sees_writes, [1, 2]),
], ids=lambda v: getattr(v, "__name__", "")[1:] or None)
def test_iterator_over_mutable_container(fn, arg):
    same_as_eager(fn, torch.ones(2), arg)


def test_long_range_is_iterated_lazily_and_rebuilt_at_its_position():
    """A ten-million range is not materialized: a loop leaving it early is captured, and
    one alive at a graph break is rebuilt as the real range_iterator at its position."""
    def f(x, n):
        it = iter(range(n))
        for i in it:
            if i == 3:
                break
        x = x + i
        torchkiln.graph_break()
        return x + next(it), type(it).__name__

    assert same_as_eager(f, torch.ones(2), 10_000_000)[0] == "ok"


def test_trace_step_limit_breaks_instead_of_tracing_forever():
    from itertools import chain

    def f(x, n):
        it = chain.from_iterable(() for _ in range(n))
        return x + 1, next(it, "empty")

    with torchkiln.config.patch(trace_step_limit=20_000):
        assert same_as_eager(f, torch.ones(2), 100_000)[1][1] == "empty"


def test_alternate_constructors_of_builtin_types_run_at_trace_time():
    from torchkiln.utils.counters import counters

    def f(x):
        return x + float.fromhex("0x1.8p1") + int.from_bytes(b"\x01\x00", "little")

    counters.clear()
    assert torchkiln.compile(f, backend="eager")(torch.zeros(1)).item() == 4.0
    assert not counters["graph_break"]
    with pytest.raises(ValueError):  # an invalid literal raises as eagerly (through a break)
        torchkiln.compile(lambda x: x + float.fromhex("zz"), backend="eager")(torch.zeros(1))


def _del_and_re_add_the_same_key(x, d):
    for k in d:  # CPython: RuntimeError (dictionary keys changed during iteration)
        del d[0]
        d[0] = 0
    return x + 1


def _cached_property_on_slots(x, s):
    try:
        s.cp
    except TypeError:  # no __dict__ to cache into
        return x + 1
    return x - 1


class _Slots:
    __slots__ = ("a",)

    @__import__("functools").cached_property
    def cp(self):
        return 1


@pytest.mark.parametrize("fn, arg", [(_del_and_re_add_the_same_key, {0: 0}), (_cached_property_on_slots, _Slots())],
                         ids=["del_re_add", "cached_property_slots"])
def test_found_by_the_cpython_harness(fn, arg):
    same_as_eager(fn, torch.ones(1), arg)
