"""Small compiler functions and the boxed calling convention (as ``functorch.compile``)."""
from __future__ import annotations

from typing import Callable

import torch


def nop(gm: torch.fx.GraphModule, example_inputs) -> Callable:
    """The identity compiler: run the ATen graph as it is."""
    return gm


def make_boxed_func(f: Callable) -> Callable:
    """``f(*args)`` as ``g(args_list)``, marked ``_boxed_call`` so callers pass one list
    (a boxed callee may free its inputs early)."""

    def g(args):
        return f(*args)

    g._boxed_call = True
    return g


def make_boxed_compiler(compiler: Callable) -> Callable:
    """A compiler whose result follows the boxed calling convention."""

    def boxed(gm, example_inputs):
        out = compiler(gm, example_inputs)
        return out if getattr(out, "_boxed_call", False) else make_boxed_func(out)

    return boxed
