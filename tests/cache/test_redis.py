"""The remote cache on a real ``redis-server`` (started here on a free loopback port):
signed entries shared by two processes, forged entries rejected and never executed,
a server that dies mid-run, and the no-secret rules."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings

import pytest
import torch

import torchkiln
from torchkiln import counters
from torchkiln.cache import clear_memory, entry, get_store
from torchkiln.cache.store import SIGNED, UNSIGNED, RedisStore

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REDIS = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)
pytestmark = pytest.mark.skipif(REDIS is None, reason="redis-server not found (apt-get install redis-server)")
redis = pytest.importorskip("redis", reason="redis-py not installed (pip install redis)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_server(tmp_path):
    port = _free_port()
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.02)
    else:
        proc.kill()
        pytest.fail("redis-server did not start")
    yield proc, url, client
    proc.kill()
    proc.wait()


@pytest.fixture
def remote(redis_server, monkeypatch):
    proc, url, client = redis_server
    monkeypatch.setenv("TORCHKILN_REMOTE_CACHE", url)
    monkeypatch.setenv("TORCHKILN_CACHE_SECRET", "fleet-secret")
    return redis_server


def fn(x, w):
    return (x @ w).tanh() + 1


def check(requires_grad=False):
    x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=requires_grad)
    torchkiln.reset()
    out = torchkiln.compile(fn)(x, w)
    torch.testing.assert_close(out, fn(x, w))
    return out


def new_local_dir(tmp_path, monkeypatch, name):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path / name))
    clear_memory()


def test_two_processes_share_artifacts(remote, tmp_path):
    proc, url, client = remote
    check(requires_grad=True)
    assert client.keys("torchkiln:fxgraph:*") and client.keys("torchkiln:aotautograd:*")
    secret_file = tmp_path / "secret"  # the other machine reads the secret from a key file
    secret_file.write_text(os.environ["TORCHKILN_CACHE_SECRET"] + "\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p), TORCHKILN_CACHE_DIR=str(tmp_path / "other_machine"),
               TORCHKILN_CACHE_SECRET_FILE=str(secret_file))
    del env["TORCHKILN_CACHE_SECRET"]
    code = ("import json, torch, torchkiln; from tests.cache.test_redis import check; check(True); "
            "print(json.dumps({k: dict(v) for k, v in torchkiln.counters.items()}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["cache"]["remote_hit"] >= 2
    assert got["aot_autograd"]["autograd_cache_hit"] == 1
    assert "fxgraph_cache_miss" not in got["inductor"]
    assert os.listdir(tmp_path / "other_machine" / "fxgraph")  # written back locally


def _forge(client, marker):
    """Every FX entry in the server replaced by one whose wrapper would create
    ``marker``: once unsigned, once signed with another secret."""
    forged = []
    for k in client.keys("torchkiln:fxgraph:*"):
        value = client.get(k)
        data = value[4 + 32:]
        meta, blobs = entry.unpack(entry.decode(data))
        meta["wrapper"] = f"open({str(marker)!r}, 'w').write('pwned')\n" + meta["wrapper"]
        evil = entry.encode(entry.pack(meta, blobs))
        forged.append((k, evil))
    return forged


@pytest.mark.parametrize("how", ["unsigned", "other_secret"])
def test_forged_entry_is_rejected_and_never_executed(remote, tmp_path, monkeypatch, how):
    proc, url, client = remote
    check()
    marker = tmp_path / "marker"
    for k, evil in _forge(client, marker):
        if how == "unsigned":
            client.set(k, UNSIGNED + evil)
        else:
            other = RedisStore(url, b"attacker-secret")
            client.set(k, SIGNED + other._mac(k.decode(), evil) + evil)
    client.delete(*client.keys("torchkiln:aotautograd:*"), *client.keys("torchkiln:frames:*"))  # only FX entries left
    new_local_dir(tmp_path, monkeypatch, "fresh")
    counters.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check()
    assert not marker.exists()
    assert counters["cache"]["remote_rejected"] >= 1
    assert counters["cache"].get("remote_hit", 0) == 0
    assert any("signature" in str(w.message) for w in caught)


def test_server_killed_mid_run(remote, tmp_path, monkeypatch):
    proc, url, client = remote
    check()
    proc.kill()
    proc.wait()
    new_local_dir(tmp_path, monkeypatch, "after_kill")
    counters.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(requires_grad=True)
    assert counters["cache"]["remote_error"] >= 1
    assert any("unavailable" in str(w.message) for w in caught)


def test_without_secret_the_remote_is_off_unless_unsigned_is_allowed(redis_server, monkeypatch):
    proc, url, client = redis_server
    monkeypatch.setenv("TORCHKILN_REMOTE_CACHE", url)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert get_store().remote is None
    monkeypatch.setenv("TORCHKILN_CACHE_ALLOW_UNSIGNED", "1")
    store = get_store()
    assert store.remote is not None and store.remote.secret is None
    store.remote.put("ns", "k", b"plain")
    assert client.get("torchkiln:ns:k").startswith(UNSIGNED)
    assert store.remote.get("ns", "k") == b"plain"
