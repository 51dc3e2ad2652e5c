"""Cache keys: stable across processes, working directories and renamed locals;
different when anything that changes the result changes."""
import json
import os
import subprocess
import sys
import time

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln.aot import AOTConfig, autograd_cache_key
from torchkiln.codegen import config as codegen_config
from torchkiln.codegen.compile_fx import compile_fx_inner
from torchkiln.codegen.fx_graph_cache import cache_key as fx_key

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def f_plain(x, y):
    return (x.sin() + y).relu().sum(1)


def f_renamed(first, second):
    tmp = first.sin()
    other = tmp + second
    result = other.relu()
    return result.sum(1)


def captured(fn, *args):
    got = {}

    def backend(gm, inputs):
        got["gm"], got["inputs"] = gm, inputs
        return gm

    torchkiln.reset()
    torchkiln.compile(fn, backend=backend, fullgraph=True)(*args)
    return got["gm"], got["inputs"]


def aot_key(fn, *args, **cfg):
    gm, inputs = captured(fn, *args)
    return autograd_cache_key(gm, inputs, AOTConfig(compile_fx_inner, aot_id=0, **cfg))


def aten_key(fn, *args):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    return fx_key(gm, vals)


def all_keys():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    return {"aot": aot_key(f_plain, x, y), "aot_renamed": aot_key(f_renamed, x, y),
            "fx": aten_key(f_plain, x, y), "fx_renamed": aten_key(f_renamed, x, y)}


def test_same_key_for_renamed_locals():
    keys = all_keys()
    assert keys["aot"] == keys["aot_renamed"]
    assert keys["fx"] == keys["fx_renamed"]


def test_same_key_across_processes_and_working_directories(tmp_path):
    here = all_keys()
    code = "import json; from tests.cache.test_keys import all_keys; print(json.dumps(all_keys()))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == here


@pytest.mark.parametrize("change", ["dtype", "shape", "stride"])
def test_key_changes_with_input_metadata(change):
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    if change == "dtype":
        x2 = x.double()
        y2 = y.double()
    elif change == "shape":
        x2, y2 = torch.randn(5, 8), torch.randn(5, 8)
    else:
        x2, y2 = torch.randn(8, 4).t(), y
    assert aot_key(f_plain, x, y) != aot_key(f_plain, x2, y2)
    assert aten_key(f_plain, x, y) != aten_key(f_plain, x2, y2)


