"""Launch groups: consecutive generated C++ kernels of a graph called as one function.

A launch through ctypes costs about a microsecond (argument conversion, the GIL
released and taken back), more than a small kernel's work: a training step's backward
of a small MLP launches 25 kernels, 16 of them next to another kernel with no extern
call in between (a ReLU mask after a bias gradient's sum, the gradient-clipping hook
of every weight at the end of the graph).  Such a run of kernels is launched as one
``extern "C"`` function of the same translation unit that calls its members in order,
so the run costs one launch.  Calling the members one after the other is what the
wrapper did; nothing is reordered.  (TorchInductor's combo kernels fuse independent
kernels into one loop nest for the same reason on GPUs.)

The wrapper (``codegen/wrapper.py``) allocates the buffers of every member before the
group's launch, passes a buffer that a member's output took the storage of (a
``reuse`` line) under its new name, and frees the buffers the run is done with after
the launch.  A kernel with indirect-index checks returns a status and is launched on
its own.
"""
from __future__ import annotations

import dataclasses

from ..ir import BufferArg, FusedKernel, is_float_symbol

# Calls a kernel with arguments passed as void* / int64_t / double, each converted to
# the parameter type the kernel declares (the C-style cast a typed call would need).
LAUNCH_HELPER = r"""
template <typename... P, typename... A>
static inline void kiln_launch(void (*kernel)(P...), A... args) { kernel(((P)args)...); }
"""


@dataclasses.dataclass
class LaunchGroup:
    """``members`` (FusedKernels, at least two) called in order by one function ``name``
    whose arguments are the members' buffers (each once, in order of first use) and
    then their size symbols (sorted by name)."""

    name: str
    members: list
    buffers: list
    size_args: list

    def call_args(self) -> list[str]:
        return [b.name for b in self.buffers] + [str(s) for s in self.size_args]

    def render(self) -> str:
        params = [f"void* {b.name}" for b in self.buffers]
        params += [f"{'double' if is_float_symbol(s) else 'int64_t'} {s}" for s in self.size_args]
        calls = [f"  kiln_launch({k.name}, {', '.join(k.call_args())});" for k in self.members]
        return f'extern "C" void {self.name}({", ".join(params)}) {{\n' + "\n".join(calls) + "\n}"


def plan_launch_groups(entries: list) -> list[LaunchGroup]:
    """A group per run of two or more consecutive kernels in ``entries`` (the
    scheduled graph: kernels and extern buffers, in order)."""
    runs, run = [], []
    for e in entries + [None]:
        if isinstance(e, FusedKernel):
            run.append(e)
            continue
        if len(run) > 1:
            runs.append(run)
        run = []
    groups = []
    for members in runs:
        buffers: dict[str, BufferArg] = {}
        for k in members:
            for b in k.buffers:
                old = buffers.get(b.name)
                buffers[b.name] = BufferArg(b.name, b.dtype, b.stored or (old is not None and old.stored))
        sizes = sorted({s for k in members for s in k.size_args}, key=lambda s: s.name)
        groups.append(LaunchGroup(f"{members[0].name}_group", members, list(buffers.values()), sizes))
    return groups
