"""Compile a C++ translation unit with the system compiler and load it with ctypes.

The shared object is cached on disk by a hash of the source, the compiler's version
and the flags (with ``-march=native``, also the host CPU), under
``$TORCHKILN_CACHE_DIR`` (default ``$XDG_CACHE_HOME/torchkiln``, else
``~/.cache/torchkiln``) in ``cpp/``; a ``filelock`` serializes concurrent builds of
the same source, so another process reuses the binary without compiling.  Hits and
misses count in ``counters["inductor"]["cpp_cache_hit" | "cpp_cache_miss"]``.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import tempfile

from filelock import FileLock

from ...utils.counters import counters
from ...utils.paths import cache_dir
from .. import config
from . import vecmath


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


def build(source: str):
    """The loaded library (a ``ctypes.CDLL``) for ``source``, compiled if not cached."""
    key_parts = [source, _compiler_id(config.cpp_cxx), " ".join(flags())]
    if config.cpp_march_native:
        key_parts.append(_host_cpu())
    key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:40]
    directory = cache_dir("cpp")
    so_path = os.path.join(directory, f"{key}.so")
    if os.path.exists(so_path):
        counters["inductor"]["cpp_cache_hit"] += 1
        return ctypes.CDLL(so_path), so_path
    with FileLock(so_path + ".lock"):
        if os.path.exists(so_path):
            counters["inductor"]["cpp_cache_hit"] += 1
        else:
            counters["inductor"]["cpp_cache_miss"] += 1
            cpp_path = os.path.join(directory, f"{key}.cpp")
            with open(cpp_path, "w") as f:
                f.write(source)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=directory)
            os.close(fd)
            cmd = [config.cpp_cxx, cpp_path, "-o", tmp] + flags()
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                os.unlink(tmp)
                raise RuntimeError(f"C++ compile failed ({' '.join(cmd)}):\n{result.stderr[-4000:]}")
            os.replace(tmp, so_path)
    return ctypes.CDLL(so_path), so_path
