"""Triton kernel generator: one ``@triton.jit`` kernel per fused kernel of the IR.

Used for CUDA tensors, and for CPU tensors when ``codegen.config.cpu_backend ==
"triton"`` (Triton's interpreter runs the same kernels on CPU).  See ``generator.py``
for the module layout and ``kernel.py`` for how a fused kernel is rendered.
"""
from .generator import TritonGenerator

__all__ = ["TritonGenerator"]
