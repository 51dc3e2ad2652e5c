"""Kernel generators, one per device kind, and how the wrapper calls their kernels.

A generator turns the :class:`~torchkiln.codegen.ir.FusedKernel` s of one graph into
callables.  ``cpu`` tensors use the C++/OpenMP generator (``codegen.config.cpu_backend
= "cpp"``, the default) or the Triton one (``"triton"``, for testing Triton kernels on
CPU under ``TRITON_INTERPRET=1``); ``cuda`` tensors use Triton.  Generators are
imported lazily, so the package imports without triton.
"""
from __future__ import annotations

import importlib

import torch

from . import config

_GENERATORS = {
    "cpp": "torchkiln.codegen.cpp:CppGenerator",
    "triton": "torchkiln.codegen.triton:TritonGenerator",
}


class KernelGenerator:
    """Interface of a kernel generator (a class; one instance per compiled graph).

    ``compile_kernels(kernels)`` generates and compiles every kernel of the graph and
    returns ``{name: object}``: objects put in the wrapper's globals under that name.
    ``call(kernel, args)`` returns the Python statement that runs ``kernel`` in the
    wrapper, where ``args`` are the wrapper variable names of ``kernel.call_args()``
    (tensors for buffers, Python ints for size symbols).
    ``source()`` returns the generated kernel source, for ``TORCHKILN_LOGS=output_code``.
    ``prologue(kernels)`` (optional) returns Python statements run at the start of
    every wrapper call (the C++ generator syncs its thread count there).
    """

    # Exceptions a kernel launch raises when the kernel itself fails to compile (Triton
    # compiles at the first launch): the graph then falls back to eager (compile_fx).
    launch_errors: tuple = ()

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def compile_kernels(self, kernels: list) -> dict:
        raise NotImplementedError

    def call(self, kernel, args: list[str]) -> str:
        raise NotImplementedError

    def source(self) -> str:
        raise NotImplementedError

    def prologue(self, kernels: list) -> list[str]:
        return []

    def plan_launches(self, entries: list) -> None:
        """Called with the scheduled graph (kernels and extern buffers, in order) before
        ``compile_kernels``: a generator that launches several kernels as one call
        plans that here (the C++ generator's launch groups)."""

    def launch_groups(self) -> dict:
        """``{kernel name: group}`` for the kernels launched as part of a group (the
        wrapper launches the group at its last member); empty by default."""
        return {}


def generator_name(device: torch.device) -> str:
    """``"cpp"`` or ``"triton"``: the generator used for tensors on ``device``."""
    if device.type == "cpu":
        return config.cpu_backend
    return "triton"


def get_generator(device: torch.device) -> KernelGenerator:
    """A fresh generator instance for ``device`` (raises ImportError if unavailable)."""
    module, _, attr = _GENERATORS[generator_name(device)].partition(":")
    return getattr(importlib.import_module(module), attr)(device)
