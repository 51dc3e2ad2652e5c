"""Run in a subprocess by tests/cache/test_warm_start.py: import the frames module the
test wrote (``wsframes.py`` in the directory given as argv[1]), call each of its
functions once as the phase (argv[2]: ``cold`` or ``warm``) says, check every result
against eager and print one JSON line: per function the warm-start counters it moved
and whether capture ran (``captured``: unique graphs added), plus its frame key."""
import json
import sys

import torch

import torchkiln
from torchkiln import counters
from torchkiln.capture import warm_start
from torchkiln.shapes.policy import DynamicPolicy


def main() -> int:
    sys.path.insert(0, sys.argv[1])
    phase = sys.argv[2]
    import wsframes

    torch.manual_seed(0)
    x = torch.randn(4, 8, requires_grad=True)
    calls = {name: (x,) for name in wsframes.NAMES}
    if phase == "warm":
        calls["f_shape"] = (torch.randn(5, 8, requires_grad=True),)
        calls["f_dtype"] = (torch.randn(4, 8, dtype=torch.float64, requires_grad=True),)
    report, ok = {}, True
    from torchkiln.codegen.compile_fx import compile_fx

    protocol = compile_fx.frame_cache
    for name in wsframes.NAMES:
        fn = getattr(wsframes, name)
        before = {k: dict(v) for k, v in counters.items()}
        patch = torchkiln.config.patch(cache_size_limit=7) if phase == "warm" and name == "f_config" \
            else torchkiln.config.patch()
        with patch:
            key = warm_start.frame_key(fn, protocol, False, DynamicPolicy())
            out = torchkiln.compile(fn)(*calls[name])
        ref = fn(*calls[name])
        good = isinstance(out, tuple) and len(out) == len(ref) and torch.allclose(out[0], ref[0]) and out[1:] == ref[1:]
        grads = torch.autograd.grad(out[0].sum(), calls[name][0])[0]
        good = good and torch.allclose(grads, torch.autograd.grad(ref[0].sum(), calls[name][0])[0])
        ok = ok and good

        def delta(group, k):
            return counters[group].get(k, 0) - before.get(group, {}).get(k, 0)
        report[name] = {"ok": bool(good), "key": key, "captured": delta("stats", "unique_graphs"),
                        **{k: delta("warm_start", k) for k in ("hit", "miss", "bypass", "saved", "not_recordable")},
                        "reasons": {r: delta("warm_start_bypass", r) for r in counters["warm_start_bypass"]
                                    if delta("warm_start_bypass", r)}}
    print(json.dumps({"ok": ok, "frames": report, "corrupt": counters["cache"].get("corrupt", 0)}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
