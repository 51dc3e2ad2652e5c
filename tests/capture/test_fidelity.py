"""Capture fidelity (issue 10): compiled Python never crashes and computes what eager does.

Each test is a bug found by running ordinary Python (and CPython's own test suite,
tests/cpython) under ``torchkiln.compile(backend="eager")``.
"""
from __future__ import annotations

import contextlib

import pytest

import torchkiln


def compiled(fn):
    return torchkiln.compile(fn, backend="eager")


@pytest.fixture(autouse=True)
def _reset():
    torchkiln.reset()
    yield
    torchkiln.reset()


@contextlib.contextmanager
def _raises(exc):
    try:
        yield
    except exc:
        pass


def test_with_block_suppressing_an_exception():
    """Was a segfault in the resume function: its exception table had depth 0."""
    def f(r):
        with _raises(AttributeError):
            r.start = 0
        return r.start

    assert compiled(f)(range(3)) == 0
    assert compiled(f)(range(3)) == 0


def test_contextlib_suppress():
    def f(d):
        with contextlib.suppress(KeyError):
            d["x"]
        d["y"] = 1
        return d

    d = {}
    assert compiled(f)(d) is d and d == {"y": 1}


def test_sane_len():
    """CPython's test_bool.test_sane_len: a for loop defining a class with __len__,
    bool()/len() inside try/except (was a segfault in the resume function)."""
    def f():
        out = []
        for badval in ["illegal", -1, 1 << 32]:
            class A:
                def __len__(self):
                    return badval
            try:
                bool(A())
            except (Exception) as e_bool:
                try:
                    len(A())
                except (Exception) as e_len:
                    out.append((str(e_bool) == str(e_len), type(e_bool).__name__))
        return out

    assert compiled(f)() == f()


def test_graph_break_inside_with_suppressing_block():
    def f(xs):
        with _raises(ZeroDivisionError):
            xs.append(1)
            torchkiln.graph_break()
            xs.append(1 / 0)
        xs.append(3)
        return xs

    xs = []
    assert compiled(f)(xs) is xs and xs == [1, 3]


# -- side effects across graph breaks, identity ---------------------------------------------
_G = {"n": 0}
_counter = 0


class _Obj:
    pass


def _side_effects(d, xs, s, obj, x):
    global _counter
    d["a"] = x + 1
    xs.append(1)
    obj.before = 1
    _counter += 1
    torchkiln.graph_break()
    d["b"] = x + 2
    xs.append(2)
    s.add(3)
    obj.after = d["a"]
    _counter += 10
    torchkiln.graph_break()
    xs.append(len(d))
    return d, xs, s, obj


@pytest.mark.parametrize("calls", [1, 3])
def test_side_effects_across_graph_breaks_reach_the_caller(calls):
    import torch

    global _counter
    fn = compiled(_side_effects)
    for _ in range(calls):  # cached calls too
        _counter = 0
        d, xs, s, obj = {}, [], set(), _Obj()
        x = torch.ones(2)
        out = fn(d, xs, s, obj, x)
        assert out[0] is d and out[1] is xs and out[2] is s and out[3] is obj
        assert sorted(d) == ["a", "b"] and torch.equal(d["b"], x + 2)
        assert xs == [1, 2, 2] and s == {3}
        assert obj.before == 1 and torch.equal(obj.after, x + 1)
        assert _counter == 11


def test_dict_write_after_graph_break():
    import torch

    def f(d, x):
        d["a"] = x + 1
        torchkiln.graph_break()
        d["b"] = x + 2
        return d

    fn = compiled(f)
    for _ in range(2):
        d = {}
        assert fn(d, torch.ones(2)) is d
        assert sorted(d) == ["a", "b"]


def test_cell_writes_across_graph_break():
    def f(x):
        total = 0

        def bump(v):
            nonlocal total
            total += v
        bump(x)
        torchkiln.graph_break()
        bump(x * 10)
        return total

    fn = compiled(f)
    assert fn(2) == 22
    assert fn(2) == 22


def test_returns_the_list_it_was_given():
    import torch

    def same(xs):
        return xs

    def appended(xs, x):
        xs.append(x)
        return xs

    def in_tuple(xs, d):
        d["k"] = 1
        return (xs, d)

    xs = [1, 2]
    assert compiled(same)(xs) is xs
    ys = [1]
    assert compiled(appended)(ys, torch.ones(1)) is ys and len(ys) == 2
    d = {}
    out = compiled(in_tuple)(xs, d)
    assert out[0] is xs and out[1] is d and d == {"k": 1}


def test_mutation_order_before_and_after_break():
    log = []

    def f(log):
        log.append("a")
        log.append("b")
        torchkiln.graph_break()
        log.pop(0)
        log.append("c")
        return log

    assert compiled(f)(log) is log and log == ["b", "c"]


def test_context_manager_made_by_a_torch_function_is_made_on_every_call():
    """Wav2Vec2ForCTC's loss: ``with torch.backends.cudnn.flags(enabled=False):`` made
    the context manager once at capture time and re-entered it on the next call
    (``'_GeneratorContextManager' object has no attribute 'args'``)."""
    import torch

    def f(x):
        with torch.backends.cudnn.flags(enabled=False):
            return x + 1

    fn = compiled(f)
    for _ in range(3):
        assert torch.equal(fn(torch.ones(2)), torch.full((2,), 2.0))


