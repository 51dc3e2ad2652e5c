"""Triton kernel generator: one ``@triton.jit`` kernel per fused kernel of the IR.

Used for CUDA tensors, and for CPU tensors when ``codegen.config.cpu_backend ==
"triton"`` (Triton's interpreter runs the same kernels on CPU).  See ``generator.py``
for the module layout and ``kernel.py`` for how a fused kernel is rendered.
``TritonGenerator`` is imported on first use, so that importing ``compile_pool`` (to
start the compile workers early) imports nothing heavy.
"""

__all__ = ["TritonGenerator"]


def __getattr__(name):
    if name == "TritonGenerator":
        from .generator import TritonGenerator

        return TritonGenerator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
