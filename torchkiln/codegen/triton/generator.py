"""The Triton kernel generator: the fused kernels of one graph → one Python module.

The module holds a small prelude of ``@triton.jit`` helpers (Python-semantics integer
division, NaN-propagating max/min, argmax/argmin combiners), one ``@triton.jit`` kernel
per fused kernel (two for reductions: persistent and looped) and a plain-Python launcher
``<kernel>_launch(buffers..., sizes...)`` per kernel, which computes ``xnumel``/``rnumel``
and the launch grid from the sizes at run time.  The source is written to
``$TORCHKILN_CACHE_DIR/triton/<hash>.py`` and imported from there (``@triton.jit`` reads
source files through ``inspect``).

Kernels for CPU tensors run in Triton's interpreter, which is a process-wide mode:
``TRITON_INTERPRET=1`` must be set before triton is first imported (triton's own
``@jit`` library functions are built at import).  They use a numpy stand-in for
libdevice.  Without the interpreter, compiling CPU kernels raises ``RuntimeError``
(compile_fx then falls back).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys

import torch

from ...utils.paths import cache_dir
from ..generators import KernelGenerator
from .kernel import KernelRenderer

PRELUDE = '''\
import math  # launchers compute sizes with printers.pexpr (math.ceil, math.floor...)

import triton
import triton.language as tl
{libdevice_import}
from torchkiln.codegen.triton import runtime as _rt

INTERPRET = {interpret}


if INTERPRET:  # tl.device_assert is a no-op in the interpreter: raise from Python
    kiln_check_index = _rt.interpret_check_index
else:
    @triton.jit
    def kiln_check_index(raw, idx, size, mask, MSG: tl.constexpr, OP: tl.constexpr, DIM: tl.constexpr):
        ok = (idx >= 0) & (idx < size)
        tl.device_assert(ok, MSG, mask=mask)
        return tl.where(ok, idx, 0)


@triton.jit
def kiln_floordiv(a, b):
    q = tl.abs(a) // tl.abs(b)
    r = tl.abs(a) % tl.abs(b)
    return tl.where((a < 0) != (b < 0), -q - (r != 0).to(q.dtype), q)


@triton.jit
def kiln_truncdiv(a, b):
    q = tl.abs(a) // tl.abs(b)
    return tl.where((a < 0) != (b < 0), -q, q)


@triton.jit
def kiln_mod(a, b):
    r = tl.abs(a) % tl.abs(b)
    r = tl.where(a < 0, -r, r)
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def kiln_fremainder(a, b):
    r = libdevice.fmod(a, b)
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def kiln_maximum(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def kiln_minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def kiln_prod(a, b):
    return a * b


@triton.jit
def kiln_argmax(a, ai, b, bi):
    a_nan = a != a
    b_nan = b != b
    better = (a > b) | (a_nan & ~b_nan)
    tie = ((a == b) | (a_nan & b_nan)) & (ai <= bi)
    pick = better | tie
    return tl.where(pick, a, b), tl.where(pick, ai, bi)


@triton.jit
def kiln_argmin(a, ai, b, bi):
    a_nan = a != a
    b_nan = b != b
    better = (a < b) | (a_nan & ~b_nan)
    tie = ((a == b) | (a_nan & b_nan)) & (ai <= bi)
    pick = better | tie
    return tl.where(pick, a, b), tl.where(pick, ai, bi)
'''


def interpreter_active() -> bool:
    """Whether triton was imported in interpreter mode (``TRITON_INTERPRET=1``)."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.zeros, InterpretedFunction)


def load_module(source: str):
    """Write ``source`` to the cache (by content hash) and import it."""
    key = hashlib.sha256(source.encode()).hexdigest()[:32]
    name = f"torchkiln_triton_{key}"
    if name in sys.modules:
        return sys.modules[name]
    directory = cache_dir("triton")
    path = os.path.join(directory, f"{key}.py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


class TritonGenerator(KernelGenerator):
    """Kernel generator for CUDA tensors, and for CPU tensors under Triton's interpreter."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        from triton.compiler.errors import CompilationError
        from triton.runtime.errors import OutOfResources
        from triton.runtime.interpreter import InterpreterError

        self.launch_errors = (CompilationError, OutOfResources, InterpreterError)
        # CPU tensors need the interpreter; CUDA tensors run under it too if the user set it.
        self.interpret = device.type == "cpu" or interpreter_active()
        self._source = ""
        self._launchers: list[str] = []

    def render(self, kernels: list) -> str:
        """The module source for ``kernels``."""
        libdevice = ("from torchkiln.codegen.triton import interpret_libdevice as libdevice" if self.interpret
                     else "from triton.language.extra import libdevice")
        parts = [PRELUDE.format(libdevice_import=libdevice, interpret=self.interpret)]
        parts += [KernelRenderer(k).render() for k in kernels]
        return "\n\n".join(parts) + "\n"

    def compile_kernels(self, kernels: list) -> dict:
        if not kernels:
            return {}
        if self.device.type == "cpu" and not interpreter_active():
            raise RuntimeError("Triton kernels for CPU tensors need TRITON_INTERPRET=1 set before triton is imported")
        self._source = self.render(kernels)
        module = load_module(self._source)
        self._launchers = [f"{k.name}_launch" for k in kernels]
        return {f"{k.name}_launch": getattr(module, f"{k.name}_launch") for k in kernels}

    def cache_artifacts(self) -> tuple[dict, dict]:
        """For the FX graph cache, after ``compile_kernels``: the module source and the
        launcher names (Triton's compiled binaries stay in Triton's own cache)."""
        return {"launchers": list(self._launchers)}, {"source": self._source.encode()}

    def call(self, kernel, args: list[str]) -> str:
        return f"{kernel.name}_launch({', '.join(args)})"

    def source(self) -> str:
        return self._source


def load_cached_kernels(meta: dict, blobs: dict) -> dict:
    """The launchers of an FX graph cache entry made by ``cache_artifacts`` (the module
    is imported from its cached source; nothing is rendered)."""
    if not meta["launchers"]:
        return {}
    module = load_module(blobs["source"].decode())
    return {name: getattr(module, name) for name in meta["launchers"]}
