"""Where cache entries live: memory → local directory → remote (Redis).

One small interface, :class:`Store` (``get(namespace, key) -> bytes | None``,
``put(namespace, key, payload)``, ``clear(namespace)``), with three backends and
:class:`TieredStore`, which looks up memory, then the local directory, then the
remote server, and writes a remote hit back locally.  :func:`get_store` returns the
process's tiered store for the current environment:

* ``TORCHKILN_CACHE_DIR`` — the local directory (see ``utils/paths.py``);
  ``TORCHKILN_CACHE_SIZE_LIMIT`` — its bound in bytes (suffixes K, M, G; default 5G),
  kept by least-recently-used eviction of entries, C++ libraries and Triton modules
  alike (a hit refreshes a file's mtime).
* ``TORCHKILN_REMOTE_CACHE=redis://host:port/db`` — a Redis server shared by a fleet.
  Entries written there carry an HMAC-SHA256 over key and entry, keyed by
  ``TORCHKILN_CACHE_SECRET`` (or the contents of ``TORCHKILN_CACHE_SECRET_FILE``);
  a reader verifies it before parsing and rejects anything else with one warning
  (``counters["cache"]["remote_rejected"]``).  Without a secret the remote cache is
  off unless ``TORCHKILN_CACHE_ALLOW_UNSIGNED=1``.  A server that is down or goes away
  costs one warning; lookups go on without it (retried after 30 s).

Every stored entry is framed by :mod:`.entry` (versioned header, SHA-256 of the
payload).  A damaged entry is a miss: counted in ``counters["cache"]["corrupt"]`` and
deleted.  Local writes are atomic (a temporary file in the same directory, then
``os.replace``), so readers never see a partial entry.  A failed write (read-only
directory, disk full) warns once and is otherwise ignored: caching may say no, the
compile goes on.  torch.compile's remote cache unpickles whatever the server returns;
this one only ever parses verified plain data.
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import errno
import hashlib
import hmac
import json
import os
import stat
import tempfile
import threading
import time
import warnings

from ..utils.counters import counters
from . import entry

DEFAULT_SIZE_LIMIT = 5 << 30
MEMORY_LIMIT = 256 << 20
_warned: set = set()
_lock = threading.RLock()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)


def _count(name: str, n: int = 1) -> None:
    with _lock:
        counters["cache"][name] += n


def cache_root() -> str:
    """The local cache root (not created): ``$TORCHKILN_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/torchkiln``, else ``~/.cache/torchkiln``."""
    root = os.environ.get("TORCHKILN_CACHE_DIR")
    if root:
        return root
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torchkiln")


def parse_size(text: str) -> int:
    """``"5G"`` → bytes (suffixes K, M, G, T; plain digits are bytes)."""
    text = text.strip().upper().rstrip("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


class Store:
    """get/put bytes by (namespace, key); ``get`` returns ``None`` on a miss."""

    name = "store"

    def get(self, namespace: str, key: str) -> bytes | None:
        raise NotImplementedError

    def put(self, namespace: str, key: str, payload: bytes) -> None:
        raise NotImplementedError

    def clear(self, namespace: str | None = None) -> None:
        pass


class MemoryStore(Store):
    """Payloads of this process, least recently used dropped past ``limit`` bytes."""

    name = "memory"

    def __init__(self, limit: int = MEMORY_LIMIT) -> None:
        self.limit = limit
        self._items: collections.OrderedDict = collections.OrderedDict()
        self._bytes = 0

    def get(self, namespace, key):
        with _lock:
            item = self._items.get((namespace, key))
            if item is not None:
                self._items.move_to_end((namespace, key))
            return item

    def put(self, namespace, key, payload):
        with _lock:
            old = self._items.pop((namespace, key), None)
            self._bytes -= len(old) if old is not None else 0
            self._items[(namespace, key)] = payload
            self._bytes += len(payload)
            while self._bytes > self.limit and self._items:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= len(dropped)

    def clear(self, namespace=None):
        with _lock:
            for k in [k for k in self._items if namespace is None or k[0] == namespace]:
                self._bytes -= len(self._items.pop(k))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def touch(path: str) -> None:
    """Mark a cached file used now (the local bound evicts the oldest mtime first)."""
    try:
        os.utime(path)
    except OSError:
        pass


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and
    ``os.replace`` (readers see the old file or the whole new one).  Raises OSError."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


ENTRY_SUFFIX = ".entry"
RESCAN_EVERY = 32  # puts between two scans of the whole directory for the size bound


class LocalStore(Store):
    """Entries as files ``<root>/<namespace>/<key>.entry``, bounded to ``limit`` bytes."""

    name = "local"

    def __init__(self, root: str, limit: int = DEFAULT_SIZE_LIMIT) -> None:
        self.root = root
        self.limit = limit
        self._approx_bytes: int | None = None
        self._puts_since_scan = 0

    def path(self, namespace: str, key: str) -> str:
        return os.path.join(self.root, namespace, key + ENTRY_SUFFIX)

    def get(self, namespace, key):
        path = self.path(namespace, key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        try:
            payload = entry.decode(data)
        except entry.CorruptEntry as e:
            _count("corrupt")
            _warn_once(f"corrupt:{namespace}", f"torchkiln cache: dropped a damaged entry in {namespace} ({e})")
            try:
                os.unlink(path)
            except OSError:
                pass
            return None
        touch(path)  # least recently used = oldest mtime
        return payload

    def put(self, namespace, key, payload):
        data = entry.encode(payload)
        try:
            write_atomic(self.path(namespace, key), data)
        except OSError as e:
            _count("put_error")
            reason = errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__
            _warn_once(f"put:{reason}", f"torchkiln cache: cannot write to {self.root} ({reason}: {e.strerror or e}); "
                                        "compiling without saving")
            return
        self._puts_since_scan += 1
        if self._approx_bytes is None or self._puts_since_scan >= RESCAN_EVERY:
            # libraries and modules are written by the compilers, not through put(): rescan now and then
            self._approx_bytes = sum(g[1] for g in self.groups())
            self._puts_since_scan = 0
        else:
            self._approx_bytes += len(data)
        if self._approx_bytes > self.limit:
            self.evict()

    def entries(self, namespace: str | None = None) -> list[tuple[float, int, str]]:
        """``(mtime, bytes, path)`` of every entry (of ``namespace``, or all)."""
        return [(mtime, size, paths[0]) for mtime, size, paths, _ in self.groups(namespace)
                if paths[0].endswith(ENTRY_SUFFIX)]

    def groups(self, namespace: str | None = None) -> list[tuple[float, int, list[str], str | None]]:
        """``(mtime, bytes, paths, lock path)`` of every evictable unit (of ``namespace``,
        or all): an ``.entry`` file, or the files of one key in the other directories
        (``cpp/<key>.so`` with its ``.cpp`` and ``.so.sha256``, ``triton/<key>.py``...:
        all names before the first dot alike).  ``mtime`` is the newest file's; lock
        files are never evicted (deleting a held one breaks the lock), temporary files
        of writers only when older than an hour (their writer died)."""
        out = []
        try:
            namespaces = [namespace] if namespace else [n for n in os.listdir(self.root)
                                                        if os.path.isdir(os.path.join(self.root, n))]
        except OSError:
            return out
        now = time.time()
        for ns in namespaces:
            directory = os.path.join(self.root, ns)
            try:
                names = os.listdir(directory)
            except OSError:
                continue
            by_key: dict[str, list] = {}
            locks: dict[str, str] = {}
            for name in names:
                path = os.path.join(directory, name)
                stem = name.split(".", 1)[0] if not name.startswith(".") else name
                if name.endswith(".lock"):
                    locks[stem] = path
                    continue
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                if (name.startswith(".tmp-") or name.endswith(".tmp")) and now - st.st_mtime < 3600:
                    continue
                if name.endswith(ENTRY_SUFFIX):
                    out.append((st.st_mtime, st.st_size, [path], None))
                    continue
                group = by_key.setdefault(stem, [0.0, 0, []])
                group[0] = max(group[0], st.st_mtime)
                group[1] += st.st_size
                group[2].append(path)
            out.extend((mtime, size, paths, locks.get(stem)) for stem, (mtime, size, paths) in by_key.items())
        return out

    def evict(self, target: float = 0.8) -> int:
        """Delete least recently used units (:meth:`groups`: entries, C++ libraries,
        Triton modules...) until at most ``target * limit`` bytes remain.  A unit whose
        lock a compile holds now is skipped."""
        items = sorted(self.groups(), key=lambda g: g[0])
        total = sum(g[1] for g in items)
        removed = 0
        for _, size, paths, lock_path in items:
            if total <= self.limit * target:
                break
            if self._remove(paths, lock_path):
                total -= size
                removed += 1
        _count("evicted", removed)
        self._approx_bytes = total
        self._puts_since_scan = 0
        return removed

    @staticmethod
    def _remove(paths: list[str], lock_path: str | None) -> bool:
        lock = contextlib.nullcontext()
        if lock_path is not None:
            import filelock

            lock = filelock.FileLock(lock_path, timeout=0)
        try:
            with lock:
                for path in paths:
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass
        except filelock_timeout():  # a compile writes this key now
            return False
        except OSError:
            return False
        return True

    def clear(self, namespace=None):
        for _, _, paths, lock_path in self.groups(namespace):
            self._remove(paths, lock_path)
        self._approx_bytes = None


def filelock_timeout() -> type[BaseException]:
    import filelock

    return filelock.Timeout


SIGNED, UNSIGNED = b"TKS1", b"TKU1"
RETRY_AFTER_S = 30.0


class RedisStore(Store):
    """Entries in a Redis server under ``torchkiln:<namespace>:<key>``, signed with
    HMAC-SHA256 when ``secret`` is given (see the module docstring)."""

    name = "remote"

    def __init__(self, url: str, secret: bytes | None, allow_unsigned: bool = False) -> None:
        self.url = url
        self.secret = secret
        self.allow_unsigned = allow_unsigned
        self._client = None
        self._down_until = 0.0

    def _redis(self):
        if time.monotonic() < self._down_until:
            return None
        if self._client is None:
            try:
                import redis
            except ImportError:
                _warn_once("redis-import", "torchkiln cache: TORCHKILN_REMOTE_CACHE is set but the redis package is "
                                           "not installed (pip install redis); remote cache off")
                self._down_until = float("inf")
                return None
            self._client = redis.Redis.from_url(self.url, socket_timeout=2.0, socket_connect_timeout=1.0)
        return self._client

    def _failed(self, e: Exception) -> None:
        _count("remote_error")
        _warn_once(f"redis-down:{self.url}", f"torchkiln cache: remote cache {self.url} unavailable "
                                             f"({type(e).__name__}: {e}); going on without it")
        self._down_until = time.monotonic() + RETRY_AFTER_S
        self._client = None

    def _wire_key(self, namespace: str, key: str) -> str:
        return f"torchkiln:{namespace}:{key}"

    def _mac(self, wire_key: str, data: bytes) -> bytes:
        return hmac.new(self.secret, wire_key.encode() + b"\0" + data, hashlib.sha256).digest()

    def get(self, namespace, key):
        client = self._redis()
        if client is None:
            return None
        wire_key = self._wire_key(namespace, key)
        try:
            value = client.get(wire_key)
        except Exception as e:  # redis.RedisError, OSError: never fail a compile on the cache
            self._failed(e)
            return None
        if value is None:
            return None
        data = self._verify(wire_key, value)
        if data is None:
            _count("remote_rejected")
            _warn_once(f"rejected:{self.url}", f"torchkiln cache: rejected an entry from {self.url} whose signature "
                                               "does not verify (unsigned or signed with another secret); not used")
            return None
        try:
            return entry.decode(data)
        except entry.CorruptEntry:
            _count("corrupt")
            return None

    def _verify(self, wire_key: str, value: bytes) -> bytes | None:
        tag, rest = value[:4], value[4:]
        if self.secret is not None:
            if tag != SIGNED or len(rest) < 32:
                return None
            mac, data = rest[:32], rest[32:]
            return data if hmac.compare_digest(mac, self._mac(wire_key, data)) else None
        return rest if tag == UNSIGNED and self.allow_unsigned else None

    def put(self, namespace, key, payload):
        client = self._redis()
        if client is None:
            return
        wire_key = self._wire_key(namespace, key)
        data = entry.encode(payload)
        value = SIGNED + self._mac(wire_key, data) + data if self.secret is not None else UNSIGNED + data
        try:
            client.set(wire_key, value)
        except Exception as e:
            self._failed(e)


class TieredStore(Store):
    """memory → local → remote; a hit in a slower layer fills the faster ones."""

    def __init__(self, local: LocalStore, remote: RedisStore | None = None) -> None:
        self.memory = MemoryStore()
        self.local = local
        self.remote = remote

    def get(self, namespace, key):
        payload = self.memory.get(namespace, key)
        if payload is not None:
            _count("memory_hit")
            return payload
        payload = self.local.get(namespace, key)
        if payload is not None:
            _count("local_hit")
            self.memory.put(namespace, key, payload)
            return payload
        if self.remote is not None:
            payload = self.remote.get(namespace, key)
            if payload is not None:
                _count("remote_hit")
                self.local.put(namespace, key, payload)
                self.memory.put(namespace, key, payload)
                return payload
        _count("miss")
        return None

    def put(self, namespace, key, payload):
        _count("put")
        self.memory.put(namespace, key, payload)
        self.local.put(namespace, key, payload)
        if self.remote is not None:
            self.remote.put(namespace, key, payload)

    def clear(self, namespace=None):
        """Drop ``namespace`` (or everything) from memory and the local directory; the
        remote server is shared by a fleet and left alone."""
        self.memory.clear(namespace)
        self.local.clear(namespace)


def _secret() -> bytes | None:
    secret = os.environ.get("TORCHKILN_CACHE_SECRET")
    if secret:
        return secret.encode()
    path = os.environ.get("TORCHKILN_CACHE_SECRET_FILE")
    if path:
        try:
            with open(path, "rb") as f:
                return f.read().strip() or None
        except OSError as e:
            _warn_once("secret-file", f"torchkiln cache: cannot read TORCHKILN_CACHE_SECRET_FILE ({e})")
    return None


_stores: dict = {}


def get_store() -> TieredStore:
    """The process's store for the current environment (re-read on every call, so a
    test may point ``TORCHKILN_CACHE_DIR`` or ``TORCHKILN_REMOTE_CACHE`` elsewhere)."""
    root = cache_root()
    limit = parse_size(os.environ.get("TORCHKILN_CACHE_SIZE_LIMIT") or str(DEFAULT_SIZE_LIMIT))
    url = os.environ.get("TORCHKILN_REMOTE_CACHE") or None
    secret = _secret() if url else None
    unsigned = os.environ.get("TORCHKILN_CACHE_ALLOW_UNSIGNED", "") not in ("", "0")
    key = (root, limit, url, secret, unsigned)
    with _lock:
        store = _stores.get(key)
        if store is None:
            remote = None
            if url and (secret is not None or unsigned):
                remote = RedisStore(url, secret, unsigned)
            elif url:
                _warn_once("no-secret", "torchkiln cache: TORCHKILN_REMOTE_CACHE is set but no TORCHKILN_CACHE_SECRET; "
                                        "the remote cache is off (set TORCHKILN_CACHE_ALLOW_UNSIGNED=1 to trust "
                                        "unsigned entries)")
            store = _stores[key] = TieredStore(LocalStore(root, limit), remote)
            _register_stats_flush()
    return store


def clear_memory() -> None:
    """Forget every in-memory payload (``torchkiln.reset()`` does not: entries are data,
    valid across resets; tests that need a cold memory layer call this)."""
    with _lock:
        for store in _stores.values():
            store.memory.clear()


# ---- statistics kept across processes, for ``torchkiln cache stats``
STATS_FILE = "stats.json"
STAT_COUNTERS = {
    "cache": None,  # every counter of the store itself
    "inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass", "cpp_cache_hit", "cpp_cache_miss",
                 "triton_cache_hit", "triton_cache_miss", "triton_cache_saved"),
    "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss", "autograd_cache_saved", "autograd_cache_bypass"),
    "warm_start": ("hit", "miss", "bypass", "saved"),
}
_flush_registered = False
_flushed: collections.Counter = collections.Counter()


def _snapshot() -> collections.Counter:
    snap: collections.Counter = collections.Counter()
    for group, names in STAT_COUNTERS.items():
        for name, n in counters.get(group, {}).items():
            if names is None or name in names:
                snap[f"{group}.{name}"] += n
    return snap


def flush_stats() -> None:
    """Add this process's cache counters (since the last flush) to ``<root>/stats.json``."""
    snap = _snapshot()
    delta = {k: v - _flushed[k] for k, v in snap.items() if v > _flushed[k]}
    if not delta:
        return
    root = cache_root()
    path = os.path.join(root, STATS_FILE)
    try:
        from filelock import FileLock

        os.makedirs(root, exist_ok=True)
        with FileLock(path + ".lock", timeout=5):
            try:
                with open(path) as f:
                    totals = collections.Counter(json.load(f))
            except (OSError, ValueError):
                totals = collections.Counter()
            totals.update(delta)
            write_atomic(path, json.dumps(dict(totals), sort_keys=True).encode())
    except Exception:  # statistics are best effort
        return
    _flushed.update(delta)


def read_stats(root: str | None = None) -> dict:
    try:
        with open(os.path.join(root or cache_root(), STATS_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _register_stats_flush() -> None:
    global _flush_registered
    if not _flush_registered:
        _flush_registered = True
        atexit.register(flush_stats)
