"""``torchkiln bench --profile``: where the steady-state time of a step goes.

``breakdown(step_fn, steps, rounds)`` runs ``rounds`` times ``steps`` calls of
``step_fn`` under ``torch.profiler`` (CPU activity only), attributes their wall time
to the categories below and keeps each category's smallest round:

* ``kernels``: generated kernels.  torchkiln's wrapper, with
  ``codegen.config.kernel_profile`` on, adds each launch's wall time to
  ``codegen.wrapper_runtime.kernel_time`` (a clock read around the call, ~0.1 us:
  a ``record_function`` per launch cost ~10 us under the profiler, all of it counted
  as kernel time); the peer's C++ kernels are profiler events of their own with
  ``torch._inductor.config.cpp.enable_kernel_profile`` (``graph_0_cpp_fused_...``);
* ``extern <op>``: ATen calls, by op, outermost op only (a ``convolution`` includes
  the ``mkldnn_convolution`` it calls), allocation inside them excluded;
* ``alloc``: ``empty``/``empty_strided``/``resize_`` calls at any depth;
* ``optimizer``: ``zero_grad`` and the optimizer step (eager in every variant);
* ``python``: the rest of the wall time: wrapper code, guard checks, the autograd
  engine's own bookkeeping, the model's Python in eager.

Times are milliseconds per step.  The profiler adds a few microseconds per recorded
op, so the parts are a little larger than in an unprofiled step; compare variants
with each other, not with the suite's medians.  Mirrors nothing in torch; torch's
equivalent is reading ``torch.profiler`` tables by hand.
"""
from __future__ import annotations

import time
from collections import defaultdict
from typing import Callable

import torch

ALLOC = {"aten::empty", "aten::empty_strided", "aten::resize_", "aten::empty_like"}


def _is_peer_kernel(name: str) -> bool:
    """A C++ kernel of torch.compile's, recorded by its ``cpp.enable_kernel_profile``."""
    return name.startswith("graph_") and "_cpp_fused" in name


def _walk(event, out: dict, in_optimizer: bool) -> None:
    name = event.name
    if name.startswith("Optimizer.") or name.startswith("Optimizer#"):
        in_optimizer = True
    if _is_peer_kernel(name):
        out["kernels"] += event.cpu_time_total
        return
    if name in ALLOC:
        out["alloc"] += event.cpu_time_total
        return
    if _is_op(name) and not in_optimizer:
        alloc = _alloc_time(event)
        out["alloc"] += alloc
        out[f"extern {name[6:] if name.startswith('aten::') else name}"] += event.cpu_time_total - alloc
        return
    if in_optimizer and not event.cpu_children:
        out["optimizer"] += event.cpu_time_total
        return
    children = event.cpu_children
    if in_optimizer:
        out["optimizer"] += event.cpu_time_total - sum(c.cpu_time_total for c in children)
    for child in children:
        _walk(child, out, in_optimizer)


def _is_op(name: str) -> bool:
    """An operator's event (``aten::addmm``, ``mkldnn::_linear_pointwise``), not the
    autograd engine's or a ``record_function`` of the model's."""
    return "::" in name and not name.startswith(("autograd::", "torch::autograd"))


def _alloc_time(event) -> float:
    total = 0.0
    for child in event.cpu_children:
        total += child.cpu_time_total if child.name in ALLOC else _alloc_time(child)
    return total


def breakdown(step_fn: Callable[[], object], steps: int = 3, rounds: int = 3) -> dict[str, float]:
    """``{category: ms per step}`` plus ``"total"`` (wall ms per step): ``rounds``
    profiles of ``steps`` calls each, every category the smallest of the rounds (on a
    shared machine a round that another process preempted inflates whatever ran then;
    the profiler's clock is the wall clock)."""
    step_fn()  # one untimed call outside the profiler (lazy state, thread pools)
    best: dict[str, float] = {}
    for _ in range(rounds):
        for k, v in _profile_round(step_fn, steps).items():
            best[k] = min(best.get(k, v), v)
    return best


def _profile_round(step_fn, steps: int) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    from ..codegen.wrapper_runtime import kernel_time

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        kernel_time[:] = [0, 0]
        start = time.perf_counter()
        for _ in range(steps):
            step_fn()
        wall = time.perf_counter() - start
        ours = kernel_time[0] / 1e3  # us, outside any profiler event
    out: dict[str, float] = defaultdict(float)
    out["kernels"] = ours
    main = _main_thread(prof)
    for event in prof.events():
        if event.cpu_parent is None and event.thread == main:
            _walk(event, out, False)
    result = {k: v / steps / 1e3 for k, v in out.items()}
    result["total"] = 1e3 * wall / steps
    result["python"] = max(0.0, result["total"] - sum(v for k, v in result.items() if k != "total"))
    return result


def _main_thread(prof) -> int:
    counts: dict[int, float] = defaultdict(float)
    for event in prof.events():
        if event.cpu_parent is None:
            counts[event.thread] += event.cpu_time_total
    return max(counts, key=counts.get) if counts else 0


def summarize(parts: dict[str, float], top: int = 6) -> list[tuple[str, float]]:
    """The categories worth printing: kernels, alloc, optimizer, python, and the ``top``
    largest extern ops (the rest summed as ``extern other``)."""
    fixed = [(k, parts.get(k, 0.0)) for k in ("total", "kernels", "alloc", "optimizer", "python")]
    externs = sorted(((k, v) for k, v in parts.items() if k.startswith("extern ")), key=lambda kv: -kv[1])
    rows = fixed + externs[:top]
    rest = sum(v for _, v in externs[top:])
    if rest:
        rows.append(("extern other", rest))
    return rows


def format_breakdowns(model: str, mode: str, variants: dict[str, dict[str, float]]) -> str:
    """A text table: one column per variant (eager, kiln, peer), ms per step."""
    names = list(variants)
    keys: list[str] = []
    for parts in variants.values():
        for k, _ in summarize(parts):
            if k not in keys:
                keys.append(k)
    lines = [f"{model} {mode} (ms/step)", f"{'':28}" + "".join(f"{n:>10}" for n in names)]
    shown = [k for k in keys if k.startswith("extern ") and k != "extern other"]

    def value(parts, k):
        if k == "extern other":
            return sum(v for e, v in parts.items() if e.startswith("extern ") and e not in shown)
        return parts.get(k, 0.0)

    for k in keys:
        lines.append(f"{k[:28]:28}" + "".join(f"{value(variants[n], k):10.2f}" for n in names))
    return "\n".join(lines)
