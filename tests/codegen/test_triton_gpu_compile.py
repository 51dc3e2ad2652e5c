"""The CUDA rendering of Triton kernels compiles for a real GPU target, without a GPU.

Triton compiles ahead of time for a given ``GPUTarget`` (here sm_90) down to PTX/cubin
with no device present.  A worker process (Triton's interpreter must be off, so it is a
subprocess) lowers the op cases of ``test_ops.py`` on CPU, renders every fused kernel as
the CUDA generator would (real ``libdevice``), and compiles each ``@triton.jit`` function
(pointwise; persistent and looped reductions; int32 and int64 indexing).  This catches
what the interpreter accepts but the compiler rejects (types, constexprs, shapes); it
does not run the kernels — the GPU run of the suite does that.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton")

INDEX64_TOO = os.environ.get("KILN_COMPILE_IDX64") == "1"  # also the int64-index variants
HERE = os.path.dirname(os.path.abspath(__file__))
_TL_SIG = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float64: "*fp64",
           torch.int8: "*i8", torch.int16: "*i16", torch.int32: "*i32", torch.int64: "*i64", torch.uint8: "*u8",
           torch.bool: "*i1"}


def _compile_kernels(kernels, failures):
    """Render ``kernels`` for CUDA and compile each jit function for sm_90."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from torchkiln.codegen.triton.generator import TritonGenerator, load_module

    gen = TritonGenerator(torch.device("cuda"))
    source = gen.render(kernels)
    module = load_module(source)
    # the launcher compiles kernels with index checks with debug on (tl.device_assert)
    options = {"debug": True, "sanitize_overflow": False} if "kiln_check_index(" in source.split("def kiln_check")[-1] else None
    from torchkiln.codegen.triton.kernel import KernelRenderer

    for k in kernels:
        names = [k.name] if not k.reduction_ranges else [f"{k.name}_persistent", f"{k.name}_looped"]
        params = KernelRenderer(k).canonical_names()  # the jit functions' parameter names
        for name in names:
            sig = {params[b.name]: _TL_SIG[b.dtype] for b in k.buffers}
            sig.update({str(s): "i64" for s in k.size_args})
            sig["xnumel"] = "i32"
            constexprs = {"XBLOCK": 8, "IDX64": False}
            if k.reduction_ranges:
                sig["rnumel"] = "i32"
                constexprs["RBLOCK"] = 64
            for idx64 in (False, True) if INDEX64_TOO else (False,):
                constexprs["IDX64"] = idx64
                full = dict(sig)
                full.update({c: "constexpr" for c in constexprs})
                try:
                    triton.compile(ASTSource(fn=getattr(module, name), signature=full, constexprs=dict(constexprs)),
                                   target=GPUTarget("cuda", 90, 32), options=options)
                except Exception as e:  # noqa: BLE001 - reported by the parent test
                    failures.append(f"{name} (IDX64={idx64}): {type(e).__name__}: {str(e).strip()[:400]}")
                    break


def worker(case_names):
    """Lower each case (forward, and backward kernels via aot) and compile its kernels."""
    sys.path.insert(0, HERE)
    import test_ops
    from torch.fx.experimental.proxy_tensor import make_fx

    import torchkiln.codegen as codegen
    from torchkiln.codegen.triton import generator as gen_mod

    failures: list[str] = []
    seen = [0]

    def record(self, kernels):
        seen[0] += len(kernels)
        _compile_kernels(kernels, failures)
        raise _Done()

    gen_mod.TritonGenerator.start_compile = record
    for name in case_names:
        c = test_ops.CASE_BY_NAME[name]
        for dtype in c.dtypes:
            xs = test_ops._make_inputs(c, dtype, "cpu")
            gm = make_fx(lambda *a: test_ops._as_tuple(c.fn(*a)), decomposition_table=test_ops._decompositions(),
                         tracing_mode="fake")(*xs)
            fakes = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
            with codegen.config.patch(cpu_backend="triton", debug=True):
                try:
                    codegen.compile_fx_inner(gm, fakes)
                except _Done:
                    pass
                except Exception as e:  # noqa: BLE001
                    failures.append(f"{name}/{dtype}: lowering failed: {type(e).__name__}: {e}")
    printer_kernels = _printer_kernels()
    seen[0] += len(printer_kernels)
    _compile_kernels(printer_kernels, failures)
    print(f"compiled kernels of {seen[0]} fused kernels")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


class _Done(Exception):
    pass


def _printer_kernels():
    """Kernels storing size expressions that need the Python-semantics helpers
    (``kiln_floordiv``/``kiln_mod`` with literal divisors, Min/Max, Abs, math on SymInts)."""
    import sympy
    from torch.utils._sympy.functions import (CeilDiv, FloatPow, FloorDiv, FloorToInt, OpaqueUnaryFn_sqrt, PythonMod,
                                              ToFloat)

    from torchkiln.codegen import ir

    (x0,) = ir.index_vars("x", 1)
    s0, s1 = (sympy.Symbol(n, integer=True, positive=True) for n in ("s0", "s1"))
    exprs = [FloorDiv(s0 - 7, 2), PythonMod(s0 - 7, 3), CeilDiv(s0, 2), sympy.Min(s0, s1) + sympy.Max(s0 - 10, s1),
             sympy.Abs(s0 - s1), FloorToInt(OpaqueUnaryFn_sqrt(ToFloat(s0)) * 10), FloorDiv(x0 - s0, s1),
             FloorToInt(FloatPow(ToFloat(s0), sympy.Float(0.5)) * 10)]  # a float literal into libdevice (fp64)
    return [ir.FusedKernel(f"size_expr{i}", torch.device("cuda"), [3], [], [x0], [],
                           [ir.Loop(False, [ir.Store("out", x0, ir.IndexValue(e, torch.int64))])],
                           [ir.BufferArg("out", torch.int64, True)], [s0, s1]) for i, e in enumerate(exprs)]


# A representative subset (every case of test_ops.py compiled when this was written;
# run ``python tests/codegen/test_triton_gpu_compile.py <case names...>`` for others).
CASES = ["gelu", "rounding", "int_ops", "remainder_fmod", "compare", "argmax_argmin", "any_all", "prod",
         "softmax", "layer_norm", "gather", "index_put_acc", "embedding", "constant_pad", "to_half", "isnan_isinf"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU run compiles and runs the kernels for real")
def test_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    proc = subprocess.run([sys.executable, __file__, *CASES], env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "compiled kernels of" in out


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1:]))
