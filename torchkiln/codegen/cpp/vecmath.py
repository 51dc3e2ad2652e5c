"""Vectorized math for the C++ kernels through glibc's libmvec.

Without ``-ffast-math`` GCC calls scalar ``expf``/``erff``... inside ``omp simd`` loops,
which makes softmax or GELU several times slower than ATen's vectorized kernels.
Declaring the math functions ``omp declare simd`` lets GCC call libmvec's vector
variants (``_ZGVdN8v_expf``...; at most 4 ulp, like ATen's Sleef ``u10`` kernels),
without changing any other floating-point semantics.  A function is declared only
when libmvec on this host has its variants for every x86 ISA level (SSE..AVX-512), so
the declarations never reference a missing symbol.

``sin`` and ``cos`` are called as the C functions (``kiln::sin``/``kiln::cos`` in the
prelude) and built with ``-fno-builtin-sin*``/``-fno-builtin-cos*``: as builtins, GCC
merges ``sin(x)`` and ``cos(x)`` of one value into a scalar ``sincos`` call and gives
up vectorizing the loop (every backward of ``sin`` has both).
"""
from __future__ import annotations

import ctypes
import functools
import platform

UNARY = ("exp log sin cos tan tanh erf erfc expm1 log1p log2 log10 exp2 asin acos atan "
         "sinh cosh asinh acosh atanh").split()
BINARY = ("pow", "atan2", "hypot")
_ISA_FLOAT = (("b", 4), ("c", 8), ("d", 8), ("e", 16))
_ISA_DOUBLE = (("b", 2), ("c", 4), ("d", 4), ("e", 8))


@functools.lru_cache(None)
def declarations() -> tuple[str, bool]:
    """(C++ declarations, whether to link ``-lmvec``); empty where libmvec is missing."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return "", False
    try:
        lib = ctypes.CDLL("libmvec.so.1")
    except OSError:
        return "", False
    lines = []
    for name in UNARY + list(BINARY):
        arity = "vv" if name in BINARY else "v"
        params = "float, float" if name in BINARY else "float"
        dparams = "double, double" if name in BINARY else "double"
        if all(hasattr(lib, f"_ZGV{isa}N{n}{arity}_{name}f") for isa, n in _ISA_FLOAT):
            lines.append(f'#pragma omp declare simd notinbranch\nextern "C" float {name}f({params}) noexcept CONST;')
        if all(hasattr(lib, f"_ZGV{isa}N{n}{arity}_{name}") for isa, n in _ISA_DOUBLE):
            lines.append(f'#pragma omp declare simd notinbranch\nextern "C" double {name}({dparams}) noexcept CONST;')
    text = "\n".join(lines).replace("CONST", "__attribute__((const))")
    return text, bool(lines)
