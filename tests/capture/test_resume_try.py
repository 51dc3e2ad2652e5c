"""A graph break inside ``try`` / ``with`` / ``for`` bodies resumes in a captured
continuation; an exception raised before, at or after the break reaches the frame's own
``except`` / ``finally`` / ``with`` handlers exactly as in plain CPython."""
import contextlib
import copy

import pytest
import torch

import torchkiln
from torchkiln.testing import CompileCounter, same


@torchkiln.disable
def may_raise(x, flag, exc=ValueError):
    """The breaking call: runs natively; raises ``exc`` when ``flag``."""
    if flag:
        raise exc(f"raised at the break ({flag})")
    return x * 3


def _outcome(fn, *args):
    args = copy.deepcopy(args)
    events = []
    try:
        result = fn(events, *args)
    except Exception as e:  # noqa: BLE001
        return ("raised", type(e), str(e), events)
    return ("returned", result, events)


def check_like_eager(fn, cases, min_frames=2):
    """``fn(events, *case)`` compiled gives eager's result or exception and the same
    events in the same order, for every case, twice; for the first case the continuation
    after the break is captured (at least ``min_frames`` frames), not run natively."""
    torchkiln.reset()
    cnt = CompileCounter()
    opt = torchkiln.compile(fn, backend=cnt)
    for i, case in enumerate(cases):
        before = cnt.frame_count
        expected = _outcome(fn, *case)
        for _ in range(2):
            got = _outcome(opt, *case)
            assert len(got) == len(expected) and got[0] == expected[0], (case, got, expected)
            assert same(tuple(expected[1:]), tuple(got[1:])), (case, got, expected)
        if i == 0:  # the first case's frames: the prefix and the continuation(s)
            assert cnt.frame_count - before >= min_frames, cnt.frame_count - before
    return cnt


def test_exception_before_at_and_after_the_break():
    def f(events, x, where):
        y = x.sin()
        try:
            y = y + 1
            if where == "before":
                raise KeyError("before")
            y = may_raise(y, where == "at")
            z = y * 2
            events.append("after break")
            if where == "after":
                raise IndexError(f"after {z.shape}")
            y = z + 1
        except (KeyError, ValueError, IndexError) as e:
            events.append(f"caught {type(e).__name__}")
            y = y - 1
        events.append("end")
        return y.cos()

    check_like_eager(f, [(torch.randn(3), w) for w in ("none", "before", "at", "after")])


def test_locals_set_after_the_break_are_seen_by_the_handler():
    def f(events, x, fail):
        state = "start"
        try:
            y = may_raise(x + 1, False)
            state = "after break"
            y = may_raise(y, fail)
            state = "done"
        except ValueError:
            events.append(state)
            y = x
        return y * 2, state

    check_like_eager(f, [(torch.randn(2), False), (torch.randn(2), True)])


def test_finally_runs_once_on_every_path():
    def f(events, x, flag):
        try:
            y = x + 1
            y = may_raise(y, flag == 1)
            if flag == 2:
                raise RuntimeError("after")
            return y * 2
        finally:
            events.append("finally")
            x.add_(1)

    check_like_eager(f, [(torch.zeros(2), k) for k in (0, 1, 2)])


def test_uncaught_exception_type_passes_through_except_and_finally():
    def f(events, x, exc):
        try:
            try:
                y = may_raise(x + 1, exc is not None, exc or ValueError)
            except KeyError:
                events.append("inner KeyError")
                y = x
            finally:
                events.append("inner finally")
            y = y + 1
        except ValueError:
            events.append("outer ValueError")
            y = -x
        return y

    check_like_eager(f, [(torch.ones(2), None), (torch.ones(2), KeyError), (torch.ones(2), ValueError)])
    with pytest.raises(TypeError):
        torchkiln.compile(f, backend="eager")([], torch.ones(2), TypeError)


def test_try_inside_for_loop():
    def f(events, x, bad):
        total = x * 0
        for i in range(4):
            try:
                total = total + may_raise(x + i, i == bad)
                events.append(i)
            except ValueError:
                events.append(f"skip {i}")
                continue
            total = total * 1.5
        return total

    check_like_eager(f, [(torch.randn(3), -1), (torch.randn(3), 1), (torch.randn(3), 3)])


def test_return_inside_try_and_break_in_handler_free_try_else():
    def f(events, x, fail):
        try:
            y = may_raise(x.relu(), fail)
        except ValueError as e:
            events.append(str(e))
            return x
        else:
            events.append("else")
            return y + 1
        finally:
            events.append("finally")

    check_like_eager(f, [(torch.randn(3), False), (torch.randn(3), True)])


