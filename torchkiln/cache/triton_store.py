"""Triton's compiled kernels (cubin/hsaco, PTX, metadata) in torchkiln's store.

Triton looks up a compiled kernel through a ``CacheManager`` made per compile key
(``triton.knobs.cache.manager_class``, env ``TRITON_CACHE_MANAGER``): ``get_group``
of the kernel's metadata file on a lookup, ``put``/``put_group`` after compiling.
:class:`StoreCacheManager` keeps those files as entries of :func:`~.store.get_store`
(namespace ``triton``, key ``<Triton's key>-<file name>``): memory → local directory
→ signed Redis like every other entry, checksummed, inside the local size bound, so
a new process -- or another machine of a fleet -- loads the binaries and compiles no
kernel (``counters["inductor"]["triton_cache_hit|miss|saved"]``: saved = compiled
here).  Files are handed to Triton from a per-process temporary directory (Triton
reads paths), removed at exit; nothing is duplicated in the cache directory.

Only compiles made inside :func:`scoped` (torchkiln's own kernels: :func:`bind`
makes a ``JITFunction`` compile inside it) use the store; any other Triton compile
in the process (user kernels, torch.compile's) keeps Triton's file cache
(``TRITON_CACHE_DIR``), exactly as without torchkiln.  A user-set
``TRITON_CACHE_MANAGER`` is left alone (then torchkiln's kernels use it too).

Triton's cache key starts with ``triton_key()``: a SHA-256 of Triton's own sources and
of ``libtriton.so`` (~0.4 s on an H100 host, once per process, paid by the first kernel
a warm process loads).  :func:`memoize_triton_key` keeps its value in the store under a
fingerprint of every file of the Triton package (path, size, mtime; ~10 ms of ``stat``),
so a new process with the same Triton reads it instead; any file changed, added or
removed makes another fingerprint, and Triton computes the key again.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
import threading

from ..utils.counters import counters
from .store import get_store, write_atomic

NAMESPACE = "triton"
_GROUP_PREFIX = "__grp__"
_scope = threading.local()
# C modules Triton's driver builds with the host compiler outside any kernel's compile
# (its utilities; per-signature launchers in Triton releases that have them): kept in
# Triton's directory as always and written through to the store, so a warm machine
# with an empty Triton directory builds none either.
_STUBS = ("__triton_launcher", "cuda_utils", "hip_utils", "kiln_launcher")


def _file_manager_base():
    from triton.runtime.cache import FileCacheManager

    return FileCacheManager


@functools.lru_cache(maxsize=None)
def _materialize_root() -> str:
    root = tempfile.mkdtemp(prefix="torchkiln-triton-")
    atexit.register(shutil.rmtree, root, True)
    return root


@functools.lru_cache(maxsize=None)
def _manager_class():
    class StoreCacheManager(_file_manager_base()):
        """A Triton ``CacheManager``: inside :func:`scoped`, files live in torchkiln's
        store; outside, it is Triton's ``FileCacheManager`` unchanged."""

        def __init__(self, key, override=False, dump=False):
            self._key = key
            self._store = get_store() if getattr(_scope, "depth", 0) and not (override or dump) else None
            if self._store is None:
                super().__init__(key, override=override, dump=dump)
            else:  # no directory of Triton's is made or used
                self.key, self.cache_dir, self.lock_path = key, None, None

        def _store_key(self, filename: str) -> str:
            return f"{self._key}-{filename}"

        def _materialize(self, filename: str, data: bytes) -> str:
            path = os.path.join(_materialize_root(), self._key, filename)
            write_atomic(path, data)
            return path

        def get_file(self, filename):
            if self._store is None:
                path = super().get_file(filename)
                if path is None and filename.startswith(_STUBS):  # another machine built it
                    data = get_store().get(NAMESPACE, self._store_key(filename))
                    if data is not None:
                        path = super().put(data, filename, True)
                return path
            data = self._store.get(NAMESPACE, self._store_key(filename))
            return None if data is None else self._materialize(filename, data)

        def put(self, data, filename, binary=True):
            if self._store is None:
                path = super().put(data, filename, binary)
                if filename.startswith(_STUBS):
                    get_store().put(NAMESPACE, self._store_key(filename),
                                    data if isinstance(data, bytes) else str(data).encode())
                return path
            if not isinstance(data, bytes):
                data = str(data).encode()
            self._store.put(NAMESPACE, self._store_key(filename), data)
            return self._materialize(filename, data)

        def get_group(self, filename):
            if self._store is None:
                return super().get_group(filename)
            group = self._load_group(filename)
            counters["inductor"]["triton_cache_hit" if group is not None else "triton_cache_miss"] += 1
            return group

        def _load_group(self, filename):
            raw = self._store.get(NAMESPACE, self._store_key(_GROUP_PREFIX + filename))
            if raw is None:
                return None
            try:
                children = json.loads(raw)["children"]
            except (ValueError, KeyError, TypeError):
                return None
            group = {}
            for child in children:
                if not isinstance(child, str) or os.sep in child:
                    return None
                path = self.get_file(child)
                if path is None:  # a file of the group was evicted: compile again
                    return None
                group[child] = path
            return group

        def put_group(self, filename, group):
            if self._store is None:
                return super().put_group(filename, group)
            children = sorted(group)  # Triton's group: {file name: path}
            counters["inductor"]["triton_cache_saved"] += 1  # put after a compile: one kernel compiled
            return self.put(json.dumps({"children": children}), _GROUP_PREFIX + filename, binary=False)

    StoreCacheManager.__module__ = __name__
    StoreCacheManager.__qualname__ = "StoreCacheManager"
    return StoreCacheManager


