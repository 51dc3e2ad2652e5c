"""Warm start past capture (capture/warm_start.py): a new process installs frames
from their records without capture, and every reason to doubt a record falls back to
capture with a correct result.  Two subprocesses in all (cold, then warm), each
calling one frame per case, so the suite pays for two imports."""
import json

import pytest
import torch

from torchkiln.cache import entry as cache_entry

from ._subprocess import run_worker


FRAMES = '''
import os
import torch

SCALE = float(os.environ.get("WS_SCALE", "2.0"))
NAMES = ["f_hit", "f_global", "f_source", "f_config", "f_shape", "f_dtype", "f_damaged", "f_forged", "f_defaults"]


def helper(x):
    return torch.relu(x) * 2.0 + 1.0


def changing_helper(x):
    return torch.relu(x) * 2.0 + HELPER_CONSTANT


def f_hit(x):
    return helper(x), [x.shape[0], "a"]


def f_global(x):
    return torch.relu(x) * SCALE + 1.0, (x.dtype,)


def f_source(x):
    return changing_helper(x), None


def f_config(x):
    return helper(x), 1


def f_shape(x):
    return helper(x), 2


def f_dtype(x):
    return helper(x), 3


def f_damaged(x):
    return helper(x), 4


def f_forged(x):
    return helper(x), 5


def scaled(x, k=float(os.environ.get("WS_K", "2.0"))):
    return torch.relu(x) * k + 1.0


def f_defaults(x):
    return scaled(x), 6
'''


def _write(tmp_path, constant="1.0"):
    (tmp_path / "wsframes.py").write_text(FRAMES.replace("HELPER_CONSTANT", constant))
    for cached in (tmp_path / "__pycache__").glob("*"):
        cached.unlink()


def _run(tmp_path, phase, **env):
    return run_worker("tests.cache._warm_worker", str(tmp_path), phase, **env)


def test_warm_start_hits_and_bypasses(tmp_path, fresh_cache):
    _write(tmp_path)
    cold = _run(tmp_path, "cold")
    assert cold["ok"]
    for name, f in cold["frames"].items():
        assert f["captured"] == 1 and f["saved"] == 1 and f["hit"] == 0, (name, f)

    frames_dir = fresh_cache / "frames"
    # a damaged record (a flipped byte): the store's checksum makes it a miss
    damaged = frames_dir / (cold["frames"]["f_damaged"]["key"] + ".entry")
    data = bytearray(damaged.read_bytes())
    data[-5] ^= 0xFF
    damaged.write_bytes(bytes(data))
    # a forged record with a valid checksum: its guard would run code; refused unread
    marker = tmp_path / "pwned"
    forged = frames_dir / (cold["frames"]["f_forged"]["key"] + ".entry")
    body, _ = cache_entry.unpack(cache_entry.decode(forged.read_bytes()))
    body["records"][0]["guards"].insert(0, [f"__import__('pathlib').Path({str(marker)!r}).touch() is None", None])
    forged.write_bytes(cache_entry.encode(cache_entry.pack(body)))

    _write(tmp_path, constant="3.0")  # changing_helper's source changed; f_source itself did not
    warm = _run(tmp_path, "warm", WS_SCALE="5.0", WS_K="3.0")
    assert warm["ok"]  # every result equals eager's
    frames = warm["frames"]
    assert frames["f_hit"]["hit"] == 1 and frames["f_hit"]["captured"] == 0
    assert frames["f_global"]["captured"] == 1 and frames["f_global"]["reasons"] == {"guard failed": 1}
    assert frames["f_source"]["captured"] == 1 and frames["f_source"]["reasons"] == {"changed source": 1}
    assert frames["f_config"]["captured"] == 1 and frames["f_config"]["miss"] == 1  # another key
    assert frames["f_shape"]["captured"] == 1 and frames["f_shape"]["reasons"] == {"guard failed": 1}
    assert frames["f_dtype"]["captured"] == 1 and frames["f_dtype"]["reasons"] == {"guard failed": 1}
    assert frames["f_damaged"]["captured"] == 1 and frames["f_damaged"]["miss"] == 1
    assert warm["corrupt"] == 1
    assert frames["f_forged"]["captured"] == 1 and frames["f_forged"]["reasons"] == {"damaged record": 1}
    assert not marker.exists()
    assert frames["f_defaults"]["captured"] == 1 and frames["f_defaults"]["bypass"] == 1  # an inlined default changed
    # what the warm process captured again is recorded again (for the next process)
    assert frames["f_global"]["saved"] == 1 and frames["f_shape"]["saved"] == 1


def test_record_describes_guards_and_result():
    """In process: a record's guards and result are data that rebuild the same checks."""
    import torchkiln
    from torchkiln.capture import warm_start

    def f(x, n):
        return torch.sin(x) + n, (x.shape, "k")

    torchkiln.reset()
    out = torchkiln.compile(f)(torch.ones(3), 2)
    assert torch.allclose(out[0], torch.sin(torch.ones(3)) + 2) and out[1] == (torch.Size([3]), "k")
    json.dumps(warm_start.encode((torch.float32, torch.device("cpu"), 3, "a")))
    assert warm_start.decode(warm_start.encode(torch.nn.Linear)) is torch.nn.Linear
    assert warm_start.decode(warm_start.encode(torch.float16)) is torch.float16
    for bad in ("__import__('os')", "L['x'].__class__.__subclasses__()", "(lambda: 1)()", "L['x'].numpy()"):
        try:
            warm_start.check_expr(bad)
        except warm_start.NotRecordable:
            continue
        raise AssertionError(f"accepted {bad}")