def test_branch_on_tensor_inside_try():
    def f(events, x):
        try:
            y = x * 2
            if y.sum() > 0:  # data-dependent: a break at the jump
                events.append("pos")
                y = y + 1
            else:
                events.append("neg")
            out = y.cos()
        except RuntimeError:
            events.append("caught")
            out = x
        return out

    check_like_eager(f, [(torch.ones(3),), (-torch.ones(3),)])
    check_like_eager(f, [(torch.ones(3, 2).T,)], min_frames=1)  # sums fine; shape differs


def test_bool_of_ambiguous_tensor_raises_into_the_handler():
    def f(events, x):
        try:
            y = x + 1
            if y:  # RuntimeError for more than one element, from the transformed code
                events.append("true")
        except RuntimeError as e:
            events.append("caught " + str(e)[:20])
            y = x
        return y

    check_like_eager(f, [(torch.ones(3),), (torch.ones(1),)], min_frames=1)


def test_break_inside_no_grad_with_and_try():
    def f(events, x, fail):
        with torch.no_grad():
            try:
                y = may_raise(x * 2, fail)
                events.append(torch.is_grad_enabled())
            except ValueError:
                events.append(("caught", torch.is_grad_enabled()))
                y = x * 0
        events.append(torch.is_grad_enabled())
        return y + x

    x = torch.randn(2, requires_grad=True)
    check_like_eager(f, [(x, False), (x, True)])


def test_exception_escaping_a_with_block_exits_it():
    def f(events, x, fail):
        with torch.no_grad():
            y = may_raise(x * 2, fail)
        return y, torch.is_grad_enabled()

    x = torch.randn(2, requires_grad=True)
    check_like_eager(f, [(x, False), (x, True)])
    assert torch.is_grad_enabled()


def test_break_inside_with_and_for_bodies_resume():
    def f(events, x):
        for i in range(3):
            with torch.no_grad():
                x = x + i
                print("break", i)
                x = x * 2
        return x

    cnt = check_like_eager(f, [(torch.randn(2),)])
    assert cnt.frame_count >= 3  # prefix, and continuations after the breaks


def test_context_of_exception_is_preserved():
    def f(events, x):
        try:
            raise KeyError("outer")
        except KeyError:
            try:
                may_raise(x, True)
            except ValueError as e:
                events.append(type(e.__context__).__name__)
        return x

    check_like_eager(f, [(torch.ones(1),)], min_frames=0)


def test_pending_outer_call_and_star_call_on_the_stack():
    def f(events, x, fail):
        try:
            y = torch.add(x, may_raise(x + 1, fail), alpha=2)  # NULL + callable + arg below the break
            z = may_raise(*(y, fail == 2))
        except ValueError as e:
            events.append(str(e))
            return x
        return z

    check_like_eager(f, [(torch.randn(2), 0), (torch.randn(2), 1), (torch.randn(2), 2)])


def test_generated_code_passes_the_verifier():
    from torchkiln.capture.resume import _cache
    from torchkiln.capture.verify import verify_code

    test_exception_before_at_and_after_the_break()
    handlers = [c for c in _cache.values() if c.co_name.startswith("torchkiln_handle_in_")]
    assert handlers
    for code in handlers:
        verify_code(code, tuple(__import__("types").CellType() for _ in code.co_freevars) or None)


class _Ctx:
    def __init__(self, events, suppress):
        self.events, self.suppress = events, suppress

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, et, ev, tb):
        self.events.append(("exit", et.__name__ if et else None))
        return self.suppress


def test_break_inside_a_user_context_resumes_and_exit_sees_the_exception():
    def f(events, x, fail, suppress):
        y = x + 1
        with _Ctx(events, suppress) as c:
            y = may_raise(y, fail)
            y = y * 2
            events.append(c.suppress)
        return y

    check_like_eager(f, [(torch.ones(2), False, False), (torch.ones(2), True, False), (torch.ones(2), True, True)])


_GLOBAL_CTX = _Ctx([], False)


def test_break_inside_a_global_user_context():
    def f(events, x, fail):
        _GLOBAL_CTX.events = events
        with _GLOBAL_CTX:
            y = may_raise(x.cos(), fail)
            y = y.sin()
        return y

    check_like_eager(f, [(torch.ones(2), False), (torch.ones(2), True)])


def test_break_inside_a_contextmanager_generator_stays_correct():
    @contextlib.contextmanager
    def cm(events):
        events.append("in")
        try:
            yield
        except ValueError:
            events.append("swallowed")
        events.append("out")

    def f(events, x, fail):
        y = x
        with cm(events):
            y = may_raise(x, fail) + 1
        return y * 2

    check_like_eager(f, [(torch.ones(2), False), (torch.ones(2), True)], min_frames=0)


# -- the exception path resumes into captured code (issue 10, must-have 4) --------------------