def _other(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if value is None:
        return 3
    if isinstance(value, str):
        return {"cpp": "triton", "triton": "cpp", "g++": "c++"}.get(value, value + "x")
    return None


def test_key_changes_with_every_codegen_config_field():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    gm = make_fx(f_plain, tracing_mode="fake")(x, y)
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    base = fx_key(gm, vals)
    cgm, inputs = captured(f_plain, x, y)
    aot_base = autograd_cache_key(cgm, inputs, AOTConfig(compile_fx_inner, aot_id=0))
    for name, value in codegen_config.to_dict().items():
        if name == "fx_graph_cache":
            continue
        with codegen_config.patch(name, _other(value)):
            assert fx_key(gm, vals) != base, name
            assert autograd_cache_key(cgm, inputs, AOTConfig(compile_fx_inner, aot_id=0)) != aot_base, name


def test_key_changes_with_grad_mode_and_torch_version(monkeypatch):
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    gm, inputs = captured(f_plain, x, y)
    cfg = AOTConfig(compile_fx_inner, aot_id=0)
    base = autograd_cache_key(gm, inputs, cfg)
    with torch.no_grad():
        assert autograd_cache_key(gm, inputs, cfg) != base
    aten = make_fx(f_plain, tracing_mode="fake")(x, y)
    vals = [n.meta["val"] for n in aten.graph.nodes if n.op == "placeholder"]
    fx_base = fx_key(aten, vals)
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert autograd_cache_key(gm, inputs, cfg) != base
    assert fx_key(aten, vals) != fx_base


def test_key_changes_with_requires_grad_and_autocast():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    base = aot_key(f_plain, x, y)
    assert aot_key(f_plain, x.requires_grad_(), y) != base
    gm, inputs = captured(f_plain, torch.randn(4, 8), torch.randn(4, 8))
    cfg = AOTConfig(compile_fx_inner, aot_id=0)
    k = autograd_cache_key(gm, inputs, cfg)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert autograd_cache_key(gm, inputs, cfg) != k


class _SinFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.sin()


class _CosFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.cos()


def test_autograd_function_apply_named_by_its_class():
    # torch >= 2.15 makes ``Function.apply`` a builtin method bound to the class; naming
    # it by the metaclass gave every Function's apply one name, so two graphs differing
    # only in which Function they call would share a cache entry.
    from torchkiln.cache.keys import callable_name

    sin_name, cos_name = callable_name(_SinFunction.apply), callable_name(_CosFunction.apply)
    assert sin_name != cos_name
    assert "_SinFunction" in sin_name and "_CosFunction" in cos_name


def test_an_unsaved_graph_stays_findable_until_its_entry_is_written():
    """A backward whose build is still running when its frame is dropped (reset) must be
    found by an AOT cache hit: held until its entry is written (the flaky lazy-backward test)."""
    import gc

    from torchkiln.codegen import fx_graph_cache

    class Graph:
        pass

    g = Graph()
    fx_graph_cache.remember("fxunsaved", g)
    del g
    gc.collect()
    assert fx_graph_cache.live("fxunsaved") is not None
    fx_graph_cache.settled("fxunsaved")
    gc.collect()
    assert fx_graph_cache.live("fxunsaved") is None
    g2 = Graph()
    fx_graph_cache.remember("fxunsaved", g2)  # already written: only while alive
    assert fx_graph_cache.live("fxunsaved") is g2


def test_torch_closures_published_by_name_have_a_stable_name():
    """``F.max_pool2d`` is ``boolean_dispatch.<locals>.fn``: named by where torch publishes
    it (the torch version is in the key); a local function of the user's has no name."""
    import torch.nn.functional as F

    from torchkiln.cache.keys import BypassCache, callable_name

    assert callable_name(F.max_pool2d) == "torch.nn.functional.max_pool2d"
    assert callable_name(F.max_pool2d) != callable_name(F.max_pool1d)

    def local(x):
        return x

    with pytest.raises(BypassCache):
        callable_name(local)


def test_key_names_the_device_index():
    """A wrapper allocates its buffers on the device it was compiled for: a graph compiled on
    cuda:0 must not be loaded on cuda:1 (on 2 GPUs, rank 1 of a DDP run loaded rank 0's
    entry and launched a Triton kernel on a buffer of the other GPU)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from torchkiln.cache import keys

    if torch.cuda.is_available() and torch.cuda.device_count() < 2:
        pytest.skip("a fake cuda:1 tensor needs a second GPU where CUDA is initialised (1 GPU here)")
    with FakeTensorMode():
        on0, on1 = torch.empty(4, device="cuda:0"), torch.empty(4, device="cuda:1")
    assert keys.inputs_description([on0]) != keys.inputs_description([on1])
    assert keys.inputs_description([torch.empty(4)]) == keys.inputs_description([torch.empty(4)])


def test_source_hash_memo_follows_every_file_change(tmp_path, monkeypatch):
    """The torchkiln source hash (in every key) is read from the local store while no
    file changed; an edit of the same size with the old mtime restored, a new file or a
    removed one all hash again, and the value always equals a full hash's."""
    from torchkiln.cache import clear_memory, keys

    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    (root / "a.py").write_text("x = 1\n")
    (root / "sub" / "b.py").write_text("y = 2\n")

    def full():
        import hashlib

        h = hashlib.sha256()
        for dirpath, dirnames, filenames in os.walk(root):  # every .py file, by directory then name
            dirnames.sort()
            for name in sorted(n for n in filenames if n.endswith(".py")):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, root).encode() + b"\0" + open(path, "rb").read())
        return h.hexdigest()

    first = keys.source_hash(str(root))
    assert first == full()
    memo_dir = os.path.join(os.environ["TORCHKILN_CACHE_DIR"], keys.SOURCE_HASH_NAMESPACE)
    assert not os.path.isdir(memo_dir)  # files written just now are not memoized (racy)
    monkeypatch.setattr(keys, "RACY_S", -1.0)
    assert keys.source_hash(str(root)) == first
    assert len(os.listdir(memo_dir)) == 1
    clear_memory()
    time.sleep(0.05)  # past the file clock's tick
    assert keys.source_hash(str(root)) == first  # from the memo
    st = os.stat(root / "a.py")
    (root / "a.py").write_text("x = 3\n")  # same size, old mtime put back: the ctime still moves
    os.utime(root / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns))
    second = keys.source_hash(str(root))
    assert second != first and second == full()
    (root / "c.py").write_text("")
    assert keys.source_hash(str(root)) == full() != second
    os.unlink(root / "c.py")
    assert keys.source_hash(str(root)) == second
    # a damaged memo value is never used
    fp_key = keys._source_hash_memo(str(root), keys._source_files(str(root)))[1]
    from torchkiln.cache.store import get_store

    get_store().local.put(keys.SOURCE_HASH_NAMESPACE, fp_key, b"not a hash")
    assert keys.source_hash(str(root)) == second
