"""Run in a subprocess by tests/cache/test_warm_start_kinds.py (argv[1]: ``cold`` or
``warm``): call each frame kind below once, check its result against eager, and print
one JSON line: per frame the warm-start counters it moved, whether capture ran
(``captured``: unique graphs added) and the warm-start log lines."""
import copy
import functools
import json
import logging
import sys

import torch
import torch.nn.functional as F

import torchkiln
from torchkiln import counters


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def bn_step(m, x):  # a graph that mutates inputs (BatchNorm's running statistics)
    return m(x)


def add_to_buffer(x, buf):  # mutates ``buf``; a warm call passes ``buf`` as a view of ``x``
    buf.add_(1.0)
    return x * 2.0 + buf.sum()


def lstm_call(m, x):  # guards and graph inputs read ``_flat_weight_refs[i]()``
    return m(x)[0]


def pooled(x):  # F.max_pool2d is torch's ``boolean_dispatch.<locals>.fn``
    return F.max_pool2d(x, 2).relu()


class _State:  # transformers' CompileableContextVar resets attributes like these after a forward
    done = False
    tag = None


STATE = _State()


def store_after(x):  # side effects replayed after the graph: constant attribute stores
    y = x.sin() * 2.0
    STATE.done = True
    STATE.tag = "stored"
    return y


def _decorate(fn):  # like transformers' merge_with_config_defaults: a local wrapper, inlined
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) + 1.0
    return wrapper


@_decorate
def _scaled(x):
    return x.cos() * 3.0


def decorated(x):
    return _scaled(x).relu()


def _scaled_forward(fn):  # like transformers' @dynamic_rope_update: a local wrapper with defaults as forward
    @functools.wraps(fn)
    def wrapper(self, x, k=None):
        return fn(self, x) * (2.0 if k is None else k)
    return wrapper


class RopeA(torch.nn.Module):
    @_scaled_forward
    def forward(self, x):
        return x.sin()


class RopeB(RopeA):
    @_scaled_forward
    def forward(self, x):
        return x.cos()


def rope_same(m, x):  # inlines RopeA.forward, found through the guarded class
    return m(x) + 1.0


def rope_changed(m, x):  # warm: RopeB.forward's defaults changed before the call
    return m(x) + 1.0


def model_output(x):  # a transformers ModelOutput built in the frame (skipped without transformers)
    return _Output(logits=x.tanh(), hidden=(x * 2.0,))


try:
    import dataclasses

    from transformers.utils import ModelOutput

    @dataclasses.dataclass
    class _Output(ModelOutput):
        logits: torch.Tensor = None
        hidden: tuple = None
except ImportError:
    _Output = None


def _cases(phase):
    torch.manual_seed(0)
    bn = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).train()
    lstm = torch.nn.LSTM(6, 5).eval()
    img = torch.randn(2, 3, 8, 8)
    base = torch.randn(4, 8)
    buf = base[0] if phase == "warm" else torch.randn(8)  # warm: aliases the mutated input
    seq = torch.randn(3, 2, 6) if phase == "cold" else torch.randn(4, 2, 6)  # warm: another length, after lstm_same
    return {"bn_step": (bn_step, (bn, img)), "add_to_buffer": (add_to_buffer, (base, buf)),
            "lstm_same": (lstm_call, (lstm, torch.randn(3, 2, 6))), "lstm_call": (lstm_call, (lstm, seq)),
            "pooled": (pooled, (img,)), "store_after": (store_after, (base,)),
            "store_other": (store_after, (base.double(),)), "decorated": (decorated, (base,)),  # warm: after store_after; another dtype
            "rope_same": (rope_same, (RopeA(), base)), "rope_changed": (rope_changed, (RopeB(), base)),
            **({"model_output": (model_output, (base,))} if _Output else {})}


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.allclose(a, b, atol=1e-5)
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))


def main() -> int:
    phase = sys.argv[1]
    lines = _Lines()
    logging.getLogger("torchkiln.cache").addHandler(lines)
    logging.getLogger("torchkiln.cache").setLevel(logging.INFO)
    report, ok = {}, True
    for name, (fn, args) in _cases(phase).items():
        if name in ("lstm_same", "store_other") and phase == "cold":
            continue
        STATE.done, STATE.tag = False, None
        if name == "rope_changed" and phase == "warm":
            RopeB.forward.__defaults__ = (3.0,)
        eager_args = copy.deepcopy(args)
        before = {k: dict(v) for k, v in counters.items()}
        del lines.lines[:]
        with torch.no_grad() if name.startswith("lstm") else torch.enable_grad():
            out = torchkiln.compile(fn)(*args)
            stored = (STATE.done, STATE.tag)
            STATE.done, STATE.tag = False, None
            ref = fn(*eager_args)
        good = stored == (STATE.done, STATE.tag)
        good = good and _same(out, ref) and all(_same(a, b) for a, b in zip(args, eager_args)
                                       if isinstance(a, torch.Tensor))
        if name == "bn_step":  # the running statistics and the gradients too
            good = good and _same(list(args[0].buffers()), list(eager_args[0].buffers()))
            out.sum().backward()
            ref.sum().backward()
            good = good and _same([p.grad for p in args[0].parameters()], [p.grad for p in eager_args[0].parameters()])
        ok = ok and good

        def delta(group, k):
            return counters[group].get(k, 0) - before.get(group, {}).get(k, 0)
        report[name] = {"ok": bool(good), "captured": delta("stats", "unique_graphs"),
                        **{k: delta("warm_start", k) for k in ("hit", "miss", "bypass", "saved", "not_recordable")},
                        "log": list(lines.lines)}
    print(json.dumps({"ok": ok, "frames": report}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
