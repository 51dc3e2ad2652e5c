"""The Triton kernel generator: the fused kernels of one graph → one Python module.

The module holds a small prelude of ``@triton.jit`` helpers (Python-semantics integer
division, NaN-propagating max/min, argmax/argmin combiners), one ``@triton.jit`` kernel
per fused kernel (two for reductions: persistent and looped) and a plain-Python launcher
``<kernel>_launch(buffers..., sizes...)`` per kernel, which computes ``xnumel``/``rnumel``
and the launch grid from the sizes at run time.  The source is written to
``$TORCHKILN_CACHE_DIR/triton/<hash>.py`` and imported from there (``loader.py``, which
also loads FX graph cache entries without importing this module).

Kernels for CPU tensors run in Triton's interpreter, which is a process-wide mode:
``TRITON_INTERPRET=1`` must be set before triton is first imported (triton's own
``@jit`` library functions are built at import).  They use a numpy stand-in for
libdevice.  Without the interpreter, compiling CPU kernels raises ``RuntimeError``
(compile_fx then falls back).
"""
from __future__ import annotations

import concurrent.futures

import torch

from ..generators import KernelGenerator
from . import compile_pool
from .kernel import KernelRenderer
from .loader import load_cached_kernels, load_module, module_path, objects as _objects  # noqa: F401

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


# Integer values (not indices): Triton's ``//`` and ``%`` truncate as C's; the divisor -1
# is replaced by 1 and the quotient negated (INT_MIN // -1 overflows), so INT_MIN and
# wrapped products divide as ATen's (the abs-based helpers above made abs(INT_MIN) < 0).
@triton.jit
def kiln_ivalue_floordiv(a, b):
    d = tl.where(b == -1, 1, b)
    q = a // d
    r = a % d
    q = tl.where((r != 0) & ((r < 0) != (d < 0)), q - 1, q)
    return tl.where(b == -1, 0 - a, q)


@triton.jit
def kiln_ivalue_truncdiv(a, b):
    d = tl.where(b == -1, 1, b)
    return tl.where(b == -1, 0 - a, a // d)


@triton.jit
def kiln_ivalue_mod(a, b):
    d = tl.where(b == -1, 1, b)
    r = a % d
    return tl.where((r != 0) & ((r < 0) != (d < 0)), r + d, r)


@triton.jit
def kiln_ivalue_fmod(a, b):
    return a % tl.where(b == -1, 1, b)


@triton.jit
def kiln_ivalue_pow(a, b):  # by squaring, wrapping as ATen's; b < 0 as ATen's integer pow
    r = a * 0 + b * 0 + 1
    x = a + b * 0
    e = b + a * 0
    for _ in tl.static_range(64):
        r = tl.where((e & 1) != 0, r * x, r)
        x = x * x
        e = e >> 1
    neg = tl.where(a == 1, 1, tl.where(a == -1, tl.where((b & 1) != 0, -1, 1), 0))
    return tl.where(b < 0, neg, r)


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


use_triton_cache_dir = compile_pool.use_triton_cache_dir


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
        self._aliases: dict[str, str] = {}  # jit function -> the identical one it reuses (render)
        if not self.interpret:
            use_triton_cache_dir()

    def render(self, kernels: list) -> str:
        """The module source for ``kernels``."""
        libdevice = ("from torchkiln.codegen.triton import interpret_libdevice as libdevice" if self.interpret
                     else "from triton.language.extra import libdevice")
        parts = [PRELUDE.format(libdevice_import=libdevice, interpret=self.interpret)]
        first: dict[str, str] = {}  # jit source (its name blanked) -> the function defined with it
        self._aliases = {}
        for k in kernels:
            jit, launcher = KernelRenderer(k).render_parts(self.interpret)
            for name, src in jit:
                body = src.replace(f"def {name}(", "def _(", 1)
                if body in first:  # the same kernel as an earlier one: one function, one Launcher
                    self._aliases[name] = first[body]
                    parts.append(f"{name} = {first[body]}" + ("" if self.interpret else f"\n{name}_L = {first[body]}_L"))
                else:
                    first[body] = name
                    parts.append(src + ("" if self.interpret else f"\n\n\n{name}_L = _rt.Launcher({name})"))
            parts.append(launcher)
        return "\n\n".join(parts) + "\n"

    def compile_kernels(self, kernels: list) -> dict:
        return self.start_compile(kernels).result()

    def start_compile(self, kernels: list) -> concurrent.futures.Future:
        """Render and import the module; on a GPU, compile every kernel's expected
        specialization in the compile pool.  The future's result is ``{name: object}``
        for the wrapper's globals, set once the pool is done with the kernels."""
        done: concurrent.futures.Future = concurrent.futures.Future()
        if not kernels:
            done.set_result({})
            return done
        if self.device.type == "cpu" and not interpreter_active():
            raise RuntimeError("Triton kernels for CPU tensors need TRITON_INTERPRET=1 set before triton is imported")
        self._source = self.render(kernels)
        module = load_module(self._source)
        self._launchers = [f"{k.name}_launch" for k in kernels]
        objects = _objects(module, self._launchers)
        if self.interpret:
            done.set_result(objects)
            return done
        jobs = []  # each distinct jit function and specialization once
        for k in kernels:
            for name, args, options in KernelRenderer(k).precompile_jobs({}):
                job = (self._aliases.get(name, name), args, options)
                if job not in jobs:
                    jobs.append(job)
        compiled = compile_pool.precompile(module_path(self._source), jobs, _gpu_target(self.device))
        compiled.add_done_callback(lambda _: done.set_result(objects))
        return done

    def prologue(self, kernels: list) -> list[str]:
        # the current device and stream, read once per call and passed to every launch
        return [] if self.interpret or not kernels else ["_cu = _kiln_cuda_context()"]

    def cache_artifacts(self) -> tuple[dict, dict]:
        """For the FX graph cache, after ``compile_kernels``: the module source and the
        launcher names (Triton's compiled binaries stay in Triton's own cache)."""
        return {"launchers": list(self._launchers)}, {"source": self._source.encode()}

    def call(self, kernel, args: list[str]) -> str:
        return f"{kernel.name}_launch({', '.join(args + ([] if self.interpret else ['_cu']))})"

    def source(self) -> str:
        return self._source


def _gpu_target(device: torch.device):
    """Triton's ``GPUTarget`` of a CUDA device, as its CUDA driver reports it, from torch:
    asking Triton's driver would build its C utilities (gcc, on a cold cache) here, on the
    way to the compile pool, where the pool's first worker builds them meanwhile."""
    from triton.backends.compiler import GPUTarget

    if torch.version.hip is not None:  # ROCm targets name the architecture: ask Triton
        from triton.runtime.driver import driver

        return driver.active.get_current_target()
    major, minor = torch.cuda.get_device_capability(device)
    return GPUTarget("cuda", major * 10 + minor, 32)
