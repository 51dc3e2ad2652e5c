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

    def counting(self, returns=None):
        sizes.append(len(self.parts))
        return build(self, returns)
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


def _same_outcome(fn, *args):
    """``fn`` compiled and eagerly on deep copies: same result, same mutated arguments."""
    import copy

    torchkiln.reset()
    eager_args, comp_args = copy.deepcopy(args), copy.deepcopy(args)
    expected = fn(*eager_args)
    got = torchkiln.compile(fn, backend="eager")(*comp_args)
    assert same(expected, got) and repr(expected) == repr(got), (expected, got)
    assert repr(eager_args) == repr(comp_args), (eager_args, comp_args)
    for a, b in zip(eager_args, comp_args):
        if isinstance(a, dict):
            assert [type(k) for k in a] == [type(k) for k in b]


def test_dict_setitem_delitem_in_a_loop_match_cpython():
    """d[k] = v / del d[k] on a tracked dict (no native round trip of the whole dict):
    an existing key keeps its key object and position, a new key goes last."""
    import collections

    def f(d, x):
        for k in range(6):
            d[k] = k * 10
        d[1.0] = "one"   # equal to 1: keeps the int key and its place
        d[True] = "true"
        for k in (0, 2, 4):
            del d[k]
        d[0] = "zero"
        try:
            del d[99]
        except KeyError:
            d["missing"] = 1
        return x + len(d), list(d.items())

    x = randn(2)
    _same_outcome(f, {"a": 1, 3: 3}, x)
    _same_outcome(f, collections.OrderedDict(a=1), x)
    _same_outcome(f, collections.defaultdict(list, a=[1]), x)

    def g(c):
        del c["nope"]  # a Counter forgives a missing key
        c["a"] += 2
        return c

    _same_outcome(g, collections.Counter("aab"))


def test_list_append_in_a_loop_is_the_callers_list():
    def f(lst, x):
        out = []
        for i in range(20):
            lst.append(i)
            out.append(x * i)
        it = iter(lst)
        lst.append("end")
        return lst, out, list(it)

    _same_outcome(f, [1, 2], randn(2))
    torchkiln.reset()
    lst = []
    opt = torchkiln.compile(lambda l: (l.append(3), l)[1], backend="eager")
    assert opt(lst) is lst and lst == [3]


def test_callee_that_broke_while_inlined_is_traced_once(monkeypatch):
    """A break inside an inlined callee restarts the caller, which calls the callee as
    its own frame: that capture starts from the break found while inlining instead of
    tracing up to it, restarting and tracing again."""
    from torchkiln.capture import symbolic_convert

    def helper(x):
        y = x.sin() * 2
        torchkiln.graph_break()
        return y + 1

    def f(x):
        return helper(x + 1) - 1

    traces = []
    run = symbolic_convert.InstructionTranslator.run

    def counting(self):
        traces.append(self.code.co_name)
        return run(self)
    monkeypatch.setattr(symbolic_convert.InstructionTranslator, "run", counting)
    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(f, backend=cnt)
    x = randn(3)
    assert same(f(x), opt(x))
    assert traces.count("helper") == 1, traces
    assert cnt.frame_count == 4  # f before the call, helper before/after its break, f after
    assert same(f(x), opt(x))


def test_resume_codes_are_not_decoded_again(monkeypatch):
    """The translator reads a resume code's instructions from the items it was built
    from (positions in the original), not by decoding the new code object."""
    from torchkiln.capture import symbolic_convert

    decoded = []
    from_code = symbolic_convert.Bytecode.from_code

    def counting(code, *a, **k):
        decoded.append(code.co_name)
        return from_code(code, *a, **k)
    monkeypatch.setattr(symbolic_convert.Bytecode, "from_code", staticmethod(counting))

    def f(x, d):
        x = x + 1
        torchkiln.graph_break()
        try:
            x = x * 2
            torchkiln.graph_break()
            d["k"] = x
        except KeyError:
            pass
        with torch.no_grad():
            y = x - 1
            torchkiln.graph_break()
        return x, y

    torchkiln.reset()
    x = randn(3)
    d1, d2 = {}, {}
    assert same(f(x, d1), torchkiln.compile(f, backend="eager")(x, d2)) and same(d1, d2)
    assert not [n for n in decoded if n.startswith("torchkiln_")], decoded
