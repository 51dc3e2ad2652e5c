"""Compile a C++ translation unit with the system compiler and load it with ctypes.

``start_build(source)`` returns at once a :class:`Build`, whose ``result()`` is the
loaded library: the compiler runs on a worker thread (it waits on ``g++`` with the GIL
released), so a graph's build overlaps whatever the caller does next — lowering the
backward graph, or another graph's build.  torch.compile overlaps its builds the same
way (``torch._inductor.async_compile``).

The shared object is cached on disk by a hash of the source, the compiler's version
and the flags (with ``-march=native``, also the host CPU), under
``$TORCHKILN_CACHE_DIR`` (default ``$XDG_CACHE_HOME/torchkiln``, else
``~/.cache/torchkiln``) in ``cpp/``.  A cached object is loaded synchronously.  A
``filelock`` serializes concurrent builds of the same source, so another process
waits and reuses the binary without compiling; in one process, a second request for a
source whose build is in flight shares that build.  Hits (including shared in-flight
builds) and misses count in ``counters["inductor"]["cpp_cache_hit" | "cpp_cache_miss"]``.

A damaged cache entry is rebuilt, never mapped (a truncated .so mapped with ``dlopen``
kills the process with SIGBUS): the .so is written to a temporary file and renamed into
place, then its SHA-256 goes to ``<hash>.so.sha256`` (also renamed into place); before
loading, the file must match its checksum.  A mismatch or a ``dlopen`` error rebuilds
the library with one warning; a missing checksum rebuilds it silently.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import tempfile
import threading
import warnings

from ...cache.store import touch
from ...utils.counters import counters
from ...utils.paths import cache_dir
from .. import config
from . import vecmath

_lock = threading.RLock()  # guards _pool, _in_flight and the cache counters
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_in_flight: dict[str, concurrent.futures.Future] = {}


@functools.lru_cache(None)
def _compiler_id(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout
    return out.splitlines()[0] if out else cxx


@functools.lru_cache(None)
def _host_cpu() -> str:
    """The CPU model and its instruction-set flags (a VM may hide some of the model's)."""
    found = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key = line.split(":", 1)[0].strip()
                if key in ("model name", "flags", "Features") and key not in found:
                    found[key] = line.strip()
    except OSError:
        pass
    return "\n".join(found.values()) or platform.processor() or platform.machine()


def flags() -> list[str]:
    f = ["-O3", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-fno-math-errno", "-w",
         "-fno-builtin-sin", "-fno-builtin-sinf", "-fno-builtin-cos", "-fno-builtin-cosf"]
    if config.cpp_march_native:
        f.append("-march=native")
    if vecmath.declarations()[1]:
        f.append("-lmvec")
    return f


def _count(name: str) -> None:
    with _lock:
        counters["inductor"][name] += 1


def _forget_threads() -> None:
    """In a forked child: the parent's worker threads do not exist there."""
    global _pool, _lock
    _lock = threading.RLock()
    _pool = None
    _in_flight.clear()


os.register_at_fork(after_in_child=_forget_threads)


class Build:
    """A library being built (or already loaded): ``done()``, and ``result()`` → ``(CDLL, path)``.

    ``result()`` waits for the compiler and raises ``RuntimeError`` with its
    diagnostics if it failed.  In a child forked while the build was in flight (its
    worker thread did not survive the fork) ``result()`` builds the source again there.
    """

    def __init__(self, future: concurrent.futures.Future, source: str) -> None:
        self._future = future
        self._source = source
        self._pid = os.getpid()

    def done(self) -> bool:
        return self._future.done()

    def add_done_callback(self, fn) -> None:
        """``fn(self)`` when the build finishes (at once if it has)."""
        self._future.add_done_callback(lambda _: fn(self))

    def result(self):
        if os.getpid() != self._pid and not self._future.done():
            return start_build(self._source).result()
        return self._future.result()


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _publish(tmp: str, so_path: str) -> None:
    """Move the built library ``tmp`` to ``so_path``, then its checksum beside it (both
    by rename, so a reader never sees a partial file; a library without its checksum
    is rebuilt)."""
    digest = _digest(tmp)
    os.replace(tmp, so_path)
    fd, tmp_sum = tempfile.mkstemp(suffix=".sha256", dir=os.path.dirname(so_path))
    with os.fdopen(fd, "w") as f:
        f.write(digest)
    os.replace(tmp_sum, so_path + ".sha256")


def _load_verified(so_path: str, warn: bool = True):
    """``ctypes.CDLL(so_path)`` if the file matches its checksum, else None: the caller
    rebuilds it (with one warning if it is damaged or failed to load; silently if it has
    no checksum)."""
    if not os.path.exists(so_path):
        return None
    lib = None
    try:
        with open(so_path + ".sha256") as f:
            want = f.read().strip()
    except OSError:  # written before checksums, or its writer died before the rename
        return None
    else:
        try:
            why = "does not match its checksum"
            if _digest(so_path) == want:
                lib = ctypes.CDLL(so_path)
                touch(so_path)
        except OSError as e:
            why = f"failed to load ({e})"
    if lib is None and warn:
        warnings.warn(f"torchkiln: cached kernel library {so_path} {why}; rebuilding it")
    return lib


def _compile(source: str, compiler: list[str], directory: str, key: str, so_path: str):
    """Runs on a worker thread: ``compiler`` (the compiler and its flags) under the file
    lock, unless another process built the object meanwhile; then loads it."""
    from filelock import FileLock  # imported by the first build (~15 ms), not by loading a library

    with FileLock(so_path + ".lock"):
        lib = _load_verified(so_path, warn=False)  # built by another process meanwhile?
        if lib is not None:
            _count("cpp_cache_hit")
            return lib, so_path
        _count("cpp_cache_miss")
        cpp_path = os.path.join(directory, f"{key}.cpp")
        with open(cpp_path, "w") as f:
            f.write(source)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=directory)
        os.close(fd)
        cmd = [compiler[0], cpp_path, "-o", tmp] + compiler[1:]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            os.unlink(tmp)
            errors = [line for line in result.stderr.splitlines() if "error" in line][:5]
            raise RuntimeError(f"C++ compile failed: {' | '.join(errors) or result.stderr[-500:]}\n"
                               f"command: {' '.join(cmd)}\n{result.stderr[-4000:]}")
        _publish(tmp, so_path)
    return ctypes.CDLL(so_path), so_path


