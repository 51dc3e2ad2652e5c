"""Cost of the indirect-index checks (``codegen.config.assert_indirect_indexing``).

For each model of the bench suite, two compiled copies live in one process, one
compiled with the checks and one without; their steady-state steps are timed
interleaved (rounds of ``--steps`` steps, alternating which goes first); printed: the
ratio of medians, the median of the back-to-back (paired) ratios and the ratio of the
minima, with the number of checks in the generated kernels.

    python benchmarks/bounds_overhead.py --models nanogpt,hf_gpt2,hf_bert --mode inference
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

import torchkiln
from torchkiln.bench.models import build
from torchkiln.bench.run import _Step
from torchkiln.codegen import config
from torchkiln.codegen import cpp

_checks = [0]


def _count_checks():
    real = cpp.CppGenerator.start_compile

    def counting(self, kernels):
        pending = real(self, kernels)
        _checks[0] += sum(len(s) for s in self._sites.values())
        return pending

    cpp.CppGenerator.start_compile = counting


def measure(name: str, mode: str, rounds: int, steps: int) -> dict:
    work = build(name, "cpu")
    variants = {}
    checks = {}
    for on in (True, False):
        model = copy.deepcopy(work.model)
        _checks[0] = 0
        torchkiln.reset()
        with config.patch(assert_indirect_indexing=on):
            step = _Step(model, torchkiln.compile(model), work, mode, "cpu")
            step.first()
            step.finish_first()
            step.step()
        checks[on] = _checks[0]
        variants[on] = step
    times = {True: [], False: []}
    ratios = []  # on/off of back-to-back rounds: load changes between rounds cancel out
    for r in range(rounds):
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            t0 = time.perf_counter()
            for _ in range(steps):
                variants[on].step()
            times[on].append((time.perf_counter() - t0) / steps)
        ratios.append(times[True][-1] / times[False][-1])
    on, off = statistics.median(times[True]), statistics.median(times[False])
    return {"model": name, "mode": mode, "checks_on": checks[True], "checks_off": checks[False],
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
    print("model | mode | checks (on/off) | on ms | off ms | overhead % (medians) | median paired % | min/min %")
    for name in a.models.split(","):
        r = measure(name, a.mode, a.rounds, a.steps)
        print(f"{r['model']} | {r['mode']} | {r['checks_on']}/{r['checks_off']} | {r['on_ms']:.2f} | "
              f"{r['off_ms']:.2f} | {r['overhead_pct']:+.2f} | {r['paired_pct']:+.2f} | {r['min_pct']:+.2f}", flush=True)


if __name__ == "__main__":
    main()
