"""The compiled wrapper's cache and recompile policy, on a stand-in for capture.

``convert_frame`` is replaced by a small fake whose guards check the tensor arguments'
shapes and dtypes (with the field's failure-reason text) and whose graph is
``torch.fx.symbolic_trace`` of the function, so these tests exercise eval_frame alone:
cache lookup order, cache_size_limit, error_on_recompile, guard_fail_fn, the
recompiles log, automatic dynamic, dynamic=True/False, disable, reset, fast binding.
Every result is compared with eager.
"""
import logging
import warnings

import pytest
import torch

import torchkiln
from torchkiln.capture import eval_frame
from torchkiln.capture.frame import bind_locals
from torchkiln.exc import RecompileError
from torchkiln.testing import CompileCounter, same


class FakeGuard:
    def __init__(self, f_locals, policy):
        self.spec = {}
        for name, v in f_locals.items():
            if isinstance(v, torch.Tensor):
                dyn = {d for d in range(v.dim()) if policy.is_dynamic(f"L['{name}']", v, d)}
                self.spec[name] = (v.dtype, v.dim(), tuple(None if d in dyn else s for d, s in enumerate(v.shape)))
        self.code_parts = [f"check_tensor(L['{n}'])" for n in self.spec]

    def _fails(self, f_locals):
        for name, (dtype, ndim, sizes) in self.spec.items():
            v = f_locals.get(name)
            if not isinstance(v, torch.Tensor):
                yield name, "type", None
                continue
            if v.dtype != dtype:
                yield name, "dtype", f"tensor 'L['{name}']' dtype mismatch. expected {dtype}, actual {v.dtype}"
            if v.dim() != ndim:
                yield name, "rank", f"tensor 'L['{name}']' rank mismatch. expected {ndim}, actual {v.dim()}"
                continue
            for d, s in enumerate(sizes):
                if s is not None and v.shape[d] != s:
                    yield name, d, (f"tensor 'L['{name}']' size mismatch at index {d}. "
                                    f"expected {s}, actual {v.shape[d]}")

    def check(self, f_locals):
        return next(self._fails(f_locals), None) is None

    def failure_reason(self, f_locals):
        fail = next(self._fails(f_locals), None)
        return None if fail is None else fail[2]

    def size_failures(self, f_locals):
        out = {}
        for name, what, _ in self._fails(f_locals):
            if not isinstance(what, int):
                return None
            out.setdefault(f"L['{name}']", set()).add(what)
        return out


class FakeEntry:
    def __init__(self, fn, guard, compiled):
        self.guard, self.graphs, self.break_reasons = guard, [], []
        self.fn = compiled
        self.run = lambda f_locals: compiled(*[f_locals[n] for n in fn.__code__.co_varnames[:fn.__code__.co_argcount]])


@pytest.fixture
def fake_capture(monkeypatch):
    """Replace capture with the fake; yields the list of DynamicPolicy objects it got."""
    policies = []

    def fake_convert_frame(fn, args, kwargs, *, backend, fullgraph, dynamic, compile_wrapper):
        policies.append(dynamic)
        f_locals = bind_locals(fn, args, kwargs)
        gm = torch.fx.symbolic_trace(fn)
        example = [f_locals[n] for n in fn.__code__.co_varnames[:fn.__code__.co_argcount]]
        compiled = backend(gm, example)
        return FakeEntry(fn, FakeGuard(f_locals, dynamic), compiled)

    monkeypatch.setattr(eval_frame, "convert_frame", fake_convert_frame)
    torchkiln.reset()
    yield policies
    torchkiln.reset()


def add_mul(x, y):
    return (x + y) * 2


def test_cache_hit_and_recompile_on_dtype(fake_capture):
    cnt = CompileCounter()
    f = torchkiln.compile(add_mul, backend=cnt)
    a, b = torch.randn(3), torch.randn(3)
    assert same(f(a, b), add_mul(a, b))
    assert same(f(a, b), add_mul(a, b))
    assert cnt.frame_count == 1
    a64, b64 = a.double(), b.double()
    assert same(f(a64, b64), add_mul(a64, b64))
    assert cnt.frame_count == 2
    # Both entries stay cached.
    f(a, b)
    f(a64, b64)
    assert cnt.frame_count == 2


def test_same_backend_shares_cache_other_backend_does_not(fake_capture):
    cnt = CompileCounter()
    x = torch.randn(2)
    torchkiln.compile(add_mul, backend=cnt)(x, x)
    torchkiln.compile(add_mul, backend=cnt)(x, x)
    assert cnt.frame_count == 1
    other = CompileCounter()
    torchkiln.compile(add_mul, backend=other)(x, x)
    assert other.frame_count == 1


