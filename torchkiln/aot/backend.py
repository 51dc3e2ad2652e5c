"""The "aot_eager" backend: AOT autograd with no decompositions, both graphs run by
``torch.fx`` as they are (a debugging backend, as torch.compile's ``aot_eager``)."""
from __future__ import annotations

from .api import aot_module_simplified
from .compilers import nop


def aot_eager(gm, example_inputs):
    """``backend(gm, example_inputs) -> callable``: functionalize, partition, run eagerly."""
    return aot_module_simplified(gm, example_inputs, fw_compiler=nop, bw_compiler=nop)
