"""Set iteration order under capture matches CPython's (issue 10: wrong results).

Each case runs the same function eagerly and compiled (backend="eager") and compares
everything it returns, order included: set tables keep the history of deletions and
growth, so a set rebuilt from its current items can iterate differently."""
import pytest
import torch

import torchkiln


def _same(fn, *make_args):
    x = torch.ones(1)
    want = fn(x, *[m() for m in make_args])
    got = torchkiln.compile(fn, backend="eager")(x, *[m() for m in make_args])
    assert [repr(w) for w in want[1:]] == [repr(g) for g in got[1:]]
    assert torch.equal(want[0], got[0])


def literal(x):
    s = {7, 1000}
    return x + 1, list(s), [v for v in s], tuple(s)


def deletions_then_additions(x):
    s = {64, 17, 3}
    s.add(1000); s.discard(17); s.add(33)
    t = {7, 1000, 15, 23, 31, 39, 47}
    for v in (15, 23, 31):
        t.discard(v)
    t.add(55)
    return x + 1, list(s), [v for v in t]


def built_by_adds(x):
    s = set()
    for v in (1000, 7, 64, 129, 17):
        s.add(v)
    s.remove(64)
    s.add(9)
    return x + len(s), [v for v in s], list(set(s)), list(s.copy())


def algebra(x):
    a = {7, 1000, 64, 129, 17, 9}
    b = {1000, 15, 8, 64, 23}
    out = [list(a | b), list(a & b), list(a - b), list(a ^ b), list(a.union([33, 1])),
           list(b.intersection(a)), list(a.symmetric_difference(b))]
    c = set(a); c |= b; out.append(list(c))
    c = set(a); c &= b; out.append(list(c))
    c = set(a); c -= b; out.append(list(c))
    c = set(a); c ^= b; out.append(list(c))
    return x + 1, out


def comprehension(x):
    s = {v * 8 for v in (125, 1, 16, 2)}
    return x + 1, list(s), {v % 7 for v in s}, sorted(s)


def frozen(x):
    f = frozenset([7, 1000, 15])
    g = f | {64, 3}
    return x + 1, list(f), list(g), [v for v in frozenset(g)]


def caller_set(x, s):
    return x + 1, list(s), [v for v in s]


def caller_set_mutated(x, s):
    s.discard(17)
    s.add(33)
    return x + 1, list(s), sorted(s)


@pytest.mark.parametrize("fn", [literal, deletions_then_additions, built_by_adds, algebra, comprehension, frozen])
def test_set_made_in_frame(fn):
    _same(fn)


def test_sorted_set_still_captures():
    def f(x):
        s = {3, 1000, 7}
        s.discard(1000)
        return x * len(s), sorted(s)
    _same(f)
    assert torchkiln.capture.explain(f)(torch.ones(2)).graph_break_count == 0


@pytest.mark.parametrize("make", [lambda: {64, 17, 1000, 3}, lambda: frozenset({64, 17, 1000, 3})])
def test_caller_set(make):
    _same(caller_set, make)


def test_caller_set_mutated():
    _same(caller_set_mutated, lambda: {64, 17, 3, 1000})


def test_equal_sets_of_another_order_recompile():
    a, b = {7, 15}, {15, 7}  # equal, colliding hashes: iteration orders differ
    assert a == b and list(a) != list(b)
    c = torchkiln.compile(caller_set, backend="eager")
    x = torch.ones(1)
    for s in (a, b, a):
        assert c(x, s)[1:] == caller_set(x, s)[1:]


def test_identity_keyed_set_order_is_not_baked():
    def f(x, y, z):
        s = {x, y, z}
        return [t * 1 for t in s]
    xs = [torch.full((1,), float(i)) for i in range(3)]
    c = torchkiln.compile(f, backend="eager")
    for _ in range(2):
        args = [t.clone() for t in xs]
        want = [int(t) for t in f(*args)]
        assert [int(t) for t in c(*args)] == want


def test_identity_keyed_set_into_a_list_breaks():
    def f(x, y, z):
        out = [0]
        out.extend({x, y, z})
        return [t if isinstance(t, int) else int(t) for t in out]
    xs = [torch.full((1,), float(i)) for i in range(3)]
    c = torchkiln.compile(f, backend="eager")
    for _ in range(2):
        args = [t.clone() for t in xs]
        assert c(*args) == f(*args)


def test_pop_and_caller_frozenset_algebra():
    def f(x, fs):
        s = {7, 1000, 15, 64}
        a = s.pop()
        g = fs | {3}
        return x + 1, a, list(s), list(g)
    _same(f, lambda: frozenset({64, 17, 1000, 3}))


def test_set_live_across_a_graph_break_and_returned():
    def f(x):
        s = {7, 1000, 15, 23, 31, 39, 47}
        for v in (15, 23, 31):
            s.discard(v)
        s.add(55)
        t = {"a", "bb", "ccc", 3.5, None}
        t.discard("bb")
        joined = " ".join(map(str, s))
        torchkiln.capture.graph_break()  # s and t are rebuilt for the resumed frame
        return x + 1, joined, [v for v in s], next(iter(s)), s, t, str(t)
    _same(f)


def test_set_of_a_dict():
    def f(x):
        d = {k: None for k in (34, 145, 195, 16, 65, 30)}  # set(d) sizes its table first: [16, 145, ...]
        s, t = set(d), {*d}
        t.discard(195)
        u = set(d.keys()) | d.keys()
        return x + 1, list(s), list(t), list(u), " ".join(map(str, t)), t
    _same(f)


def test_builtins_on_sets():
    def f(x):
        s = frozenset({1000, 7}) | frozenset([15, 7])
        t = set()
        for i in range(40):
            t.add(i * 8)
        for i in range(0, 40, 3):
            t.discard(i * 8)
        return x + 1, list(s), list(t), t.pop(), tuple(t), s & t, t - s, set(t), sorted(t)[:3]
    _same(f)


def test_identity_keyed_set_into_list_breaks():
    def f(x, y, z):
        return [int(t) for t in list({x, y, z})] + [int(t) for t in tuple({z, y})]
    xs = [torch.full((1,), float(i)) for i in range(3)]
    c = torchkiln.compile(f, backend="eager")
    for _ in range(2):
        args = [t.clone() for t in xs]
        assert c(*args) == f(*args)


def test_identity_keyed_items_added_later_break():
    def f(x, y, z):
        s = set()
        for t in (x, y, z):
            s.add(t)
        u = {t for t in (z, x, y)}
        return [int(t) for t in s] + [int(t) for t in u]
    xs = [torch.full((1,), float(i)) for i in range(3)]
    reasons = [str(r) for r in torchkiln.capture.explain(f)(*xs).break_reasons]
    assert any("iteration order" in r for r in reasons), reasons  # never the trace-time address order
    c = torchkiln.compile(f, backend="eager")
    for _ in range(3):
        args = [t.clone() for t in xs]
        assert c(*args) == f(*args)


def test_dict_keys_view_algebra_live_across_a_break():
    def f(x):
        d = {k: None for k in (21, 154, 15, 137, 242, 198, 218, 202, 295)}
        r = d.keys() - {202, 15, 295, 21}  # set(keys) then deletions: dummy slots
        torchkiln.capture.graph_break()  # r is rebuilt for the resumed frame
        return x + 1, list(r), r
    _same(f)
