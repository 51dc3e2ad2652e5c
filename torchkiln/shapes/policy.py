"""Which tensor dimensions capture makes symbolic (the dynamic-shapes policy input).

Mirrors torch.compile's ``dynamic=`` argument and automatic dynamic: ``assume_static``
True means every dim is static unless listed in ``dynamic_dims`` (keyed by source name,
e.g. ``"L['x']"``) or marked with ``torchkiln.mark_dynamic`` (a tensor's
``_torchkiln_dynamic_dims`` set; ``torchkiln.mark_static`` dims, in ``_torchkiln_static_dims``,
stay static); False (``dynamic=True``) makes every dim symbolic
except sizes 0 and 1, which are always specialised.
"""
from __future__ import annotations

import dataclasses


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
