"""Which tensor dimensions and Python ints capture makes symbolic (the dynamic-shapes policy input).

Mirrors torch.compile's ``dynamic=`` argument and automatic dynamic: ``assume_static``
True means every dim is static unless listed in ``dynamic_dims`` (keyed by source name,
e.g. ``"L['x']"``) or marked with ``torchkiln.mark_dynamic`` (a tensor's
``_torchkiln_dynamic_dims`` set; ``torchkiln.mark_static`` dims, in ``_torchkiln_static_dims``,
stay static); False (``dynamic=True``) makes every dim symbolic
except sizes 0 and 1, which are always specialised.

A Python ``int`` argument (a local ``L['n']`` or an item of one, ``L['args'][0]``; not
an attribute: torch keeps ints read from modules static) is one more "dim", named
:data:`SCALAR`: first specialised on its value, then a SymInt once automatic dynamic
saw the value change (as torch.compile's automatic dynamic does for ints), or from
the start under ``dynamic=True`` (0 and 1 excepted).  ``bool`` is never symbolic.
"""
from __future__ import annotations

import dataclasses
import re

SCALAR = "value"  # the "dim" of a Python int source: its value
_SCALAR_SOURCE = re.compile(r"L\['[^']+'\](\[\d+\])*")


def scalar_source(source_name: str) -> bool:
    """Whether an int read from ``source_name`` may become a SymInt (frame arguments and
    their items; attributes and globals stay specialised)."""
    return _SCALAR_SOURCE.fullmatch(source_name) is not None


@dataclasses.dataclass
class DynamicPolicy:
    assume_static: bool = True
    dynamic_dims: dict[str, set[int]] = dataclasses.field(default_factory=dict)

    def is_dynamic(self, source_name: str, tensor, dim: int) -> bool:
        """Whether ``dim`` of ``tensor`` read from ``source_name`` gets a symbolic size."""
        if tensor.shape[dim] in (0, 1) or dim in getattr(tensor, "_torchkiln_static_dims", ()):
            return False
        if dim in getattr(tensor, "_torchkiln_dynamic_dims", ()):
            return True
        if dim in self.dynamic_dims.get(source_name, ()):
            return True
        return not self.assume_static

    def is_dynamic_scalar(self, source_name: str, value) -> bool:
        """Whether the Python int ``value`` read from ``source_name`` becomes a SymInt."""
        if type(value) is not int or not scalar_source(source_name):
            return False
        if SCALAR in self.dynamic_dims.get(source_name, ()):
            return True
        return not self.assume_static and value not in (0, 1)
