"""The store: entry framing, damaged entries, atomic writes, LRU bound, write failures."""
import errno
import os
import warnings

import pytest

from torchkiln import counters
from torchkiln.cache import entry
from torchkiln.cache import store as store_mod
from torchkiln.cache.store import LocalStore, TieredStore, get_store


def test_pack_roundtrip():
    payload = entry.pack({"a": [1, "x"]}, {"so": b"\x7fELF" + bytes(range(256)), "src": b"int x;"})
    meta, blobs = entry.unpack(entry.decode(entry.encode(payload)))
    assert meta == {"a": [1, "x"]}
    assert blobs["so"].startswith(b"\x7fELF") and blobs["src"] == b"int x;"


def _damage(path, how):
    data = open(path, "rb").read()
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "bit_flip":
        i = len(data) - 3
        data = data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1:]
    elif how == "emptied":
        data = b""
    elif how == "old_version":
        magic, _, res, length, digest = entry._HEADER.unpack_from(data)
        data = entry._HEADER.pack(magic, entry.FORMAT_VERSION - 1 or 99, res, length, digest) + data[entry.HEADER_SIZE:]
    elif how == "header_flip":
        data = bytes([data[0] ^ 1]) + data[1:]
    open(path, "wb").write(data)


@pytest.mark.parametrize("how", ["truncated", "bit_flip", "emptied", "old_version", "header_flip"])
def test_damaged_entry_is_a_counted_miss_and_removed(tmp_path, how):
    local = LocalStore(str(tmp_path))
    local.put("ns", "k1", b"payload" * 100)
    assert local.get("ns", "k1") == b"payload" * 100
    path = local.path("ns", "k1")
    _damage(path, how)
    before = counters["cache"]["corrupt"]
    with warnings.catch_warnings():  # one warning per process and namespace
        warnings.simplefilter("ignore")
        assert local.get("ns", "k1") is None
    assert counters["cache"]["corrupt"] == before + 1
    assert not os.path.exists(path)


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path, monkeypatch):
    local = LocalStore(str(tmp_path))
    local.put("ns", "k", b"old")

    def fail(fd, data):
        os.write(fd, data[:3])
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(store_mod, "_write_all", fail)
    with pytest.warns(UserWarning, match="cannot write"):
        local.put("ns", "k", b"new value")
    assert local.get("ns", "k") == b"old"  # the old entry is intact, never half-written
    assert sorted(os.listdir(tmp_path / "ns")) == ["k.entry"]


def test_disk_full_is_a_warning(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_mod, "_write_all", full)
    store = TieredStore(LocalStore(str(tmp_path)))
    before = counters["cache"]["put_error"]
    store.put("ns", "k", b"x")  # may warn once per process (ENOSPC)
    assert counters["cache"]["put_error"] == before + 1
    assert store.get("ns", "k") == b"x"  # the memory layer still has it
    assert os.listdir(tmp_path / "ns") == []


def test_lru_eviction_keeps_recent_entries(tmp_path):
    local = LocalStore(str(tmp_path), limit=10_000)
    for i in range(8):
        local.put("ns", f"k{i}", bytes(1000))
        os.utime(local.path("ns", f"k{i}"), (1000 + i, 1000 + i))
    local.get("ns", "k0")  # recently used: survives
    for i in range(8, 14):
        local.put("ns", f"k{i}", bytes(1000))
    total = sum(size for _, size, _ in local.entries())
    assert total <= 10_000
    assert local.get("ns", "k0") is not None
    assert local.get("ns", "k1") is None
    assert local.get("ns", "k13") is not None
    assert counters["cache"]["evicted"] > 0


def test_eviction_covers_libraries_and_modules_and_skips_held_locks(tmp_path):
    """cpp/ libraries (with their .cpp, .so.sha256), Triton modules and entries count
    toward the bound and go oldest first, a key's files together; a key whose lock a
    compile holds, lock files themselves and fresh temporary files stay."""
    import filelock

    local = LocalStore(str(tmp_path), limit=12_000)
    cpp, triton = tmp_path / "cpp", tmp_path / "triton"
    cpp.mkdir()
    triton.mkdir()
    files = {"held": ["held.so", "held.so.sha256"], "old": ["old.so", "old.so.sha256", "old.cpp"]}  # oldest first
    for i, (key, names) in enumerate(files.items()):
        for name in names:
            (cpp / name).write_bytes(bytes(4000))
            os.utime(cpp / name, (100 + i, 100 + i))
        (cpp / f"{key}.so.lock").write_bytes(b"")
    (triton / "mod.py").write_bytes(bytes(4000))
    os.utime(triton / "mod.py", (105, 105))
    (cpp / "fresh.so.123.tmp").write_bytes(bytes(100))
    held = filelock.FileLock(str(cpp / "held.so.lock"))
    with held:
        for i in range(3):
            local.put("ns", f"k{i}", bytes(1000))
    assert not (cpp / "old.so").exists() and not (cpp / "old.cpp").exists() and not (cpp / "old.so.sha256").exists()
    assert (cpp / "old.so.lock").exists()  # never deleted: another process may wait on it
    assert (cpp / "held.so").exists() and (cpp / "held.so.sha256").exists()
    assert not (triton / "mod.py").exists()
    assert (cpp / "fresh.so.123.tmp").exists()
    assert all(local.get("ns", f"k{i}") is not None for i in range(3))
    local.clear()
    assert sorted(os.listdir(cpp)) == ["fresh.so.123.tmp", "held.so.lock", "old.so.lock"]


def test_size_limit_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHKILN_CACHE_SIZE_LIMIT", "3M")
    assert get_store().local.limit == 3 << 20
    assert store_mod.parse_size("5G") == 5 << 30 and store_mod.parse_size("1234") == 1234


def test_tiered_lookup_fills_memory(tmp_path):
    store = TieredStore(LocalStore(str(tmp_path)))
    store.put("ns", "k", b"v")
    store.memory.clear()
    assert store.get("ns", "k") == b"v"
    assert store.memory.get("ns", "k") == b"v"
    store.clear("ns")
    assert store.get("ns", "k") is None