def test_wav2vec2_ctc_training_step():
    """Issue 10: Wav2Vec2ForCTC (random weights, small config) trains twice in a row."""
    import torch

    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.Wav2Vec2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=64, vocab_size=16, mask_time_prob=0.5, mask_time_length=2,
                                      conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                                      num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                                      ctc_loss_reduction="mean")
    model = transformers.Wav2Vec2ForCTC(cfg).train()
    fn = torchkiln.compile(model, backend="eager")
    x = torch.randn(2, 1600)
    labels = torch.randint(1, 16, (2, 5))
    for _ in range(2):
        out = fn(x, labels=labels)
        out.loss.backward()
        assert torch.isfinite(out.loss)


def test_list_iterators_walk_the_live_list():
    """CPython's test_list.test_exhausted_iterator: an iterator over a list sees later
    appends until it is exhausted; one rebuilt after the frame walks the caller's list."""
    import torch

    def f(a):
        exhit = iter(a)
        empit = iter(a)
        for _ in exhit:
            next(empit)
        a.append(9)
        return list(exhit), list(empit)

    assert compiled(f)([1, 2, 3]) == f([1, 2, 3]) == ([], [9])

    def grow(a):
        out = []
        for v in a:
            if v < 3:
                a.append(v + 10)
            out.append(v)
        return out

    assert compiled(grow)([1, 2, 3]) == grow([1, 2, 3])

    def partly(a, x):
        it = iter(a)
        next(it)
        return it, x + 1

    a = [1, 2, 3]
    it, _ = compiled(partly)(a, torch.ones(1))
    a.append(4)
    assert list(it) == [2, 3, 4]


def test_frame_reading_builtins_see_the_user_frame():
    """CPython's test_set issubset tests: ``eval(s, locals())`` at a graph break saw
    the transformed code's frame (``NameError: name 'x' is not defined``)."""
    def f(x, y):
        out = []
        for case in "<", "==":
            out.append(eval("x" + case + "y", locals()))
        return out

    assert compiled(f)(1, 2) == f(1, 2) == [True, False]


def test_frame_observing_lifetimes_runs_eagerly_at_a_break():
    """test_set/test_functools ``test_weakref``: across a graph break the transformed code
    keeps the frame's values referenced, so a frame that watches lifetimes (weakref, gc)
    or tracebacks runs eagerly instead of breaking."""
    import gc
    import weakref

    def f(x):
        s = set("abc")
        p = weakref.proxy(s)
        torchkiln.graph_break()
        s = None
        gc.collect()
        try:
            str(p)
            return "alive"
        except ReferenceError:
            return "dead"

    assert f(1) == "dead"
    assert compiled(f)(1) == "dead"


def test_function_annotations_made_in_frame_are_kept():
    """test_functools update_wrapper / singledispatch ``register`` on an annotated
    function: MAKE_FUNCTION's annotations were dropped, and ``getattr(f, name, default)``
    returned the default for an attribute the tracker did not model."""
    import functools

    def f():
        def g(a: "ann"):
            pass

        def wrapper(b: "old"):
            pass
        functools.update_wrapper(wrapper, g)
        return wrapper.__annotations__, getattr(g, "__annotations__", None)

    def h():
        @functools.singledispatch
        def i(arg):
            return "base"

        @i.register
        def _(arg: list):
            return "list"
        return i([1]), i(None)

    assert compiled(f)() == f()
    assert compiled(h)() == h()


def test_partialmethod_frame_binds_by_its_code():
    """test_functools TestPartialMethod: a frame of partialmethod's ``_method`` was bound
    with ``inspect.signature``, which reports the wrapped function's parameters."""
    import functools

    def capture(*args, **kw):
        return args, kw

    class A:
        positional = functools.partialmethod(capture, 1)
        nested = functools.partialmethod(positional, 5)

    a = A()

    def f(a):
        return a.positional(c=6), a.nested(6, d=7), A.nested(a, 6, d=7)

    assert compiled(f)(a) == f(a)


class _Plain:
    def __init__(self):
        self.x = 1


def test_deepcopy_sees_attribute_writes_of_the_frame():
    """test_functools TestPartialPySubclass.test_deepcopy: the trace-time deep copy of an
    input object missed an attribute written earlier in the frame."""
    import copy

    def f(p):
        p.attr = [1]
        c = copy.deepcopy(p)
        return c.attr, c.x

    assert compiled(f)(_Plain()) == f(_Plain())


def test_namedtuple_made_at_a_break_reads_the_users_frame():
    """test_collections TestNamedTuple: ``namedtuple`` sets ``__module__`` from
    ``sys._getframe(1)``; called from transformed code (or captured as its own frame) it
    saw torchkiln's frame, and its ``_make`` failed."""
    from collections import namedtuple

    def f():
        Zero = namedtuple("Zero", "")
        Dot = namedtuple("Dot", "d")
        return repr(Zero()), Zero.__module__, Zero._make([]), Dot._make([1]), Dot.__module__

    assert compiled(f)() == f()
