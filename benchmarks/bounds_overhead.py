"""Cost of the indirect-index checks (``codegen.config.assert_indirect_indexing``).

For each model of the bench suite, two compiled copies live in one process, one
compiled with the checks and one without; their steady-state steps are timed
interleaved (rounds of ``--steps`` steps, alternating which goes first); printed: the
ratio of medians, the median of the back-to-back (paired) ratios and the ratio of the
minima, with the number of checks in the generated kernels.

Per kernel (the load on a shared machine hides a 2% effect in whole steps): every C++
kernel call is timed (``perf_counter_ns`` around the ctypes call, the same cost in both
copies); the kernels that carry checks in the checked copy are paired with the same
kernels of the other copy (same graph, same name), and their time per step, on and off
(medians and minima over rounds), the difference as a share of the step, and their share
of the step (a bound: checks that doubled those kernels would cost that much) are printed.

    python benchmarks/bounds_overhead.py --models nanogpt,hf_gpt2,hf_bert --mode inference
"""
from __future__ import annotations

import argparse
import collections
import copy
import statistics
import time

import torch

import torchkiln
from torchkiln.bench.models import build
from torchkiln.bench.run import _Step
from torchkiln.codegen import compile_fx, config
from torchkiln.codegen import cpp

_checks = [0]
# per-kernel timing: which copy is binding/running, its kernels' times (ns) and calls
_current = [None]
_binds = collections.Counter()
_kernel_ns: dict = collections.defaultdict(int)
_checked: set = set()  # (bind index, kernel name) of kernels with checks in the checked copy


def _time_kernels():
    """Wrap every bound C++ kernel with a timer keyed by (copy, bind index, name)."""
    real = cpp._bind

    def timed_bind(lib, kernels, sites):
        out = real(lib, kernels, sites)
        copy_ = _current[0]
        index = _binds[copy_]
        _binds[copy_] += 1
        for k in kernels:
            if copy_ is True and k.name in sites:
                _checked.add((index, k.name))
            fn, key = out[k.name], (copy_, index, k.name)

            def timed(*args, fn=fn, key=key, clock=time.perf_counter_ns):
                t0 = clock()
                r = fn(*args)
                _kernel_ns[key] += clock() - t0
                return r

            out[k.name] = timed
        return out

    cpp._bind = timed_bind


def _checked_ns(on: bool) -> int:
    return sum(_kernel_ns[(on, *key)] for key in _checked)


def _count_checks():
    real = cpp.CppGenerator.start_compile

    def counting(self, kernels):
        pending = real(self, kernels)
        _checks[0] += sum(len(s) for s in self._sites.values())
        return pending

    cpp.CppGenerator.start_compile = counting


def _backend(checks: bool):
    def backend(gm, example_inputs):
        with config.patch(assert_indirect_indexing=checks):
            return compile_fx(gm, example_inputs)

    return backend


def measure(name: str, mode: str, rounds: int, steps: int) -> dict:
    work = build(name, "cpu")
    variants = {}
    checks = {}
    torchkiln.reset()  # once: a reset between the copies would drop the first copy's graphs
    for on in (True, False):
        model = copy.deepcopy(work.model)
        _checks[0] = 0
        _current[0] = on
        with config.patch(fx_graph_cache=False):
            # a backend object per copy: the copies share forward's code, and a shared
            # backend would let the second copy reuse the first one's graphs
            step = _Step(model, torchkiln.compile(model, backend=_backend(on)), work, mode, "cpu")
            step.first()
            step.finish_first()
            step.step()
        checks[on] = _checks[0]
        variants[on] = step
    times = {True: [], False: []}
    kernel_times = {True: [], False: []}  # per step, the kernels that carry checks
    ratios = []  # on/off of back-to-back rounds: load changes between rounds cancel out
    for r in range(rounds):
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            before = _checked_ns(on)
            t0 = time.perf_counter()
            for _ in range(steps):
                variants[on].step()
            times[on].append((time.perf_counter() - t0) / steps)
            kernel_times[on].append((_checked_ns(on) - before) / steps / 1e3)
        ratios.append(times[True][-1] / times[False][-1])
    on, off = statistics.median(times[True]), statistics.median(times[False])
    k_on, k_off = statistics.median(kernel_times[True]), statistics.median(kernel_times[False])
    _checked.clear()
    _binds.clear()
    _kernel_ns.clear()
    return {"model": name, "mode": mode, "checks_on": checks[True], "checks_off": checks[False],
            "kernel_on_us": k_on, "kernel_off_us": k_off,
            "kernel_pct": (k_on / k_off - 1) * 100 if k_off else 0.0,
            "kernel_min_pct": (min(kernel_times[True]) / min(kernel_times[False]) - 1) * 100 if k_off else 0.0,
            "kernel_share_pct": k_off / (off * 1e6) * 100,
            "kernel_step_pct": (k_on - k_off) / (off * 1e6) * 100,
            "on_ms": on * 1e3, "off_ms": off * 1e3, "overhead_pct": (on / off - 1) * 100,
            "paired_pct": (statistics.median(ratios) - 1) * 100, "min_pct": (min(times[True]) / min(times[False]) - 1) * 100}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="nanogpt,hf_gpt2,hf_bert")
    p.add_argument("--mode", default="inference", choices=["inference", "training"])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    _count_checks()
    _time_kernels()
    print("model | mode | checks (on/off) | on ms | off ms | overhead % (medians) | median paired % | min/min % "
          "| checked kernels on/off µs per step | kernel % (medians) | kernel min/min % | % of step "
          "| their share of the step %")
    for name in a.models.split(","):
        r = measure(name, a.mode, a.rounds, a.steps)
        print(f"{r['model']} | {r['mode']} | {r['checks_on']}/{r['checks_off']} | {r['on_ms']:.2f} | "
              f"{r['off_ms']:.2f} | {r['overhead_pct']:+.2f} | {r['paired_pct']:+.2f} | {r['min_pct']:+.2f} | "
              f"{r['kernel_on_us']:.1f}/{r['kernel_off_us']:.1f} | {r['kernel_pct']:+.2f} | {r['kernel_min_pct']:+.2f} | "
              f"{r['kernel_step_pct']:+.3f} | {r['kernel_share_pct']:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