class _RanOps:
    """A backend recording, per run of a compiled graph, the names of its ops: which code
    ran captured on the latest call."""

    def __init__(self):
        self.ran = []

    def __call__(self, gm, example_inputs):
        names = [getattr(n.target, "__name__", str(n.target)) for n in gm.graph.nodes
                 if n.op in ("call_function", "call_method")]

        def run(*args):
            self.ran.extend(names)
            return gm.forward(*args)
        return run


def captured_on_each_case(fn, cases):
    """``fn(events, *case)`` compiled matches eager on every case (twice); returns per case
    the op names that ran in compiled graphs on its second (warm) call."""
    torchkiln.reset()
    rec = _RanOps()
    opt = torchkiln.compile(fn, backend=rec)
    out = []
    for case in cases:
        expected = _outcome(fn, *case)
        for _ in range(2):
            rec.ran.clear()
            got = _outcome(opt, *case)
            assert len(got) == len(expected) and got[0] == expected[0], (case, got, expected)
            assert same(tuple(expected[1:]), tuple(got[1:])), (case, got, expected)
        out.append(list(rec.ran))
    return out


def test_code_after_a_caught_exception_is_captured():
    def f(events, x, fail):
        y = x.sin()
        try:
            y = may_raise(y, fail)
            y = y.exp()
        except (KeyError, ValueError) as e:
            events.append(type(e).__name__)
            y = y.neg()
        return y.cos()

    ok, caught = captured_on_each_case(f, [(torch.ones(2), False), (torch.ones(2), True)])
    assert "exp" in ok and "cos" in ok
    assert "neg" in caught and "cos" in caught and "exp" not in caught


def test_uncaught_exception_type_and_finally_stay_correct():
    def f(events, x, exc):
        try:
            try:
                y = may_raise(x, exc is not None, exc or ValueError)
            except KeyError:
                events.append("inner")
                raise
            finally:
                events.append("finally")
            y = y.exp()
        except KeyError as e:
            events.append(("outer", type(e.__context__).__name__))
            y = x.neg()
        return y.cos()

    ok, key, _ = captured_on_each_case(f, [(torch.ones(2), None), (torch.ones(2), KeyError),
                                           (torch.ones(2), IndexError)])
    assert "exp" in ok and "cos" in ok


def test_break_in_a_for_body_inside_try():
    def f(events, x, bad):
        total = x * 0
        try:
            for i in range(3):
                total = total + may_raise(x + i, i == bad)
                events.append(i)
        except ValueError:
            events.append("stopped")
            total = total.neg()
        return total.cos()

    clean, stopped = captured_on_each_case(f, [(torch.ones(2), -1), (torch.ones(2), 1)])
    assert "cos" in clean and "neg" in stopped and "cos" in stopped


@contextlib.contextmanager
def _suppressing(events, exc):
    events.append("enter")
    try:
        yield 2
    except exc as e:
        events.append(("suppressed", type(e).__name__))
    finally:
        events.append("exit")


def test_break_inside_a_contextmanager_block_resumes():
    def f(events, x, exc):
        y = x.sin()
        with _suppressing(events, ValueError) as k:
            y = may_raise(y, exc is not None, exc or ValueError) * k
            y = y.exp()
        return y.cos()

    ok, suppressed, _ = captured_on_each_case(f, [(torch.ones(2), None), (torch.ones(2), ValueError),
                                                  (torch.ones(2), KeyError)])
    assert "exp" in ok and "cos" in ok
    assert "cos" in suppressed and "exp" not in suppressed


def test_nested_try_and_with_and_a_raising_exit():
    class Exit(Exception):
        pass

    class Ctx:
        def __init__(self, events, mode):
            self.events, self.mode = events, mode

        def __enter__(self):
            return self

        def __exit__(self, et, ev, tb):
            self.events.append(("exit", et and et.__name__))
            if self.mode == "raise" and et is not None:
                raise Exit("from __exit__")
            return self.mode == "suppress"

    def f(events, x, fail, mode):
        y = x + 1
        try:
            with Ctx(events, mode):
                with _suppressing(events, KeyError):
                    y = may_raise(y, fail)
                    y = y.exp()
                y = y * 2
        except Exit as e:
            events.append(("caught", type(e.__context__).__name__))
            y = y.neg()
        except ValueError:
            events.append("value")
        return y.cos()

    cases = [(torch.ones(2), f, m) for f in (False, True) for m in ("suppress", "raise", "pass")]
    runs = captured_on_each_case(f, cases)
    assert all("cos" in ran for ran in runs), runs


def test_handler_and_resume_codes_pass_the_verifier():
    from torchkiln.capture.resume import _cache
    from torchkiln.capture.verify import verify_code

    test_nested_try_and_with_and_a_raising_exit()
    assert any(c.co_name.startswith("torchkiln_handle_in_") for c in _cache.values())
    for code in _cache.values():
        verify_code(code, tuple(__import__("types").CellType() for _ in code.co_freevars) or None)
