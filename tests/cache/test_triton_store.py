"""Triton's compiled kernels in the store: the CacheManager protocol Triton's compiler
uses (``get_group`` on lookup; ``put`` of each file and ``put_group`` after compiling),
driven as ``triton.compiler.compile`` drives it.  A real compile needs a GPU: the lead's
GPU check (docs/cache.md) runs a warm start and counts compiles."""
import json
import os

import pytest

pytest.importorskip("triton")

from torchkiln import counters  # noqa: E402
from torchkiln.cache import store as store_mod  # noqa: E402
from torchkiln.cache import triton_store  # noqa: E402


@pytest.fixture
def triton_env(tmp_path, monkeypatch):
    from triton import knobs

    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path / "kiln"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    with knobs.cache.scope():
        store_mod.clear_memory()
        yield tmp_path
    store_mod.clear_memory()


def _compile_like_triton(manager_cls, key):
    """What triton.compiler.compile does with the manager: look up, else 'compile' and save."""
    mgr = manager_cls(key)
    group = mgr.get_group("kernel0.json")
    if group is not None:
        return "hit", group
    group = {"kernel0.cubin": mgr.put(b"\x7fELF" + bytes(range(256)), "kernel0.cubin"),
             "kernel0.ptx": mgr.put("// ptx", "kernel0.ptx", binary=False)}
    group["kernel0.json"] = mgr.put(json.dumps({"name": "kernel0"}), "kernel0.json", binary=False)
    mgr.put_group("kernel0.json", group)
    return "miss", group


def test_scoped_compiles_go_through_the_store_and_hit_in_a_new_process(triton_env):
    from triton import knobs

    assert triton_store.install()
    cls = knobs.cache.manager_class
    assert cls is triton_store.StoreCacheManager
    with triton_store.scoped():
        assert _compile_like_triton(cls, "KEYA")[0] == "miss"
    assert sorted(os.listdir(triton_env / "kiln" / "triton")) == sorted(
        f"KEYA-{n}.entry" for n in ("kernel0.cubin", "kernel0.ptx", "kernel0.json", "__grp__kernel0.json"))
    assert not (triton_env / "triton").exists() or not os.listdir(triton_env / "triton")  # nothing in Triton's dir
    store_mod.clear_memory()  # a new process: only the directory is left
    with triton_store.scoped():
        status, group = _compile_like_triton(cls, "KEYA")
    assert status == "hit"
    assert counters["inductor"]["triton_cache_hit"] == 1 and counters["inductor"]["triton_cache_saved"] == 1
    with open(group["kernel0.cubin"], "rb") as f:
        assert f.read() == b"\x7fELF" + bytes(range(256))
    assert json.load(open(group["kernel0.json"])) == {"name": "kernel0"}


def test_unscoped_compiles_keep_tritons_file_cache(triton_env):
    """torch.compile's (or a user's) Triton kernels in the same process are untouched."""
    triton_store.install()
    cls = triton_store.StoreCacheManager
    assert _compile_like_triton(cls, "KEYB")[0] == "miss"
    assert _compile_like_triton(cls, "KEYB")[0] == "hit"
    assert os.listdir(triton_env / "triton" / "KEYB")
    assert not (triton_env / "kiln" / "triton").exists()


def test_damaged_or_evicted_file_recompiles(triton_env):
    triton_store.install()
    cls = triton_store.StoreCacheManager
    with triton_store.scoped():
        _compile_like_triton(cls, "KEYC")
    path = triton_env / "kiln" / "triton" / "KEYC-kernel0.cubin.entry"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    store_mod.clear_memory()
    before = counters["cache"]["corrupt"]
    with triton_store.scoped():
        assert _compile_like_triton(cls, "KEYC")[0] == "miss"
    assert counters["cache"]["corrupt"] == before + 1
    os.unlink(triton_env / "kiln" / "triton" / "KEYC-kernel0.ptx.entry")  # evicted
    store_mod.clear_memory()
    with triton_store.scoped():
        assert _compile_like_triton(cls, "KEYC")[0] == "miss"


