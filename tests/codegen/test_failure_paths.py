"""Every failure path of the code generator is safe (issue 11, must-have 4).

A kernel that fails to compile (g++, Triton) makes its graph run its ATen ops eagerly,
with one warning naming the graph's ops and the compiler's message (``codegen.config.debug``
raises instead); a damaged cached .so (truncated, bit-flipped, empty) is rebuilt, never
mapped (a truncated .so used to kill the next process with SIGBUS).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln.codegen import compile_fx_inner, config
from torchkiln.codegen.cpp import build


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _corrupt(path, how):
    data = open(path, "rb").read()
    if how == "truncated":
        data = data[: len(data) // 3]
    elif how == "bit_flipped":
        data = bytearray(data)
        data[len(data) // 2] ^= 0x10
        data = bytes(data)
    else:
        data = b""
    tmp = f"{path}.bad"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)  # a new inode: a copy this process mapped stays intact


@pytest.mark.parametrize("how", ["truncated", "bit_flipped", "empty"])
def test_damaged_library_is_rebuilt_not_loaded(cache, how):
    """A library is copied to the path of a source never loaded in this process, damaged,
    and requested: it must be rebuilt (one warning) and work."""
    good = 'extern "C" int kiln_answer() { return 42; }\n'
    lib, path = build.start_build(good + f"// {how} 1\n").result()
    source = good + f"// {how} 2\n"
    target = build.library_path(source)
    with open(path, "rb") as f, open(target, "wb") as g:
        g.write(f.read())
    with open(target + ".sha256", "w") as f:
        f.write(build._digest(target))
    _corrupt(target, how)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lib, again = build.start_build(source).result()
    assert again == target and lib.kiln_answer() == 42
    assert [str(w.message) for w in caught if "rebuilding" in str(w.message)] == [
        f"torchkiln: cached kernel library {target} does not match its checksum; rebuilding it"]
    assert open(target + ".sha256").read() == build._digest(target)


_CHILD = textwrap.dedent("""\
    import warnings, torch, torchkiln
    warnings.simplefilter("always")
    f = lambda x: (x * 2).sin() + 1
    x = torch.arange(16.0)
    with warnings.catch_warnings(record=True) as caught:
        out = torchkiln.compile(f)(x)
    assert torch.allclose(out, f(x))
    print("REBUILT", sum("rebuilding" in str(w.message) for w in caught))