GOOD_EXPRS = ["L['x'].size()[0] == 3 and not L['y'].requires_grad", "type(L['m']) is ___c0", "L['s'][1:None:2] == (1,)",
              "L['d'].keys() == {'a': 1}.keys()", "-L['n'] < ___inf", "L['f'].__defaults__ == (1, None)",
              "___m0(last_hidden_state=___o[0])", "___new(___n0, key_cache=L['c'])", "___deref(L['w'][0]) is None",
              "len({1, 2}) in [2, 3]", "G['__name__'] == 'm'"]
BAD_EXPRS = ["__import__('os')", "L['x'].__class__.__subclasses__()", "(lambda: 1)()", "L['x'].numpy()", "x",
             "[i for i in L]", "len(*L)", "L['x'].size(dim=0)", "___m0(1)", "___m0(**L)", "___new(L, a=1)",
             "___new(___n0, __a=1)", "(y := 1)", "L if G else L", "L + 1", "f'{L}'", "L['x'].__globals__",
             "getattr(L, 'x')()", "___c0(1)"]


def test_record_grammar():
    """What a record's expressions may hold (checked each time a record is loaded):
    names L, G, ___*, a few builtins; no dunder attribute but the function/module ones
    guards read; calls of a few builtins and tensor methods only."""
    from torchkiln.capture import warm_start

    names = warm_start.check_exprs(GOOD_EXPRS)
    assert {"L", "G", "___c0", "___m0", "___new", "___n0", "___deref", "___o", "___inf", "type", "len"} <= names
    for bad in BAD_EXPRS:
        with pytest.raises(warm_start.NotRecordable):
            warm_start.check_exprs(GOOD_EXPRS + [bad])
    # a size part's source (read by failure reasons) and a full-shape part's expected sizes
    # (evaluated by automatic dynamic) are checked too, before the guard is built
    assert warm_start._size_sources([["L['x'].shape == (4, 8)", ["L['x']", None]], ["L['x'].size(0) == 4", ["L['x']", 0]],
                                     ["L['x'].stride() == (8, 1)", ["L['x']", "stride"]]]) == ["L['x']"] * 3
    with pytest.raises(warm_start.NotRecordable):
        warm_start.check_exprs(warm_start._size_sources([["len(L['x']) == 2", ["___ran.append(1)", 0]]]))
    for forged in (["L['x'] == 'a == __import__(\"os\") #'", ["L['x']", None]],
                   ["L['x'].shape == (4, 8)", ["L['y']", None]], ["L['x'].size(0) == 4", ["L['x']", "other"]]):
        with pytest.raises(warm_start.NotRecordable):
            warm_start._size_sources([forged])


def test_str_set_order_is_not_recorded():
    """A frame that iterated a set of strings is not recorded: str hashing is salted per
    process, so another process would iterate the set in another order than the graph
    baked in.  A set of ints (hashes the same everywhere) and a membership test are."""
    import torchkiln
    from torchkiln.utils.counters import counters

    def over_strings(x):
        return [x * len(k) for k in {"alpha", "beta", "gamma"}]

    def over_ints(x):
        return [x * v for v in {3, 1000, 7}]

    def membership(x):
        return x * (2 if "a" in {"a", "b"} else 3)

    for fn, saved in ((over_strings, 0), (over_ints, 1), (membership, 1)):
        torchkiln.reset()
        counters.clear()
        out = torchkiln.compile(fn)(torch.ones(2))
        expected = fn(torch.ones(2))
        assert all(torch.equal(a, b) for a, b in zip(out, expected)) if isinstance(out, list) else torch.equal(out, expected)
        assert counters["warm_start"]["saved"] == saved, (fn.__name__, dict(counters["warm_start"]))


def test_record_parts_keep_the_relation_flag():
    """A ShapeEnv relation's part is recorded ``[code, size_of, True]`` and read back as a
    relation (automatic dynamic passes over a failing one); two-item parts stay readable."""
    from torchkiln.capture.warm_start import NotRecordable, _part, _record_guard

    parts = [["L['s'][0] == 3", ["L['s'][0]", "value"]], ["L['s'][1] == 7 - L['s'][2]", None, True]]
    assert [_part(p)[2] for p in parts] == [False, True]
    guard, _, _ = _record_guard({}, parts, [], [], {"s": [3, 4, 3]})
    assert [p.relation for p in guard._parts] == [False, True]
    assert guard.check({"s": [3, 4, 3]}) and not guard.check({"s": [3, 5, 3]})
    for bad in (["x"], ["x", None, False], ["x", None, True, 1]):
        with pytest.raises(NotRecordable):
            _part(bad)
