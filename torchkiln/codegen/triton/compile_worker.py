"""A Triton compile worker of :mod:`.compile_pool` (run as ``python -m``).

Reads length-prefixed pickled jobs ``(module path, GPUTarget, [(jit function name,
warmup args, options)...])`` on stdin; for each, compiles the specialization for the
parent's GPU target and builds its C launcher (both cached on disk by Triton), and
answers ``[(error text or None, compile seconds, C launcher seconds) per kernel]``.  The module's kernels are bound to the
Triton store as the parent's are (``cache/triton_store.bind_module``), so compiled
binaries land where the parent's compile looks for them.  It never creates a CUDA context: Triton's
driver is told the target, device 0 and stream 0.  Exits at the end of stdin.
"""
from __future__ import annotations

import importlib.util
import os
import pickle
import struct
import sys
import time

_modules: dict = {}


def _module(path: str):
    if path not in _modules:
        name = "torchkiln_triton_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        # compile exactly as the parent's load_module binds them (cache/triton_store.py), so
        # the binaries land where the parent's compile looks
        from torchkiln.cache import triton_store

        triton_store.bind_module(module)
        _modules[path] = module
    return _modules[path]


class _TargetDriver:
    """Triton's active driver in a worker: the parent's GPU target, device 0, stream 0.
    Compiling needs nothing else, so Triton's CUDA driver (whose utilities are a C module
    built with gcc on a cold cache) is only made if something asks for more."""

    def __init__(self, target) -> None:
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def __getattr__(self, name):
        from triton.runtime.driver import driver

        return getattr(driver.default, name)


def _use_target(target) -> None:
    from triton.runtime.driver import driver

    current = driver._active
    if not isinstance(current, _TargetDriver) or current.target != target:
        driver.set_active(_TargetDriver(target))


def compile_job(path: str, target, kernels: list) -> list:
    from triton.runtime.driver import driver

    from . import static_launcher

    _use_target(target)
    module = _module(path)
    answers = []
    for name, args, options in kernels:
        t0 = time.perf_counter()
        try:
            kernel = getattr(module, name).warmup(*args, grid=(1,), **options)
            t1 = time.perf_counter()
            if not (static_launcher.enabled() and static_launcher.supported(kernel)):
                driver.active.launcher_cls(kernel.src, kernel.metadata)  # Triton's C launcher, cached too
            answers.append((None, t1 - t0, time.perf_counter() - t1))
        except Exception as e:  # the parent compiles it again and reports the error
            answers.append((f"{type(e).__name__}: {e}", time.perf_counter() - t0, 0.0))
    return answers


def _build_host_modules() -> None:
    """Build the C modules the parent's first launch needs into Triton's build cache
    (``gcc`` runs of a second or more on a cold cache): Triton's CUDA utilities and the
    static launcher.  Needs no CUDA context.  A failure is left to the parent."""
    try:
        from triton.backends.nvidia.driver import CudaUtils

        CudaUtils()
    except Exception:
        pass
    try:
        from torchkiln.codegen.triton import static_launcher

        if static_launcher.enabled():
            static_launcher.module()
    except Exception:
        pass


def main() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints of the compiler go to stderr, never into the answers
    import torch  # noqa: F401  (dtypes in the jobs; triton's MockTensor)
    import triton  # noqa: F401

    if os.environ.get("TORCHKILN_WORKER_BUILDS_LAUNCHER") == "1":  # the pool's first worker
        _build_host_modules()

    inp = sys.stdin.buffer
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        job = pickle.loads(inp.read(struct.unpack("<Q", head)[0]))
        try:
            answer = compile_job(*job)
        except Exception as e:
            answer = [(f"{type(e).__name__}: {e}", 0.0, 0.0)]
        data = pickle.dumps(answer)
        out.write(struct.pack("<Q", len(data)) + data)
        out.flush()


if __name__ == "__main__":
    main()