""")


def test_truncated_library_in_the_cache_does_not_kill_the_next_process(cache):
    """The parent builds the library (the same source as the child's), truncates it;
    a new process must rebuild it, not map it."""
    import torchkiln

    f = lambda x: (x * 2).sin() + 1  # noqa: E731
    x = torch.arange(16.0)
    torchkiln.compile(f)(x)
    libs = list((cache / "cpp").glob("*.so"))
    assert libs
    for lib in libs:
        _corrupt(lib, "truncated")
    root = os.path.dirname(os.path.dirname(torchkiln.__file__))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(cache), PYTHONPATH=path)
    child = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, (child.returncode, child.stderr[-3000:])
    assert "REBUILT 1" in child.stdout
    for lib in libs:
        assert open(f"{lib}.sha256").read() == build._digest(lib)


def _inner(fn, *args):
    gm = make_fx(fn)(*args)
    return compile_fx_inner(gm, list(args))


def test_gxx_error_falls_back_with_one_warning_naming_ops_and_compiler_message(cache, monkeypatch):
    from torchkiln.codegen import cpp

    monkeypatch.setattr(cpp, "render_kernel", lambda k, sites=None: f"int broken_{k.name}( {{ ;")
    x = torch.randn(8)
    fn = lambda a: ((a + 1).sin(),)  # noqa: E731
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = _inner(fn, x)
        torch.testing.assert_close(compiled(x)[0], fn(x)[0])
        torch.testing.assert_close(compiled(x * 2)[0], fn(x * 2)[0])
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1, msgs
    assert "aten.sin.default" in msgs[0] and "aten.add.Tensor" in msgs[0] and "error:" in msgs[0]


def _interpreter():
    try:
        from torchkiln.codegen.triton.generator import interpreter_active
        return interpreter_active()
    except ImportError:
        return False


@pytest.mark.skipif(not _interpreter(), reason="needs TRITON_INTERPRET=1")
@pytest.mark.parametrize("when", ["render", "launch"])
def test_triton_error_falls_back_with_one_warning(cache, monkeypatch, when):
    """A Triton kernel that fails to build (at render time, or at its first launch as a
    CUDA kernel compiles): eager result, one warning naming the ops; debug raises."""
    from torchkiln.codegen.triton import kernel as tk

    real = tk.KernelRenderer.render_pointwise

    def broken(self):
        if when == "render":
            raise NotImplementedError("forced Triton error")
        return real(self).replace("tl.store(", "tl.no_such_store(")

    monkeypatch.setattr(tk.KernelRenderer, "render_pointwise", broken)
    x = torch.randn(8)
    fn = lambda a: ((a * 3).cos(),)  # noqa: E731
    with config.patch(cpu_backend="triton"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = _inner(fn, x)
        torch.testing.assert_close(compiled(x)[0], fn(x)[0])
        torch.testing.assert_close(compiled(x + 1)[0], fn(x + 1)[0])
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1 and "aten.cos.default" in msgs[0], msgs
    with config.patch(cpu_backend="triton", debug=True):
        with pytest.raises(Exception):
            _inner(fn, x)(x)



@pytest.mark.parametrize("stage", ["build", "lowering"])
def test_fullgraph_raises_on_a_failed_kernel_build(cache, monkeypatch, stage):
    """``fullgraph=True`` never runs a graph eagerly: a g++ error (surfacing at the first
    call, as C++ builds are asynchronous) or a lowering error raises BackendCompilerFailed
    with the compiler's message, again at the next call; without fullgraph the same graph
    falls back to eager with one warning."""
    import torchkiln
    from torchkiln.codegen import cpp
    from torchkiln.codegen import lowering
    from torchkiln.exc import BackendCompilerFailed

    if stage == "build":
        monkeypatch.setattr(cpp, "render_kernel", lambda k, sites=None: f"int broken_{k.name}( {{ ;")
        message = "error:"
    else:
        def broken(*args, **kwargs):
            raise NotImplementedError("forced lowering error")

        monkeypatch.setitem(lowering.lowerings, torch.ops.aten.sin.default, broken)
        message = "forced lowering error"
    monkeypatch.setattr(torchkiln.config, "suppress_errors", True)
    fn = lambda a: (a + 1).sin()  # noqa: E731
    x = torch.randn(8)
    torchkiln.reset()
    strict = torchkiln.compile(fn, fullgraph=True)
    for _ in range(2):
        with pytest.raises(BackendCompilerFailed, match=message):
            strict(x)
    torchkiln.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(torchkiln.compile(fn)(x), fn(x))
    assert [str(w.message) for w in caught if "fell back" in str(w.message)], [str(w.message) for w in caught]
    torchkiln.reset()


def test_kernels_on_two_devices_are_declined():
    # A graph whose kernels would touch CPU and CUDA buffers is declined before any
    # kernel is built: it runs as ATen ops, and fullgraph=True does not raise for it (a
    # "no", not a failed build).  Kernels all on the CPU in a CUDA graph (torch.ones(u0)
    # beside CUDA inputs read by extern ops only) make the graph's kernels C++ ones.
    from types import SimpleNamespace

    from torchkiln.codegen.compile_fx import UnsupportedGraph, _kernel_device

    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    graph = SimpleNamespace(buffers={"buf0": SimpleNamespace(device=cpu), "arg0": SimpleNamespace(device=cuda)})

    def kernel(name, *bufs):
        return SimpleNamespace(name=name, buffers=[SimpleNamespace(name=b) for b in bufs])

    with pytest.raises(UnsupportedGraph, match="kernels touch buffers on"):
        _kernel_device(graph, [kernel("kernel0", "arg0"), kernel("kernel1", "buf0")], cuda)
    assert _kernel_device(graph, [kernel("kernel0", "buf0")], cuda) == cpu
    assert _kernel_device(graph, [kernel("kernel0", "arg0")], cuda) == cuda
    assert _kernel_device(graph, [], cuda) == cuda