def _locate(source: str):
    """``(compiler command, cache directory, key, .so path)`` of ``source``."""
    compiler = [config.cpp_cxx] + flags()
    key_parts = [source, _compiler_id(compiler[0]), " ".join(compiler[1:])]
    if config.cpp_march_native:
        key_parts.append(_host_cpu())
    key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:40]
    directory = cache_dir("cpp")
    return compiler, directory, key, os.path.join(directory, f"{key}.so")


def library_path(source: str) -> str:
    """Where the shared object built from ``source`` is cached."""
    return _locate(source)[3]


def start_build(source: str) -> Build:
    """Start compiling ``source`` into a shared object (or load it if cached); returns at once."""
    global _pool
    compiler, directory, key, so_path = _locate(source)
    with _lock:
        future = _in_flight.get(so_path)
        if future is not None:
            counters["inductor"]["cpp_cache_hit"] += 1
            return Build(future, source)
        lib = _load_verified(so_path)
        if lib is None:
            if _pool is None:
                _pool = concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1, "torchkiln-cxx")
            future = _pool.submit(_compile, source, compiler, directory, key, so_path)
            _in_flight[so_path] = future
            future.add_done_callback(lambda _: _done(so_path))
            return Build(future, source)
        counters["inductor"]["cpp_cache_hit"] += 1
    future = concurrent.futures.Future()
    future.set_result((lib, so_path))
    return Build(future, source)


def _done(so_path: str) -> None:
    with _lock:
        _in_flight.pop(so_path, None)
