"""What a generated wrapper calls at run time: its base globals (kernels and constants
are added per graph).  Kept apart from ``wrapper.py`` (the code generator, which loads
sympy) so that a graph loaded from the FX graph cache runs without the generator."""
from __future__ import annotations

import math
import time

import torch

#: With ``codegen.config.kernel_profile``: [nanoseconds, launches] spent in generated
#: kernels since the last reset (``torchkiln bench --profile`` reads and resets it).
#: A clock around each launch costs ~0.1 us; a ``record_function`` (a profiler event)
#: cost ~10 us per launch under the profiler, which counted as kernel time.
kernel_time = [0, 0]


def _reinterpret(base, size, stride, offset):
    return base.as_strided(size, stride, base.storage_offset() + offset)


def _restride(t, size, stride):
    """``t``'s values in a new tensor with ``stride`` (sizes of one dim ignore strides)."""
    if all(n == 1 or a == b for n, a, b in zip(size, t.stride(), stride)) or t.numel() == 0:
        return t
    if not any(a == 0 and n > 1 for n, a in zip(size, stride)):
        return torch.empty_strided(size, stride, dtype=t.dtype, device=t.device).copy_(t)
    # an expanded layout (stride 0): write one element per broadcast dim, copy_ would refuse
    extent = 1 + sum((n - 1) * a for n, a in zip(size, stride))
    out = torch.empty(extent, dtype=t.dtype, device=t.device).as_strided(size, stride)
    dst, src = out, t
    for d, (n, a) in enumerate(zip(size, stride)):
        if a == 0 and n > 1:
            dst, src = dst.narrow(d, 0, 1), src.narrow(d, 0, 1)
    dst.copy_(src)
    return out


def extern_callable(op):
    """What the wrapper calls for extern ``op``: a GEMM's or convolution's overloads through its
    ``torch.*`` binding (as TorchInductor's ``extern_kernels.mm``): the generated binding
    parses the arguments ~0.7 us faster than the schema-driven ``op._op`` and dispatches
    to the same kernel; another ``OpOverload``'s builtin (``op._op``, all that
    ``OpOverload.__call__`` does is call it); else ``op`` itself."""
    binding = _BINDINGS.get(op) if type(op) is torch._ops.OpOverload else None
    if binding is not None:
        return binding
    if type(op) is torch._ops.OpOverload and isinstance(getattr(op, "_op", None), type(len)):
        return op._op
    return op


def _bindings() -> dict:
    out = {}
    for packet, binding in (("mm", torch.mm), ("addmm", torch.addmm), ("bmm", torch.bmm), ("baddbmm", torch.baddbmm),
                            ("linear", torch._C._nn.linear)):
        for overload in ("default", "out"):
            op = getattr(getattr(torch.ops.aten, packet), overload, None)  # every one in torch 2.11-2.15
            if op is not None:
                out[op] = binding
    # TorchInductor's extern_kernels.convolution: the same kernel, parsed by the generated binding
    out[torch.ops.aten.convolution.default] = torch.convolution
    return out


_BINDINGS = _bindings()


def base_globals() -> dict:
    """The globals every wrapper starts from (kernels and constants are added per graph)."""
    return {"torch": torch, "math": math, "empty_strided": torch.empty_strided,
            "reinterpret": _reinterpret, "restride": _restride,
            "extern_callable": extern_callable,
            "_kiln_clock": time.perf_counter_ns, "_kiln_kernel_time": kernel_time}
