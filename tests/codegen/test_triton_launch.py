"""The GPU launch path of Triton kernels: launchers bound once per specialization, the
static launch config, precompile jobs, and (on a GPU) the compile pool."""
from __future__ import annotations

import pytest
import sympy
import torch

pytest.importorskip("triton")

from torchkiln.codegen import ir  # noqa: E402
from torchkiln.codegen.triton.kernel import KernelRenderer  # noqa: E402
from torchkiln.codegen.triton.runtime import int_spec  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _pointwise(n, size_args=()):
    (x0,) = ir.index_vars("x", 1)
    load = ir.Load("in0", x0, torch.float32)
    body = ir.Op("add", (load, load), torch.float32)
    return ir.FusedKernel(
        name="kernel0", device=torch.device("cuda"), ranges=[n], reduction_ranges=[], index_vars=[x0],
        reduction_vars=[], loops=[ir.Loop(False, [ir.Store("buf0", x0, body)])],
        buffers=[ir.BufferArg("in0", torch.float32, False), ir.BufferArg("buf0", torch.float32, True)],
        size_args=list(size_args), size_hints={s: 100 for s in size_args})


def test_int_spec_matches_triton_specialization():
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    backend = make_backend(GPUTarget("cuda", 90, 32))
    seen = {}
    for v in (1, 2, 15, 16, 17, 32, 2**31 - 1, 2**31, 2**31 + 16, 2**40):
        spec = native_specialize_impl(backend, v, False, True, True)
        # one key per Triton specialization, never two specializations per key
        assert seen.setdefault(int_spec(v), spec) == spec, v


def test_static_launcher_has_literal_config():
    r = KernelRenderer(_pointwise(sympy.Integer(4096)))
    src = r.render(interpret=False)
    assert "kernel0_L = _rt.Launcher(kernel0)" in src
    assert "    XBLOCK = 1024" in src and "    grid = 4" in src and "_rt.needs_int64" not in src
    assert "launch(grid, _cu[1]," in src
    (job,) = r.precompile_jobs({})
    assert job[0] == "kernel0" and job[1][-3:] == (4096, 1024, False) and job[2] == {"num_warps": 4}
    # the interpreter's launcher is unchanged: fn[grid](...)
    assert "(kernel0)[(grid,)](" in r.render(interpret=True)


def test_dynamic_launcher_keys_on_specialization():
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    r = KernelRenderer(_pointwise(s0, [s0]))
    src = r.render(interpret=False)
    assert "_rt.int_spec(xnumel)" in src and "(s0) > 0x7fffffff" in src and "pointwise_config(xnumel" in src
    (job,) = r.precompile_jobs({})  # from the size hint
    assert job[1][2:] == (100, 100, 128, False)


@cuda
def test_misaligned_views_and_many_shapes_on_gpu():
    import torchkiln

    f = torchkiln.compile(lambda a, b: (a * 2 + b).relu(), dynamic=False)
    base = torch.randn(4097, device="cuda")
    for off in (0, 1, 4):  # data_ptr % 16 differs: another binding, same results
        a, b = base[off:off + 4000], base[:4000]
        torch.testing.assert_close(f(a, b), (a * 2 + b).relu())


@cuda
def test_compile_pool_compiles_ahead(tmp_path, monkeypatch):
    from torchkiln.codegen.triton import compile_pool, generator
    from triton.runtime.driver import driver

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))

    r = KernelRenderer(_pointwise(sympy.Integer(4096)))
    source = generator.PRELUDE.format(libdevice_import="from triton.language.extra import libdevice",
                                      interpret=False) + "\n\n" + r.render(interpret=False) + "\n"
    generator.load_module(source)
    jobs = r.precompile_jobs({}) * max(compile_pool.MIN_JOBS_TO_START, compile_pool.MIN_JOBS_WHILE_STARTING)
    compile_pool.precompile(generator.module_path(source), jobs, driver.active.get_current_target()).result(timeout=300)
    from torchkiln.utils.counters import counters

    saved = counters["inductor"]["triton_cache_saved"]  # process-wide: earlier tests count too
    module = generator.load_module(source)
    x = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    module.kernel0_launch(x, out)
    torch.testing.assert_close(out, x + x)
    # the worker compiled where the parent looks: Triton's directory, or the store (then
    # the parent's launch loads the worker's binary and compiles nothing of its own)
    assert any(tmp_path.rglob("*.cubin")) or counters["inductor"]["triton_cache_saved"] == saved


def test_static_launcher_argument_codes():
    from torchkiln.codegen.triton import static_launcher as sl

    sig = {"in_ptr0": "*fp32", "out_ptr1": "*bf16", "s0": "i64", "xnumel": "i32", "XBLOCK": "constexpr", "f": "fp32"}
    assert sl.arg_codes(sig) == b"pplicf"
    assert sl.arg_codes({"x": "fp16"}) is None  # half scalars: Triton's launcher packs them

    class Md:
        num_ctas, launch_cooperative_grid, launch_pdl = 1, False, False
        global_scratch_size = profile_scratch_size = 0

    class Kernel:
        metadata = Md()

        class src:
            signature = sig

    assert sl.supported(Kernel()) == b"pplicf"
    Md.global_scratch_size = 128  # needs scratch memory: Triton's launcher allocates it
    assert sl.supported(Kernel()) is None


def test_static_launcher_source_builds(tmp_path):
    """The launcher's C source compiles against Triton's cuda.h (no GPU needed to build)."""
    import os
    import shutil
    import subprocess
    import sysconfig

    import triton

    from torchkiln.codegen.triton import static_launcher as sl

    cc = shutil.which("gcc") or shutil.which("cc")
    include = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "include")
    if cc is None or not os.path.exists(os.path.join(include, "cuda.h")):
        pytest.skip("needs a C compiler and Triton's CUDA headers")
    src = tmp_path / "kiln_launcher.c"
    src.write_text(sl.SOURCE)
    subprocess.run([cc, str(src), "-O1", "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(tmp_path / "k.so"),
                    f"-I{include}", f"-I{sysconfig.get_paths()['include']}"], check=True, capture_output=True)


def test_canonical_names_leave_triton_attributes_alone():
    # a buffer named like a triton.language function (nanoGPT's backward reads a saved
    # `arange`): the jit function's parameter is renamed, `tl.arange` is not
    (x0,) = ir.index_vars("x", 1)
    k = ir.FusedKernel(
        name="kernel0", device=torch.device("cuda"), ranges=[sympy.Integer(64)], reduction_ranges=[], index_vars=[x0],
        reduction_vars=[], loops=[ir.Loop(False, [ir.Store("buf0", x0, ir.Load("arange", x0, torch.int64))])],
        buffers=[ir.BufferArg("arange", torch.int64, False), ir.BufferArg("buf0", torch.int64, True)], size_args=[])
    (name, src), = KernelRenderer(k).render_parts(interpret=False)[0]
    assert "tl.arange(0, XBLOCK)" in src and "tl.load(in_ptr0 + " in src and "arange," not in src


def test_empty_launch_hook_chain_is_no_hook():
    # Triton 3.5+ keeps launch hooks in a HookChain that is never None: only a chain with
    # hooks in it sends launches through the (slower) hooked path
    from torchkiln.codegen.triton.runtime import _hooks_active

    class Chain:
        def __init__(self, calls):
            self.calls = calls

    assert not _hooks_active(None) and not _hooks_active(Chain([]))
    assert _hooks_active(Chain([print])) and _hooks_active(print)
