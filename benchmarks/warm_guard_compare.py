"""A warm-started frame's guard against a freshly captured one's (run by hand; not a test).

Per model: one process captures and compiles it into an empty cache directory (the
fresh guard), a second process installs its frames from their records (the warm
guard); each records the guard of every frame checked on a steady-state call and the
``f_locals`` it passed on.  Printed per frame: the generated check's lines (constants
by what they name), the lines only one of the two has, and µs per check (thread CPU
time, median) fresh and warm.

    python benchmarks/warm_guard_compare.py [--models nanogpt,hf_bert,hf_t5] [--mode inference]

Uses 1 thread and the default backend (records need its caches).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _normalized(guard) -> list[str]:
    """The generated check's lines, each ``___c<n>`` spelled as what it names."""
    from torchkiln.capture.guards import _pretty

    inner = getattr(guard, "_guard", guard)
    env = inner._parts[0].env if inner._parts else {}

    def name(m):
        v = env.get(m.group(0))
        if isinstance(v, type(type.__dict__)):
            owner = next((c for c in gc_types() if c.__dict__ == v), None)
            return f"<dict of {_pretty(owner)}>"
        return re.sub(r" at 0x[0-9a-f]+", "", _value(v))

    def _value(v):
        if isinstance(v, frozenset):  # str hashing is salted per process: sorted
            return "frozenset(" + ", ".join(sorted(map(repr, v))) + ")"
        if isinstance(v, tuple) and any(isinstance(i, (frozenset, type(type.__dict__), type({}.keys()))) for i in v):
            return "(" + ", ".join(map(_value, v)) + ")"
        if isinstance(v, type({}.keys())):
            return "keys(" + ", ".join(sorted(map(repr, v))) + ")"
        if isinstance(v, type(type.__dict__)):
            owner = next((c for c in gc_types() if c.__dict__ == v), None)
            return f"<dict of {_pretty(owner)}>"
        return _pretty(v)
    return [re.sub(r"___c\d+", name, line) for line in inner.source_text.splitlines()]


def gc_types():
    import gc

    return [o for o in gc.get_objects() if isinstance(o, type)]


def child(name: str, mode: str) -> None:
    import contextlib

    import torch

    import torchkiln
    from torchkiln.capture import eval_frame

    sys.path.insert(0, HERE)
    from guard_overhead import _time_us, build, checked_guards, step

    torch.set_num_threads(1)
    work = build(name)
    (work.model.train if mode == "training" else work.model.eval)()
    compiled = torchkiln.compile(work.model)
    for _ in range(2):
        step(work, compiled, mode)
    seen = checked_guards(work, compiled, mode)
    rows = [{"frame": f"{code.co_name}:{code.co_firstlineno}", "lines": _normalized(guard),
             "us": _time_us(guard.check, f_locals, 200)} for code, guard, f_locals in seen]
    print(json.dumps({"rows": rows, "warm_start": dict(torchkiln.counters["warm_start"])}))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="nanogpt,hf_bert,hf_t5")
    parser.add_argument("--mode", default="inference", choices=["inference", "training"])
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child)
    print(f"{'model':<10} {'frame':<24} {'lines fresh':>11} {'warm':>5} {'only fresh':>10} {'only warm':>9} "
          f"{'us fresh':>9} {'us warm':>8}")
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHKILN_CACHE_DIR=cache, OMP_NUM_THREADS="1")
            runs = []
            for _ in ("fresh", "warm"):
                p = subprocess.run([sys.executable, __file__, "--child", name, args.mode], env=env,
                                   capture_output=True, text=True)
                if p.returncode:
                    sys.exit(p.stderr[-3000:])
                runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        fresh, warm = runs
        print(f"# {name}: warm process counters {warm['warm_start']}")
        for f in fresh["rows"]:
            w = next((r for r in warm["rows"] if r["frame"] == f["frame"]), None)
            if w is None:
                print(f"{name:<10} {f['frame']:<24} {len(f['lines']):>11}  (no warm frame)")
                continue
            only_f = sorted(set(f["lines"]) - set(w["lines"]))
            only_w = sorted(set(w["lines"]) - set(f["lines"]))
            print(f"{name:<10} {f['frame'][:24]:<24} {len(f['lines']):>11} {len(w['lines']):>5} {len(only_f):>10} "
                  f"{len(only_w):>9} {f['us']:>9.1f} {w['us']:>8.1f}")
            for line in only_f[:8]:
                print("    fresh only:", line.strip()[:150])
            for line in only_w[:8]:
                print("    warm only: ", line.strip()[:150])


if __name__ == "__main__":
    main()
