"""Run the suite: every model in every mode, each measurement in its own subprocess.

Per model and mode, a *cold* subprocess starts with empty caches (a fresh temporary
``TORCHKILN_CACHE_DIR``, and ``TORCHINDUCTOR_CACHE_DIR``/``TRITON_CACHE_DIR`` for the
peer) and measures compile time, correctness and steady-state times; then one *warm*
subprocess per compiler starts with the caches the cold one left and measures its
warm start (spawn to the end of the first step: ``warm_start_s``), compile time,
correctness again, and peak memory.  A crash or a hang (``timeout``) of one
subprocess becomes an ``error`` row; the suite goes on.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Callable

from . import run
from .models import MODELS_EXTRA_HINT, resolve, transformers_available


def skipped_row(name: str, mode: str, opts: run.Options, reason: str) -> dict:
    return {"model": name, "mode": mode, "backend": opts.backend, "device": opts.device, "threads": opts.threads,
            "status": "skipped", "error": reason}


def worker_env(opts: run.Options, cache: str) -> dict:
    """The environment of a measuring subprocess: this one's, with the caches under
    ``cache``; with ``threads > 1`` also ``OMP_WAIT_POLICY=PASSIVE`` unless set.

    OpenMP's default wait policy spins between parallel regions; on a shared machine,
    where another process holds one of the cores, a two-thread team then waits for its
    descheduled thread at every barrier.  Measured here (2 cores, load ~8, mlp training
    step at 2 threads): eager 0.69-3.5 s, torchkiln 0.70-2.6 s with spinning; 64-85 ms
    and 65-84 ms with passive waits (31 ms at 1 thread).  Eager, torchkiln and the peer
    share one OpenMP runtime (torch's libgomp), so the policy applies to all alike."""
    env = dict(os.environ,
               TORCHKILN_CACHE_DIR=os.path.join(cache, "torchkiln"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
               TRITON_CACHE_DIR=os.path.join(cache, "triton"))
    if opts.threads > 1 and opts.device == "cpu":
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def _subprocess(name: str, mode: str, phase: str, opts: run.Options, cache: str, timeout: float,
                only: str | None = None) -> dict:
    spec = {"model": name, "mode": mode, "phase": phase, "options": dataclasses.asdict(opts), "only": only}
    env = worker_env(opts, cache)
    if env.get("TORCHKILN_TRACE"):  # bench --report: one trace directory per model, mode and phase
        env["TORCHKILN_TRACE"] = os.path.join(env["TORCHKILN_TRACE"], f"{name}-{mode}-{phase}")
        env["TORCHKILN_TRACE_LABEL"] = f"{name} {mode} {phase}"
    out_path = os.path.join(cache, f"{phase}{only or ''}.json")
    cmd = [sys.executable, "-m", "torchkiln.bench.worker", json.dumps(spec), out_path]
    row = skipped_row(name, mode, opts, "")
    row["status"] = "error"
    try:
        spec["spawn_time"] = time.time()
        cmd[-2] = json.dumps(spec)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        row["error"] = f"{phase}: timeout after {timeout:.0f} s"
        return row
    if proc.returncode != 0 or not os.path.exists(out_path):
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        row["error"] = f"{phase}: worker exited with {proc.returncode}: {lines[-1] if lines else 'no output'}"
        return row
    with open(out_path) as f:
        return json.load(f)


def measure(name: str, mode: str, opts: run.Options, timeout: float = 600.0, isolate: bool = True,
            compile_fn: Callable | None = None) -> dict:
    """The row of one model in one mode; never raises.

    ``isolate=False`` measures in this process (cold and warm share its caches), for
    tests; ``compile_fn`` replaces ``torchkiln.compile`` there.
    """
    try:
        spec = resolve(name)
    except KeyError as exc:
        row = skipped_row(name, mode, opts, str(exc.args[0]))
        row["status"] = "error"
        return row
    if spec.needs_transformers and not transformers_available():
        return skipped_row(name, mode, opts, f"skipped: {MODELS_EXTRA_HINT}")
    if opts.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return skipped_row(name, mode, opts, "skipped: no CUDA device")
    try:
        if not isolate:
            cold = run.measure_model(name, mode, opts, "cold", compile_fn)
            return run.merge(cold, run.measure_model(name, mode, opts, "warm", compile_fn))
        with tempfile.TemporaryDirectory(prefix="torchkiln-bench-") as cache:
            cold = _subprocess(name, mode, "cold", opts, cache, timeout)
            if cold["status"] not in ("ok", "mismatch") and cold.get("peer_status") != "ok":
                return cold
            return _warm(name, mode, opts, cache, timeout, cold)
    except Exception as exc:  # the harness itself must not stop the suite either
        row = skipped_row(name, mode, opts, f"harness: {run.first_line(exc)}")
        row["status"] = "error"
        return row


def _warm(name: str, mode: str, opts: run.Options, cache: str, timeout: float, cold: dict) -> dict:
    """The warm measurements: one new process per compiler (torchkiln, then the peer),
    each timing its own warm start from spawn to the end of its first step."""
    row = run.merge(cold, _subprocess(name, mode, "warm", opts, cache, timeout, only=""))
    if opts.peer:
        peer = _subprocess(name, mode, "warm", opts, cache, timeout, only="peer_")
        peer.pop("status", None)  # an error row of the harness is the peer's
        if peer.get("error") and "peer_status" not in peer:
            peer["peer_status"], peer["peer_error"] = "error", peer.pop("error")
        row = run.merge(row, peer)
    return row


def run_suite(models: list[str], modes: list[str], opts: run.Options, timeout: float = 600.0, isolate: bool = True,
              compile_fn: Callable | None = None, on_row: Callable[[dict], None] | None = None,
              on_start: Callable[[str, str], None] | None = None) -> list[dict]:
    """Rows for every model in every mode, in order; ``on_start``/``on_row`` report progress."""
    rows = []
    for name in models:
        for mode in modes:
            if on_start:
                on_start(name, mode)
            row = measure(name, mode, opts, timeout, isolate, compile_fn)
            rows.append(row)
            if on_row:
                on_row(row)
    return rows