def test_user_cache_manager_is_respected(triton_env):
    from triton import knobs
    from triton.runtime.cache import FileCacheManager

    class Mine(FileCacheManager):
        pass

    knobs.cache.manager_class = Mine
    assert not triton_store.install()
    assert knobs.cache.manager_class is Mine


def test_bind_scopes_a_jit_functions_run(triton_env):
    seen = []

    class FakeJit:
        def run(self, *args, **kwargs):  # Triton compiles inside run, on a cache miss
            seen.append(getattr(triton_store._scope, "depth", 0))
            return "kernel"

    fn = FakeJit()
    triton_store.bind(fn)
    triton_store.bind(fn)  # idempotent
    assert fn.run("src", warmup=True) == "kernel"
    assert seen == [1]
    assert getattr(triton_store._scope, "depth", 0) == 0


def test_generated_modules_bind_their_kernels(triton_env, tmp_path):
    import importlib.util

    # a real file, as generated modules are: Triton (3.6) reads a kernel's source from it
    path = tmp_path / "torchkiln_test_kernels.py"
    path.write_text("import triton\n@triton.jit\ndef k(x):\n    pass\n")
    spec = importlib.util.spec_from_file_location("torchkiln_test_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if type(module.k).__name__ != "JITFunction":
        pytest.skip("Triton's interpreter is active: nothing compiles")
    triton_store.bind_module(module)
    assert module.k.run._torchkiln_scoped


def test_driver_stubs_are_written_through_to_the_store(triton_env, tmp_path, monkeypatch):
    """Triton's C utilities/launchers (built outside a kernel compile) stay in Triton's
    directory and reach the store too: a machine with an empty Triton directory finds them."""
    from triton import knobs

    triton_store.install()
    cls = triton_store.StoreCacheManager
    name = "cuda_utils.cpython-311-x86_64-linux-gnu.so"
    assert cls("KEYD").get_file(name) is None
    cls("KEYD").put(b"\x7fELF stub", name)
    assert os.path.exists(triton_env / "triton" / "KEYD" / name)
    store_mod.clear_memory()
    knobs.cache.dir = str(tmp_path / "other-triton")  # another machine: empty Triton directory
    path = cls("KEYD").get_file(name)
    assert path.startswith(str(tmp_path / "other-triton")) and open(path, "rb").read() == b"\x7fELF stub"


def test_triton_key_is_read_from_the_store_while_tritons_files_are_unchanged(triton_env, monkeypatch):
    """``triton_key()`` (Triton's sources and libtriton hashed, ~0.4-1 s) is computed once
    per Triton install, then read from the store by new processes; another fingerprint
    of Triton's files (one changed) computes it again."""
    import triton.runtime.cache as triton_cache

    calls = []
    fingerprint = triton_store._triton_fingerprint

    def original():
        calls.append(1)
        return "3.x-abc-def"

    def new_process():
        store_mod.clear_memory()
        monkeypatch.setattr(triton_cache, "triton_key", original)
        monkeypatch.setattr(triton_store, "_triton_key_original", None)
        triton_store.memoize_triton_key()
        triton_store.memoize_triton_key()  # idempotent
        return triton_cache.triton_key()

    assert new_process() == "3.x-abc-def" and len(calls) == 1
    assert triton_cache.get_cache_key.__globals__["triton_key"] is triton_cache.triton_key  # what compile() calls
    assert new_process() == "3.x-abc-def" and len(calls) == 1  # read from the store
    monkeypatch.setattr(triton_store, "_triton_fingerprint", lambda root: "f" * 64)
    assert new_process() == "3.x-abc-def" and len(calls) == 2  # Triton's files changed: computed again
    import triton

    root = os.path.dirname(triton.__file__)
    assert fingerprint(root) == fingerprint(root) != "f" * 64