def test_cache_size_limit_then_eager_with_one_warning(fake_capture):
    cnt = CompileCounter()
    f = torchkiln.compile(add_mul, backend=cnt, dynamic=False)
    with torchkiln.config.patch(cache_size_limit=2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for n in range(1, 6):
                x = torch.randn(n)
                assert same(f(x, x), add_mul(x, x))
    assert cnt.frame_count == 2
    limit_warnings = [w for w in caught if "cache_size_limit" in str(w.message)]
    assert len(limit_warnings) == 1
    assert "add_mul" in str(limit_warnings[0].message)


def test_error_on_recompile(fake_capture):
    f = torchkiln.compile(add_mul, backend="eager")
    f(torch.randn(3), torch.randn(3))
    with torchkiln.config.patch(error_on_recompile=True):
        with pytest.raises(RecompileError, match="dtype mismatch"):
            f(torch.randn(3).double(), torch.randn(3).double())


def test_guard_fail_fn_gets_first_failure_of_latest_entry(fake_capture):
    failures = []
    f = torchkiln.optimize("eager", guard_fail_fn=failures.append)(add_mul)
    x = torch.randn(3)
    f(x, x)
    f(x, x)
    assert failures == []
    f(x.double(), x.double())
    assert len(failures) == 1
    assert failures[0].reason == "tensor 'L['x']' dtype mismatch. expected torch.float32, actual torch.float64"
    assert failures[0][0] == failures[0].reason
    assert failures[0].orig_code is add_mul.__code__


def test_recompiles_log(fake_capture, caplog):
    logger = logging.getLogger("torchkiln.recompiles")
    old_level, old_propagate = logger.level, logger.propagate
    logger.setLevel(logging.DEBUG)
    logger.propagate = True
    try:
        with caplog.at_level(logging.DEBUG, logger="torchkiln.recompiles"):
            f = torchkiln.compile(add_mul, backend="eager")
            x = torch.randn(3)
            f(x, x)
            f(x.double(), x.double())
    finally:
        logger.setLevel(old_level)
        logger.propagate = old_propagate
    text = caplog.text
    assert "Recompiling function add_mul in" in text
    assert "triggered by the following guard failure(s):" in text
    assert "- tensor 'L['x']' dtype mismatch" in text


def test_automatic_dynamic_marks_changed_dims(fake_capture):
    cnt = CompileCounter()
    f = torchkiln.compile(add_mul, backend=cnt)
    for n in (3, 4, 5, 6):
        x, y = torch.randn(n, 2), torch.randn(n, 2)
        assert same(f(x, y), add_mul(x, y))
    assert cnt.frame_count == 2  # static, then one dynamic recompile serves every size
    assert fake_capture[0].dynamic_dims == {}
    assert fake_capture[1].dynamic_dims == {"L['x']": {0}, "L['y']": {0}}
    assert fake_capture[1].assume_static


def test_automatic_dynamic_off(fake_capture):
    cnt = CompileCounter()
    with torchkiln.config.patch(automatic_dynamic_shapes=False):
        f = torchkiln.compile(add_mul, backend=cnt)
        for n in (3, 4, 5):
            f(torch.randn(n), torch.randn(n))
    assert cnt.frame_count == 3


def test_dynamic_false_never_dynamic(fake_capture):
    cnt = CompileCounter()
    f = torchkiln.compile(add_mul, backend=cnt, dynamic=False)
    for n in (3, 4, 5):
        f(torch.randn(n), torch.randn(n))
    assert cnt.frame_count == 3
    assert all(p.dynamic_dims == {} for p in fake_capture)


def test_dynamic_true_assumes_dynamic(fake_capture):
    cnt = CompileCounter()
    f = torchkiln.compile(add_mul, backend=cnt, dynamic=True)
    for n in (3, 4, 5):
        x = torch.randn(n)
        assert same(f(x, x), add_mul(x, x))
    assert cnt.frame_count == 1
    assert fake_capture[0].assume_static is False


def test_mark_dynamic_and_mark_static_reach_the_policy(fake_capture):
    cnt = CompileCounter()
    f = torchkiln.compile(add_mul, backend=cnt)
    x = torch.randn(3, 4)
    torchkiln.mark_dynamic(x, 0)
    f(x, torch.randn(3, 4))
    policy = fake_capture[0]
    assert policy.is_dynamic("L['x']", x, 0) and not policy.is_dynamic("L['x']", x, 1)
    y = torch.randn(3, 4)
    torchkiln.mark_static(y)
    from torchkiln.shapes.policy import DynamicPolicy

    assert not DynamicPolicy(assume_static=False).is_dynamic("L['y']", y, 0)
    assert DynamicPolicy(assume_static=False).is_dynamic("L['x']", x, 1)


def test_disable_region_runs_nested_compiled_natively(fake_capture):
    cnt = CompileCounter()
    inner = torchkiln.compile(add_mul, backend=cnt)

    @torchkiln.disable
    def outer(x):
        return inner(x, x) + 1

    x = torch.randn(3)
    assert same(outer(x), add_mul(x, x) + 1)
    assert cnt.frame_count == 0
    assert outer._torchkiln_disable and outer._torchkiln_orig_callable.__name__ == "outer"
    inner(x, x)
    assert cnt.frame_count == 1

    @torchkiln.disable(recursive=False)
    def outer2(x):
        return inner(x.double(), x.double())

    outer2(x)
    assert cnt.frame_count == 2


def test_compile_disable_true_returns_model(fake_capture):
    assert torchkiln.compile(add_mul, disable=True) is add_mul


def test_reset_drops_entries_and_counters(fake_capture):
    cnt = CompileCounter()
    f = torchkiln.compile(add_mul, backend=cnt)
    x = torch.randn(3)
    f(x, x)
    torchkiln.counters["stats"]["probe"] += 1
    hook_calls = []
    torchkiln.capture.register_reset_hook(lambda: hook_calls.append(1))
    torchkiln.reset()
    assert "stats" not in torchkiln.counters
    assert hook_calls == [1]
    eval_frame._reset_hooks.pop()
    f(x, x)
    assert cnt.frame_count == 2


def test_kwargs_defaults_and_varargs_bind(fake_capture):
    def g(x, y=2.0, *rest, scale=3.0, **extra):
        return x * y * scale

    # symbolic_trace cannot trace *args/**kwargs: the wrapper's binding is what is tested.
    seen = []

    def fake(fn, args, kwargs, *, backend, fullgraph, dynamic, compile_wrapper):
        seen.append(bind_locals(fn, args, kwargs))
        guard = FakeGuard({}, dynamic)
        return FakeEntry(fn, guard, fn)

    eval_frame.convert_frame, saved = fake, eval_frame.convert_frame
    try:
        cg = torchkiln.compile(g, backend="eager")
        x = torch.randn(2)
        assert same(cg(x), g(x))
    finally:
        eval_frame.convert_frame = saved
    assert seen[0]["y"] == 2.0 and seen[0]["scale"] == 3.0 and seen[0]["rest"] == () and seen[0]["extra"] == {}


def test_bound_method_caches_on_function(fake_capture):
    class Obj:
        def __init__(self, k):
            self.k = k

        def method(this, x):  # not "self": fx.symbolic_trace reserves that name
            return x * 2

    cnt = CompileCounter()
    a, b = Obj(1), Obj(2)
    ca = torchkiln.compile(a.method, backend=cnt)
    cb = torchkiln.compile(b.method, backend=cnt)
    x = torch.randn(3)
    assert same(ca(x), a.method(x)) and same(cb(x), b.method(x))
    assert ca.__self__ is a and cb.__self__ is b
    assert cnt.frame_count == 1  # one code object, guards pass for both


def test_closures_are_cached_per_cells(fake_capture):
    def make(k):
        def f(x):
            return x * k
        return f

    cnt = CompileCounter()
    f2, f3 = make(2.0), make(3.0)
    x = torch.randn(3)
    assert same(torchkiln.compile(f2, backend=cnt)(x), x * 2.0)
    assert same(torchkiln.compile(f3, backend=cnt)(x), x * 3.0)


def test_non_callable_raises_type_error():
    with pytest.raises(TypeError, match="callable"):
        torchkiln.compile(3)
    with pytest.raises(TypeError):
        torchkiln.optimize("eager")(object())


def test_unknown_backend():
    from torchkiln.backends import InvalidBackend

    with pytest.raises(InvalidBackend):
        torchkiln.compile(add_mul, backend="no-such-backend")


def test_mode_and_options_together_raise():
    with pytest.raises(RuntimeError, match="mode or options"):
        torchkiln.compile(add_mul, backend="eager", mode="max-autotune", options={"a": 1})


def test_options_reach_backend(fake_capture):
    got = []

    def backend_with_options(gm, example_inputs, options=None):
        got.append(options)
        return gm.forward

    f = torchkiln.compile(add_mul, backend=backend_with_options, options={"debug": True})
    x = torch.randn(2)
    assert same(f(x, x), add_mul(x, x))
    assert got == [{"debug": True}]


def test_optimize_as_context_manager_raises():
    with pytest.raises(RuntimeError, match="context manager"):
        with torchkiln.optimize("eager"):
            pass
    with torchkiln.config.patch(raise_on_ctx_manager_usage=False):
        with torchkiln.optimize("eager"):
            pass


def test_decorator_forms(fake_capture):
    cnt = CompileCounter()

    @torchkiln.compile(backend=cnt)
    def f(x):
        return x.sin()

    x = torch.randn(3)
    assert same(f(x), x.sin())
    assert f.__name__ == "f" and cnt.frame_count == 1


def test_partial_compiles_its_function(fake_capture):
    import functools

    cnt = CompileCounter()
    p = torchkiln.compile(functools.partial(add_mul, y=torch.ones(3)), backend=cnt)
    x = torch.randn(3)
    assert same(p(x), add_mul(x, torch.ones(3)))
    assert cnt.frame_count == 1


def test_recompile_limit_alias(fake_capture):
    cnt = CompileCounter()
    f = torchkiln.compile(add_mul, backend=cnt, dynamic=False)
    with torchkiln.config.patch(recompile_limit=1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (2, 3, 4):
            x = torch.randn(n)
            assert same(f(x, x), add_mul(x, x))
    assert cnt.frame_count == 1


def test_guard_that_raises_counts_as_failed(fake_capture, monkeypatch):
    cnt = CompileCounter()
    f = torchkiln.compile(add_mul, backend=cnt)
    x = torch.randn(3)
    f(x, x)

    def boom(f_locals):
        raise KeyError("broken guard")

    fc = eval_frame.frame_cache_for(add_mul)
    key, _, run = fc.hot[0]
    fc.hot[0] = (key, boom, run)
    monkeypatch.setattr(FakeGuard, "failure_reason", lambda self, f_locals: boom(f_locals))
    assert same(f(x, x), add_mul(x, x))
    assert cnt.frame_count == 2


def test_options_dropped_with_warning_when_backend_takes_none(fake_capture):
    cnt = CompileCounter()
    with pytest.warns(UserWarning, match="takes no 'options'"):
        f = torchkiln.compile(add_mul, backend=cnt, options={"debug": True})
    x = torch.randn(2)
    assert same(f(x, x), add_mul(x, x))
    assert cnt.frame_count == 1


def test_compile_of_decorated_method_and_of_disabled_function(fake_capture):
    cnt = CompileCounter()

    class Obj:
        @torchkiln.compile(backend=cnt)
        def method(this, x):
            return x * 2

    o = Obj()
    again = torchkiln.compile(o.method, backend=cnt)
    x = torch.randn(3)
    assert same(again(x), x * 2) and same(o.method(x), x * 2)
    assert cnt.frame_count == 1

    disabled = torchkiln.disable(add_mul)
    assert torchkiln.compile(disabled, backend=cnt) is disabled


def _sig_zoo():
    k = 7

    def plain(a, b):
        return a, b

    def defaults(a, b=2, c=3):
        return a, b, c

    def kwonly(a, *, b, c=3):
        return a, b, c

    def star(a, *rest, b=1, **extra):
        return a, rest, b, extra

    def posonly(a, b=2, /, c=3, **kw):
        return a, b, c, kw

    def closure(a, b=1):
        return a + b + k

    return [plain, defaults, kwonly, star, posonly, closure]


_CALLS = [((1, 2), {}), ((1,), {}), ((1,), {"b": 5}), ((), {"a": 1, "b": 2}), ((1, 2, 3), {}),
          ((1, 2, 3, 4), {"z": 9}), ((1,), {"c": 4}), ((1,), {"a": 1}), ((1, 2), {"b": 3}),
          ((1,), {"b": 2, "c": 3, "d": 4}), ((), {}), ((1, 2), {"a": 0, "q": 1})]


@pytest.mark.parametrize("fn", _sig_zoo(), ids=lambda f: f.__name__)
def test_fast_binder_matches_bind_locals(fn):
    binder = eval_frame._make_binder(fn)
    for args, kwargs in _CALLS:
        try:
            expected = bind_locals(fn, args, dict(kwargs))
        except TypeError:
            with pytest.raises(TypeError):
                binder(args, dict(kwargs))
            continue
        assert binder(args, dict(kwargs)) == expected, (fn.__name__, args, kwargs)


def test_bind_locals_follows_replaced_defaults():
    """A replaced ``__defaults__`` tuple is freed and its address reused by the next one:
    the signature cache must not take that for the old tuple (it did at the 3rd value),
    nor miss a ``__kwdefaults__`` changed in place."""
    def h(x, k=1, *rest, **kw):
        return x + k

    for i in range(2, 500):
        h.__defaults__ = (i,)
        assert bind_locals(h, (), {"x": 0})["k"] == i

    def f(x, *, k=1):
        return x + k

    assert bind_locals(f, (), {"x": 0})["k"] == 1
    f.__kwdefaults__["k"] = 5
    assert bind_locals(f, (), {"x": 0})["k"] == 5
