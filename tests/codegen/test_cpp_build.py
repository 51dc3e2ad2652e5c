"""Asynchronous C++ builds: a compiled graph returns before g++ finishes and waits for
it at its first call; a failed build runs the graph eagerly with one warning; the
backward graph is compiled (and built) together with the forward; concurrent builds
of one source, in one process or several, compile it once.  Eager PyTorch is the
oracle for every result.  A gated compiler script (g++ once a file exists) makes
"still building" a fact of the test, not of timing."""
from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln.codegen import compile_fx_inner, config, cpp, metrics
from torchkiln.utils.counters import counters

compile_fx_module = importlib.import_module("torchkiln.codegen.compile_fx")  # the package exports a function so named


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def gated_cxx(tmp_path):
    """A compiler that runs g++ only once ``gate`` exists: ``(config patch, gate path)``."""
    gate = tmp_path / "gate"
    script = tmp_path / "gated-g++"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" != "--version" ]; then
            while [ ! -e {gate} ]; do sleep 0.01; done
        fi
        exec g++ "$@"
    """))
    script.chmod(0o755)
    yield config.patch(cpp_cxx=str(script), fx_graph_cache=False), gate  # the build itself, not the FX graph cache
    gate.touch()  # a failed test must not leave a build waiting (exit joins the build threads)


def _inner(fn, *args):
    gm = make_fx(fn)(*args)
    return compile_fx_inner(gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])


def test_first_call_waits_for_the_build_then_calls_the_wrapper_directly(cache, gated_cxx):
    patch, gate = gated_cxx
    x = torch.randn(5, 7)
    fn = lambda a: (torch.softmax(a * 1.5, -1), a.cos().sum(0))  # noqa: E731
    with patch:
        compiled = _inner(fn, x)
        assert compiled.current_callable == compiled._finish_then_call  # g++ is waiting on the gate
        gate.touch()
        out = compiled(x)
    for a, b in zip(out, fn(x)):
        torch.testing.assert_close(a, b)
    assert compiled.current_callable.__name__ == "call"  # the wrapper itself: no per-call cost
    torch.testing.assert_close(compiled(x * 2)[1], (x * 2).cos().sum(0))


def test_cache_hit_is_bound_at_compile_time(cache):
    x = torch.randn(6)
    fn = lambda a: (a.abs() * 2.75,)  # noqa: E731
    _inner(fn, x)(x)
    compiled = _inner(fn, x)
    assert compiled.current_callable.__name__ == "call"
    torch.testing.assert_close(compiled(x)[0], fn(x)[0])


def test_one_source_in_flight_twice_builds_once(cache, gated_cxx):
    patch, gate = gated_cxx
    x = torch.randn(4, 3)
    fn = lambda a: ((a * 0.5).exp(),)  # noqa: E731
    misses, hits = counters["inductor"]["cpp_cache_miss"], counters["inductor"]["cpp_cache_hit"]
    with patch:
        first, second = _inner(fn, x), _inner(fn, x)
        gate.touch()
        torch.testing.assert_close(second(x)[0], fn(x)[0])
        torch.testing.assert_close(first(x)[0], fn(x)[0])
    assert counters["inductor"]["cpp_cache_miss"] == misses + 1
    assert counters["inductor"]["cpp_cache_hit"] == hits + 1
    assert len(list((cache / "cpp").glob("*.so"))) == 1


def test_broken_build_falls_back_to_eager_with_one_warning_at_first_call(cache, gated_cxx, monkeypatch):
    patch, gate = gated_cxx
    monkeypatch.setattr(cpp, "render_kernel", lambda k, sites=None: f"this is not C++ {k.name};")
    x = torch.randn(8)
    fn = lambda a: ((a + 1).sin(),)  # noqa: E731
    metrics.reset()
    with warnings.catch_warnings(record=True) as caught, patch:
        warnings.simplefilter("always")
        compiled = _inner(fn, x)
        assert not caught  # the failure is not known yet
        gate.touch()
        out = compiled(x)
        torch.testing.assert_close(compiled(x * 3)[0], fn(x * 3)[0])
    torch.testing.assert_close(out[0], fn(x)[0])
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert "fell back to eager" in str(caught[0].message) and "C++ compile failed" in str(caught[0].message)
    assert metrics.eager_fallbacks == 1


def test_broken_build_raises_at_first_call_under_debug(cache, gated_cxx, monkeypatch):
    patch, gate = gated_cxx
    monkeypatch.setattr(cpp, "render_kernel", lambda k, sites=None: f"still not C++ {k.name};")
    x = torch.randn(8)
    with config.patch(debug=True), patch:
        compiled = _inner(lambda a: (a.tanh() * 3,), x)
    gate.touch()
    with pytest.raises(RuntimeError, match="C\\+\\+ compile failed"):
        compiled(x)


def _counting_inner(monkeypatch):
    calls = []
    real = compile_fx_module.compile_fx_inner

    def counting(gm, example_inputs, **kwargs):
        calls.append(gm)
        return real(gm, example_inputs, **kwargs)

    monkeypatch.setattr(compile_fx_module, "compile_fx_inner", counting)
    return calls


def test_backward_is_compiled_with_the_forward(cache, monkeypatch):
    calls = _counting_inner(monkeypatch)
    torchkiln.reset()
    lin = torch.nn.Linear(6, 4)
    fn = torchkiln.compile(lambda x: torch.softmax(lin(x), -1))
    x = torch.randn(3, 6, requires_grad=True)
    out = fn(x)
    assert len(calls) == 2  # forward and backward, before any .backward()
    out.pow(2).sum().backward()
    assert len(calls) == 2
    grads = [x.grad, lin.weight.grad]
    lin.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    torch.softmax(lin(x2), -1).pow(2).sum().backward()
    torch.testing.assert_close(out, torch.softmax(lin(x2), -1))
    torch.testing.assert_close(grads, [x2.grad, lin.weight.grad])


def test_no_backward_is_compiled_under_no_grad(cache, monkeypatch):
    calls = _counting_inner(monkeypatch)
    torchkiln.reset()
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.LayerNorm(5))
    compiled = torchkiln.compile(model)
    x = torch.randn(4, 6)
    with torch.no_grad():
        out = compiled(x)
        ref = model(x)
    assert len(calls) == 1
    torch.testing.assert_close(out, ref)


_SCRIPT = textwrap.dedent("""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from torchkiln.codegen import compile_fx_inner
    from torchkiln.utils.counters import counters
    x = torch.randn(11, 5)
    gm = make_fx(lambda a: ((a * 1.25).sigmoid().sum(-1),))(x)
    out = compile_fx_inner(gm, [x])(x)[0]
    assert torch.allclose(out, (x * 1.25).sigmoid().sum(-1), atol=1e-6)
    print("HITS", counters["inductor"]["cpp_cache_hit"], "MISSES", counters["inductor"]["cpp_cache_miss"])
""")


def test_two_processes_building_one_source_compile_it_once(cache):
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", _SCRIPT], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    lines = sorted(out.strip().splitlines()[-1] for out, _ in outs)
    assert lines == ["HITS 0 MISSES 1", "HITS 1 MISSES 0"], lines  # the loser waited on the lock


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_child_forked_during_a_build_builds_for_itself(cache, gated_cxx):
    patch, gate = gated_cxx
    x = torch.randn(9)
    fn = lambda a: ((a * 4).sin() - a,)  # noqa: E731
    with patch:
        compiled = _inner(fn, x)
    pid = os.fork()
    if pid == 0:  # the parent's build thread does not exist here
        code = 1
        try:
            gate.touch()
            code = 0 if torch.allclose(compiled(x)[0], fn(x)[0]) else 2
        finally:
            os._exit(code)
    for _ in range(1200):  # a hung child fails the test instead of hanging it
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child did not finish")
    assert os.waitstatus_to_exitcode(status) == 0
    torch.testing.assert_close(compiled(x)[0], fn(x)[0])
