"""Parallel Triton compilation: a pool of worker processes, started once per process.

``precompile(path, jobs, target)`` compiles the kernels of one generated module in the
workers and returns a future that is done when they all are.  A worker imports the
module from ``path``, runs ``JITFunction.warmup`` for each job (the specialization the
launcher will pick, tensors given as dtypes) for the GPU ``target`` of the parent
(workers never create a CUDA context) and builds the compiled kernel's C launcher; both
land in Triton's on-disk cache, from which the parent's first launch of each kernel
loads them in milliseconds (``runtime.Launcher.bind``).  A job that fails in a worker is
ignored: the parent then compiles that kernel itself and raises the real error.  Mirrors
TorchInductor's ``AsyncCompile`` with its subprocess pool.

Workers are plain subprocesses (``python -m torchkiln.codegen.triton.compile_worker``)
speaking length-prefixed pickles on stdin/stdout, so the user's ``__main__`` is never
re-imported (as ``multiprocessing``'s spawn would); they exit when the parent does (their
stdin closes).  ``TORCHKILN_COMPILE_THREADS`` sets the pool size (0 or 1: no pool,
kernels compile at their first launch).
"""
from __future__ import annotations

import atexit
import concurrent.futures
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time

_lock = threading.Lock()
_pool: "_Pool | None" = None


def workers() -> int:
    """The pool size: ``$TORCHKILN_COMPILE_THREADS``, else min(cpu count, 32) (as
    TorchInductor's ``compile_threads``)."""
    env = os.environ.get("TORCHKILN_COMPILE_THREADS")
    if env is not None:
        return max(int(env), 0)
    return min(os.cpu_count() or 1, 32)


def use_triton_cache_dir() -> None:
    """Triton's binaries go under our cache (``$TORCHKILN_CACHE_DIR/triton_bin``) unless
    ``TRITON_CACHE_DIR`` is set; compile workers inherit it."""
    from ...utils.paths import cache_dir

    os.environ.setdefault("TRITON_CACHE_DIR", cache_dir("triton_bin"))


def warm() -> None:
    """Start the pool now (its workers import torch and triton while the caller goes on
    capturing and lowering): called when a graph with CUDA inputs reaches the backend,
    as TorchInductor's backend warms its pool."""
    pool()


# What the pool did, for `benchmarks/compile_profile.py` and the trace: jobs answered,
# seconds the workers spent compiling and building C launchers, the slowest job.
stats = {"jobs": 0, "compile_s": 0.0, "launcher_s": 0.0, "max_job_s": 0.0, "started_at": None}


class _Pool:
    """``n`` worker processes, started at once (they import torch and triton while the
    parent still captures and lowers), each used by one job at a time."""

    def __init__(self, n: int) -> None:
        self.executor = concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="torchkiln-triton-compile")
        self.idle: queue.SimpleQueue = queue.SimpleQueue()
        self.procs = [self._spawn(first=i == 0) for i in range(n)]
        for proc in self.procs:
            self.idle.put(proc)

    @staticmethod
    def _spawn(first: bool = False):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        env = dict(os.environ)
        if first:  # also builds the static C launcher (static_launcher.py) while the others wait for jobs
            env["TORCHKILN_WORKER_BUILDS_LAUNCHER"] = "1"
        env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        return subprocess.Popen([sys.executable, "-m", "torchkiln.codegen.triton.compile_worker"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def _run(self, job):
        proc = self.idle.get()
        try:
            if proc.poll() is not None:
                proc = self._spawn()
                self.procs.append(proc)
            data = pickle.dumps(job)
            proc.stdin.write(struct.pack("<Q", len(data)) + data)
            proc.stdin.flush()
            head = proc.stdout.read(8)
            if len(head) < 8:
                raise RuntimeError("Triton compile worker exited")
            answers = pickle.loads(proc.stdout.read(struct.unpack("<Q", head)[0]))
            for _, compile_s, launcher_s in answers:
                stats["jobs"] += 1
                stats["compile_s"] += compile_s
                stats["launcher_s"] += launcher_s
                stats["max_job_s"] = max(stats["max_job_s"], compile_s + launcher_s)
            return answers
        finally:
            self.idle.put(proc)

    def submit(self, job):
        return self.executor.submit(self._run, job)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        for proc in self.procs:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:
                proc.kill()


def pool() -> "_Pool | None":
    """The process-wide pool (started at the first call), or None when disabled."""
    global _pool
    with _lock:
        if _pool is None and workers() > 1:
            stats["started_at"] = time.perf_counter()
            _pool = _Pool(workers())
            atexit.register(_pool.close)
        return _pool


# Fewer kernels than this compile at their first launch unless the pool already runs
# (starting the workers costs seconds: an import of torch and triton each).
MIN_JOBS_TO_START = 4
# ... and fewer than this too while no worker has answered a job yet (the pool was
# warmed at capture start and its workers may still be importing: a small graph's few
# kernels compile sooner in-process than they wait for them; lstm's two small graphs
# waited ~25 s cold on the H100 host)
MIN_JOBS_WHILE_STARTING = 8


def precompile(path: str, jobs: list, target) -> concurrent.futures.Future:
    """A future done when every job ``(jit function name, warmup args, options)`` of the
    module at ``path`` has been compiled by the pool (failures included: see above).
    Done at once when the pool is disabled, not started and given few jobs, or there
    is nothing to compile."""
    done: concurrent.futures.Future = concurrent.futures.Future()
    if _pool is not None and stats["jobs"] == 0 and len(jobs) < MIN_JOBS_WHILE_STARTING:
        p = None
    else:
        p = pool() if len(jobs) >= MIN_JOBS_TO_START or (jobs and _pool is not None) else None
    if p is None:
        done.set_result(None)
        return done
    left = [len(jobs)]
    count = threading.Lock()

    def finished(_):
        with count:
            left[0] -= 1
            if left[0] == 0:
                done.set_result(None)

    for job in jobs:
        p.submit((path, target, [job])).add_done_callback(finished)
    return done