def __getattr__(name: str):
    if name == "StoreCacheManager":  # built on first use: importing triton costs ~1 s
        return _manager_class()
    raise AttributeError(name)


def _triton_fingerprint(root: str) -> str:
    """Path, size and mtime of every file of the Triton package at ``root`` (a superset
    of what ``triton_key()`` reads), as one digest."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            st = os.stat(os.path.join(dirpath, name))
            h.update(f"{os.path.relpath(os.path.join(dirpath, name), root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


_triton_key_original = None


def memoize_triton_key() -> None:
    """Make Triton's ``triton.runtime.cache.triton_key`` read its value from the store
    when the Triton package's files are unchanged since it was computed (module
    docstring); the value is Triton's own, computed by its function on a miss."""
    global _triton_key_original
    import triton
    import triton.runtime.cache as triton_cache

    current = triton_cache.triton_key
    if _triton_key_original is not None or getattr(current, "_torchkiln_memo", False):
        return
    _triton_key_original = current
    root = os.path.dirname(os.path.abspath(triton.__file__))

    @functools.lru_cache(maxsize=None)
    def triton_key():
        try:
            key = f"triton_key-{triton.__version__}-{_triton_fingerprint(root)[:40]}"
        except OSError:
            return current()
        store = get_store()
        data = store.get(NAMESPACE, key)
        if data is not None:
            try:
                return data.decode()
            except UnicodeDecodeError:
                pass
        value = current()
        store.put(NAMESPACE, key, value.encode())
        return value

    triton_key._torchkiln_memo = True
    triton_cache.triton_key = triton_key


def install() -> bool:
    """Make :class:`StoreCacheManager` this process's Triton cache manager unless the user
    chose one (``TRITON_CACHE_MANAGER``); returns whether torchkiln's is in place.  Set
    through ``triton.knobs`` in this process only: subprocesses (torch.compile's compile
    workers) keep Triton's default; a torchkiln compile worker calls :func:`scoped`
    itself.  Also :func:`memoize_triton_key`."""
    from triton import knobs

    memoize_triton_key()

    current = knobs.cache.manager_class
    if current is not None and current.__name__ != "StoreCacheManager":
        return False
    if current is None:
        knobs.cache.manager_class = _manager_class()
    return True


@contextlib.contextmanager
def scoped():
    """Triton compiles started in this thread inside the block keep their files in the store."""
    install()
    _scope.depth = getattr(_scope, "depth", 0) + 1
    try:
        yield
    finally:
        _scope.depth -= 1


def bind(jit_fn):
    """Make a Triton ``JITFunction`` compile inside :func:`scoped`: its ``run`` (through
    which every launch, ``warmup`` and ``kernel[grid](...)`` goes, and which compiles on a
    miss of Triton's in-memory kernel cache) is wrapped on the instance.  Not ``compile``:
    Triton 3.6 has no such attribute before the first run and assigns its own then.
    Returns ``jit_fn``."""
    run = jit_fn.run
    if getattr(run, "_torchkiln_scoped", False):
        return jit_fn

    def run_in_store(*args, **kwargs):
        with scoped():
            return run(*args, **kwargs)

    run_in_store._torchkiln_scoped = True
    jit_fn.run = run_in_store
    return jit_fn


def bind_module(module) -> None:
    """:func:`bind` every compiled-kernel ``JITFunction`` of a generated module (the
    interpreter's functions compile nothing and are left alone)."""
    kernels = [v for v in vars(module).values()
               if type(v).__name__ == "JITFunction" and callable(getattr(v, "run", None))]
    if kernels:
        install()
    for kernel in kernels:
        bind(kernel)
