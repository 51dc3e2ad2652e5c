"""Faults: every one ends in a result equal to eager's and a live process.

Concurrent writers, damaged entries and libraries, an unusable cache directory, a
full disk.  (Redis faults are in test_redis.py.)
"""
import errno
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

import torchkiln
from torchkiln import counters
from torchkiln.cache import clear_memory
from torchkiln.cache import store as store_mod
from .test_store import _damage

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def worker(cache_dir, *extra, env=None):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p), TORCHKILN_CACHE_DIR=str(cache_dir), **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "tests.cache._worker", *extra], cwd=REPO, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(p, timeout=300):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"worker exited with {p.returncode}:\n{err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1])


def fn(x, w):
    return torch.nn.functional.gelu(x @ w).softmax(-1) * 2


def run_and_check(requires_grad=True):
    x = torch.randn(8, 16)
    w = torch.randn(16, 16, requires_grad=requires_grad)
    w2 = w.detach().clone().requires_grad_(requires_grad)
    torchkiln.reset()
    out = torchkiln.compile(fn)(x, w2)
    ref = fn(x, w)
    torch.testing.assert_close(out, ref)
    if requires_grad:
        out.sum().backward()
        ref.sum().backward()
        torch.testing.assert_close(w2.grad, w.grad)


def test_four_processes_fill_one_empty_cache_at_once(fresh_cache):
    procs = [worker(fresh_cache) for _ in range(4)]
    results = [result(p) for p in procs]
    assert all(r["ok"] for r in results)
    names = [n for _, _, files in os.walk(fresh_cache) for n in files]
    assert not [n for n in names if n.startswith(".tmp-")]
    assert any(n.endswith(".entry") for n in names)
    again = result(worker(fresh_cache))
    assert again["counters"]["aot_autograd"].get("autograd_cache_hit", 0) >= 1


@pytest.mark.parametrize("how", ["truncated", "bit_flip", "emptied", "old_version"])
def test_damaged_entries_are_recompiled(fresh_cache, how):
    run_and_check()
    entries = [os.path.join(d, n) for d, _, files in os.walk(fresh_cache) for n in files if n.endswith(".entry")]
    assert entries
    for path in entries:
        _damage(path, how)
    clear_memory()
    counters.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_and_check()
    assert counters["cache"]["corrupt"] >= 1
    assert counters["aot_autograd"]["autograd_cache_hit"] == 0
    assert counters["aot_autograd"]["autograd_cache_saved"] >= 1  # written again


def test_damaged_files_in_a_new_process(fresh_cache):
    """Truncated libraries (a mapped damaged .so used to kill the next process with
    SIGBUS) and bit-flipped entries: the next process recompiles and survives."""
    assert result(worker(fresh_cache))["ok"]
    for d, _, files in os.walk(fresh_cache):
        for n in files:
            path = os.path.join(d, n)
            if n.endswith(".so"):
                data = open(path, "rb").read()
                open(path, "wb").write(data[: len(data) // 3])
            elif n.endswith(".entry"):
                _damage(path, "bit_flip")
    assert result(worker(fresh_cache))["ok"]


def test_unusable_cache_directory(tmp_path, monkeypatch):
    """The cache root cannot be created (its parent is a file; tests run as root, who
    ignores permission bits): compiling still gives eager's results."""
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(blocker / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_and_check()
        run_and_check(requires_grad=False)


def test_disk_full(fresh_cache, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_mod, "_write_all", full)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_and_check()
    assert counters["cache"]["put_error"] >= 1
    assert not [n for _, _, files in os.walk(fresh_cache) for n in files if n.endswith(".entry")]
