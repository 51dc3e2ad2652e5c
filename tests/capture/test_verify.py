"""The code-object verifier: hand-made broken code objects are refused, never run."""
from __future__ import annotations

import types
import warnings

import pytest
import torch

import torchkiln
from torchkiln.capture import resume
from torchkiln.capture.verify import InvalidCode, verify_code


def _sample(x):
    try:
        y = [x, x + 1, (x, x * 2)]
    except TypeError:
        y = None
    return y


def _closure_sample():
    a = 1

    def inner():
        return a
    return inner


def test_real_code_passes():
    verify_code(_sample.__code__)
    inner = _closure_sample()
    verify_code(inner.__code__, inner.__closure__)
    verify_code(verify_code.__code__)


@pytest.mark.parametrize("module", ["contextlib", "functools", "collections", "dis", "asyncio.tasks", "argparse"])
def test_compiler_made_code_passes(module):
    """No false alarm on what CPython's own compiler emits (generators, coroutines,
    with/try/except*, comprehensions, closures), on 3.11 and 3.12."""
    import importlib

    mod = importlib.import_module(module)
    top = compile(open(mod.__file__, encoding="utf-8").read(), mod.__file__, "exec")

    def walk(code):
        yield code
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                yield from walk(const)

    for code in walk(top):
        verify_code(code, tuple(types.CellType() for _ in code.co_freevars) or None)


def test_stacksize_too_small_is_refused():
    bad = _sample.__code__.replace(co_stacksize=1)
    with pytest.raises(InvalidCode, match="co_stacksize"):
        verify_code(bad)


def test_exception_table_depth_is_checked():
    table = bytearray(_sample.__code__.co_exceptiontable)
    # the entry's depth/lasti byte is the last varint of the first entry: make it deeper
    # than the stack ever is where the entry applies
    table[3] = (10 << 1) | (table[3] & 1)
    bad = _sample.__code__.replace(co_exceptiontable=bytes(table))
    with pytest.raises(InvalidCode):
        verify_code(bad)


def test_exception_table_range_outside_code():
    bad = _sample.__code__.replace(co_exceptiontable=bytes([0x80 | 0x3f, 0x3f, 0, 0]))
    with pytest.raises(InvalidCode):
        verify_code(bad)


def test_closure_must_match_free_variables():
    inner = _closure_sample()
    with pytest.raises(InvalidCode, match="free variables"):
        verify_code(inner.__code__, None)
    with pytest.raises(InvalidCode, match="not a cell"):
        verify_code(inner.__code__, (1,))


def test_local_index_out_of_range():
    code = _sample.__code__
    raw = bytearray(code.co_code)
    import dis
    first = next(i for i in dis.get_instructions(code) if i.opname == "LOAD_FAST")
    raw[first.offset + 1] = 200
    with pytest.raises(InvalidCode, match="locals|decode"):
        verify_code(code.replace(co_code=bytes(raw)))


def test_broken_line_table():
    bad = _sample.__code__.replace(co_linetable=b"\xff" * 3)
    with pytest.raises(InvalidCode):
        verify_code(bad)


def test_resume_function_failing_verification_runs_eagerly(monkeypatch):
    """A resume function whose code fails the check is not run: the frame runs
    eagerly, with one warning, and the result is eager's."""
    real_verify = resume.verify_code

    def refuse(code, closure=None):
        real_verify(code, closure)
        raise InvalidCode("refused by the test")

    monkeypatch.setattr(resume, "verify_code", refuse)
    resume._cache.clear()

    def f(xs):
        xs.append(1)
        torchkiln.graph_break()
        xs.append(2)
        return len(xs)

    xs = []
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = torchkiln.compile(f, backend="eager")(xs)
    assert out == 2 and xs == [1, 2]
    assert sum("failed verification" in str(x.message) for x in w) == 1
    resume._cache.clear()


def _long_columns(x, tag=None):
    y = x + 1
    torchkiln.graph_break()
    m = str(
                                                                                                                                        tag)  # noqa: E501 - column 136, one line below
    return y * 2, m


def test_resume_after_columns_past_127_keeps_its_lines():
    """The bytecode library encodes columns 128..255 one or two lines down in a form
    CPython misreads (shifted lines, a line range past the code: transformers'
    ``deprecate_kwarg`` wrapper was refused); resume code drops those columns instead."""
    torchkiln.reset()
    code = _long_columns.__code__
    assert any((c or 0) >= 128 for _, _, c, _ in code.co_positions())
    x = torch.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a verification failure warns
        got = torchkiln.compile(_long_columns, backend="eager")(x)
    assert torch.equal(got[0], _long_columns(x)[0]) and got[1] == "None"
    made = [c for c in resume._cache.values() if c.co_name.startswith("torchkiln_resume_in__long_columns")]
    assert made
    for c in made:
        verify_code(c, resume._placeholder_closure(c))
        lines = {line for _, _, line in c.co_lines() if line is not None}
        assert lines <= set(range(code.co_firstlineno, code.co_firstlineno + 6))
