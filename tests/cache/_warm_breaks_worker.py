"""Run in a subprocess by tests/cache/test_warm_start_breaks.py (argv[1]: ``cold`` or
``warm``): call frames that graph-break (and one that returns an object made in the
frame), check each result (and the side effects of
the breaking calls) against eager, and print one JSON line: per case the warm-start
counters it moved and whether capture ran (``captured``: unique graphs added)."""
import copy
import json
import logging
import os
import sys

import torch

import torchkiln
from torchkiln import counters

EVENTS = []  # what the breaking calls did (compared with eager's)
FAIL = [False]
SCALE = float(os.environ.get("WB_SCALE", "2.0"))


def record_event(t):  # reads a tensor's value: a graph break, called in Python
    EVENTS.append(round(float(t.sum()), 3))
    return len(EVENTS)


def checked(t):
    if FAIL[0]:
        raise ValueError("rejected")
    return record_event(t)


def brk_call(x, scale):  # graph, a call in Python, the resume function
    y = x.sin() * scale
    n = record_event(y)
    return y.cos() + n, (n, "tag")


def brk_branch(x):  # data-dependent branch: the record keeps both resume functions
    y = x * 2.0
    if y.sum() > 0:
        return y + 1.0
    return y - 1.0


def brk_handler(x):  # the breaking call raises in the warm process: the frame's own handler runs
    y = x.relu()
    try:
        v = checked(y)
    except ValueError:
        v = -1
    return y * v


def brk_global(x):  # a guard on a global: a changed value captures again
    y = x * SCALE
    torchkiln.graph_break()
    return y + 1.0


def brk_kwargs(x):
    y = x.tanh()
    z = scaled_event(y, scale=3.0)
    return z.exp()


def scaled_event(t, scale=1.0):
    record_event(t)
    return t * scale


class Box:  # a plain class: made in the frame, rebuilt by the record (transformers' DynamicCache)
    def __init__(self, t, tag):
        self.t = t
        self.tag = tag
        self.parts = [t * 2.0]
        self.flags = {0: True, "n": t.sum()}  # a dict made in the frame (EncoderDecoderCache.is_updated)


def new_object(x):
    return Box(x.cos(), "made"), x.sum()


def dyn(x, y):  # symbolic sizes (dynamic=True): the shape guards are record guards
    return (x * 2.0).sum(0) + y[: x.shape[1]], x.shape[0] * 2


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x):
        h = self.lin(x).relu()
        torchkiln.graph_break()
        return self.lin(h) + x


def _cases(phase):
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    block = Block()
    warm = phase == "warm"
    return {"call": (brk_call, (x, 2.0)),
            "call_other_scale": (brk_call, (x, 3.0 if warm else 2.0)),  # warm: a guard on ``scale`` fails
            "branch": (brk_branch, (x.abs(),)),
            "branch_other_way": (brk_branch, (-x.abs(),)),  # same record, the other resume function
            "handler": (brk_handler, (x,)),
            "global": (brk_global, (x,)),  # warm: SCALE changed
            "kwargs": (brk_kwargs, (x,)),
            "module": (block, (x,)),
            "dyn": (dyn, (torch.randn(3, 5), torch.randn(8))),
            "dyn_other_size": (dyn, (torch.randn(7 if warm else 3, 5), torch.randn(8))),  # one record, any size
            "dyn_guard_fails": (dyn, (torch.randn(1, 5), torch.randn(8))),  # 2 <= size(0) fails: capture
            "new_object": (new_object, (x,)),
            "new_object_other": (new_object, (x.double() if warm else x,))}  # warm: a dtype guard fails


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.allclose(a, b, atol=1e-5)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, Box):
        return type(b) is Box and list(vars(a)) == list(vars(b)) and all(_same(vars(a)[k], vars(b)[k]) for k in vars(a))
    return type(a) is type(b) and a == b


class _Lines(logging.Handler):  # the warm-start log of each case (misses, bypasses with their reasons)
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        if record.getMessage().startswith("warm start"):
            self.lines.append(record.getMessage()[:300])


def main() -> int:
    phase = sys.argv[1]
    lines = _Lines()
    logging.getLogger("torchkiln.cache").addHandler(lines)
    logging.getLogger("torchkiln.cache").setLevel(logging.DEBUG)
    report, ok = {}, True
    for name, (fn, args) in _cases(phase).items():
        if phase == "cold" and name in ("call_other_scale", "branch_other_way", "new_object_other", "dyn_other_size",
                                        "dyn_guard_fails"):
            continue
        FAIL[0] = phase == "warm" and name == "handler"
        if name.startswith("dyn"):
            torchkiln.reset()  # one frame, one record: each call looks it up again (counters too)
        eager_args = copy.deepcopy(args)
        before = {k: dict(v) for k, v in counters.items()}
        del EVENTS[:]
        del lines.lines[:]
        out = torchkiln.compile(fn, dynamic=name.startswith("dyn") or None)(*args)
        events = list(EVENTS)
        del EVENTS[:]
        ref = fn(*eager_args)
        good = _same(out, ref) and events == EVENTS
        ok = ok and good

        def delta(group, k):
            return counters[group].get(k, 0) - before.get(group, {}).get(k, 0)
        report[name] = {"ok": bool(good), "captured": delta("stats", "unique_graphs"),
                        **{k: delta("warm_start", k) for k in ("hit", "miss", "bypass", "saved", "not_recordable")},
                        "reasons": {k: v - before.get("warm_start_bypass", {}).get(k, 0)
                                    for k, v in counters["warm_start_bypass"].items()
                                    if v - before.get("warm_start_bypass", {}).get(k, 0)},
                        "log": list(lines.lines)}
    from torchkiln.cache.keys import torchkiln_source_hash  # in every key: equal in both processes, or nothing hits

    print(json.dumps({"ok": ok, "frames": report, "source_hash": torchkiln_source_hash()}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
