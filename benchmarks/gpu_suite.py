"""The model suite on a GPU with the peer, in one device call: compiles overlap, timing does not.

    python3 benchmarks/gpu_suite.py --out DIR [--models a,b] [--modes inference,training]
        [-j 3] [--budget 540] [--timeout 300] [--repeat 20] [--compile-mode MODE]
        [--profile-above 1.05] [--jobs JSON]                      (DEV=cpu: a smoke run)

`torchkiln bench --device cuda --peer` runs every row's cold and warm processes one after
the other: the whole suite takes longer than one device call.  This driver runs only
the cold measurement of each row (``torchkiln.bench.run.measure_model(..., "cold")``:
first call = cold compile and correctness, then eager / torchkiln / torch.compile timed
interleaved, medians), ``-j`` rows at once, each in a fresh process with empty caches.
While one row times its steady state (and profiles it), every other row's process tree
is stopped (SIGSTOP), so timings see a quiet machine; the stopped time is subtracted
from the cold-compile times of the rows it interrupted.  Compiles of ``-j`` rows still
share the CPU, so cold-compile times are those of a loaded machine (both compilers
alike).  Rows run longest first; rows not finished when ``--budget`` seconds are up
become ``timeout`` rows.

A row whose torchkiln/torch.compile time ratio is above ``--profile-above`` also gets a
kernel table (torch.profiler, 5 steps per variant: kernels per step, GPU kernel time,
CPU enqueue time, top kernels), written to DIR/profiles.txt.  DIR/suite.jsonl holds the
rows (the bench's JSON fields, ``compile_cold_s`` corrected for stopped time), and
DIR/suite.txt the table that is also printed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

DEV = os.environ.get("DEV", "cuda")
# longest first (cold compile of both compilers, from earlier runs); unknown rows last
_ORDER = ["hf_t5", "hf_gpt2", "hf_llama", "hf_bert", "hf_vit", "hf_resnet", "nanogpt", "resnet_cnn", "moe",
          "gpt2_block", "lstm", "cnn", "mlp"]


# --- worker (one row, in its own process) -------------------------------------------------

def kernel_table(steps: dict, n: int = 5, top: int = 12) -> str:
    """``n`` profiled steps of each ``steps`` entry (label or row prefix -> a bench
    ``_Step``): kernels per step, GPU kernel time, CPU enqueue and wall time per step, and
    the ``top`` kernels by GPU time (also used by benchmarks/gpu_profile.py)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    names = {"eager_": "eager", "": "kiln", "peer_": "peer", "base_": "kiln base"}
    lines = []
    for prefix, step in steps.items():
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])
        with profile(activities=acts) as prof:
            if DEV == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                step.step()
            cpu_end = time.perf_counter()
            if DEV == "cuda":
                torch.cuda.synchronize()
            wall = time.perf_counter() - t
        kern = defaultdict(lambda: [0, 0.0])
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                kern[e.name][0] += 1
                kern[e.name][1] += getattr(e, "device_time_total", 0.0)
        nk = sum(c for c, _ in kern.values()) / n
        gt = sum(t for _, t in kern.values()) / n / 1e3
        lines.append(f"  == {names.get(prefix, prefix)}: {nk:.0f} kernels/step, GPU kernel time {gt:.3f} ms/step, CPU enqueue "
                     f"{1e3 * (cpu_end - t) / n:.3f} ms/step, wall {1e3 * wall / n:.3f} ms/step (profiled)")
        for k, (c, tt) in sorted(kern.items(), key=lambda kv: -kv[1][1])[:top]:
            lines.append(f"     {tt / n / 1e3:8.3f} ms {c / n:5.1f}x  {k[:110]}")
    return "\n".join(lines)


def worker(spec: dict, ctl_in: int, ctl_out: int) -> None:
    """Measure one row; before timing ask the parent for the machine (``T``), wait for
    ``G``, time (and profile), then say ``D``.  First-call wall intervals go into the row."""
    if DEV == "cpu":
        import torch

        torch.cuda.synchronize = lambda: None
    from torchkiln.bench import run

    intervals, base = {}, {}
    first_call, time_interleaved = run._first_call, run._time_interleaved
    if spec.get("base"):  # "module:function": a context manager under which torchkiln compiles the A/B's base
        import importlib

        from torchkiln.aot import config as aot_config
        from torchkiln.codegen import config as codegen_config

        mod, fn = spec["base"].split(":")
        base_ctx = getattr(importlib.import_module(mod), fn)
        # base and new compile the same graphs: neither may load what the other stored
        codegen_config.fx_graph_cache = aot_config.enable_autograd_cache = False

    def timed_first_call(prefix, *args, **kwargs):
        if prefix == "" and spec.get("base"):
            t0 = time.time()
            compile_fn = args[4]

            def compile_base(model):
                # capture caches frames by code object: a wrapper with its own forward
                # keeps the new variant from running the base's frame
                class Base(type(model)):
                    def forward(self, *a, **k):
                        return super().forward(*a, **k)

                model.__class__ = Base
                return compile_fn(model)

            with base_ctx():
                fields, step = first_call("base_", *args[:4], compile_base, *args[5:], **kwargs)
            intervals["base_"] = (t0, time.time())
            base["fields"], base["step"] = fields, step
        t0 = time.time()
        try:
            return first_call(prefix, *args, **kwargs)
        finally:
            intervals[prefix] = (t0, time.time())

    def exclusive_timing(steps, row, opts):
        if base.get("step") is not None:
            steps = {"base_": base.pop("step"), **steps}
        row.update(base.get("fields", {}))
        os.write(ctl_out, b"T")
        assert os.read(ctl_in, 1) == b"G"
        try:
            time_interleaved(steps, row, opts)
            ratio = row.get("ms", math.inf) / row.get("peer_ms", math.inf) if row.get("peer_ms") else 0.0
            if ratio > spec["profile_above"] and "ms" in row:
                try:
                    row["kernel_table"] = kernel_table(steps, top=int(os.environ.get("KTOP", "12")))
                except Exception as exc:  # the profile is extra; the row stands
                    row["kernel_table"] = f"  profile failed: {run.first_line(exc)}"
        finally:
            os.write(ctl_out, b"D")

    run._first_call, run._time_interleaved = timed_first_call, exclusive_timing
    opts = run.Options(device=DEV, peer=True, repeat=spec["repeat"], warmup=spec["warmup"],
                       compile_mode=spec["compile_mode"])
    row = run.measure_model(spec["model"], spec["mode"], opts, "cold")
    row["first_call_intervals"] = intervals
    row.pop("traceback", None), row.pop("peer_traceback", None)
    with open(spec["out"], "w") as f:
        json.dump(row, f)


# --- parent -----------------------------------------------------------------------------------

def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (compile pools, ptxas), from /proc."""
    children = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children[ppid].append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def _signal_tree(pid: int, sig: int) -> None:
    for p in _descendants(pid):
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


class _Job:
    def __init__(self, model, mode, args, tmp, tag="", env=None, compile_mode=None, base=None):
        self.model, self.mode, self.tag, self.env, self.base = model, mode, tag, env or {}, base
        self.compile_mode = compile_mode if compile_mode is not None else args.compile_mode
        self.dir = tempfile.mkdtemp(prefix=f"{model}-{mode}-", dir=tmp)
        self.out = os.path.join(self.dir, "row.json")
        self.log = os.path.join(self.dir, "log.txt")
        self.paused: list[list[float]] = []  # [start, end] wall times it was stopped
        self.proc = None
        self.start = 0.0

    def launch(self, args):
        p2c_r, p2c_w = os.pipe()
        c2p_r, c2p_w = os.pipe()
        spec = {"model": self.model, "mode": self.mode, "out": self.out, "repeat": args.repeat, "base": self.base,
                "warmup": args.warmup, "compile_mode": self.compile_mode, "profile_above": args.profile_above}
        env = dict(os.environ, **self.env)
        env.update(TORCHKILN_CACHE_DIR=os.path.join(self.dir, "torchkiln"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(self.dir, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(self.dir, "triton"), DEV=DEV)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec), str(p2c_r), str(c2p_w)]
        self.proc = subprocess.Popen(cmd, env=env, pass_fds=(p2c_r, c2p_w), stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT)
        os.close(p2c_r), os.close(c2p_w)
        self.to_child, self.from_child = p2c_w, c2p_r
        self.start = time.time()

    def active_seconds(self, now):
        return now - self.start - sum((e or now) - s for s, e in self.paused)

    def row(self, status_if_missing: str) -> dict:
        try:
            with open(self.out) as f:
                row = json.load(f)
        except (OSError, ValueError):
            with open(self.log, errors="replace") as f:
                tail = [line for line in f.read().splitlines() if line.strip()][-3:]
            return {"model": self.model, "mode": self.mode, "tag": self.tag, "status": "error",
                    "error": f"{status_if_missing}: {' | '.join(tail)[-300:]}"}
        row["tag"] = self.tag
        for prefix, (t0, t1) in row.pop("first_call_intervals", {}).items():
            stopped = sum(max(0.0, min(t1, e or time.time()) - max(t0, s)) for s, e in self.paused)
            if f"{prefix}compile_cold_s" in row:
                row[f"{prefix}compile_stopped_s"] = stopped
                row[f"{prefix}compile_cold_s"] -= stopped
        return row


def _geomean(values):
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def table(rows: list[dict]) -> str:
    head = (f"{'tag':<8}{'model':<11}{'mode':<10}{'status':<9}{'eager ms':>9}{'kiln ms':>9}{'peer ms':>9}"
            f"{'kiln/peer':>10}{'x eager':>8}{'cold kiln s':>12}{'cold peer s':>12}  note")
    lines = [head]
    for r in rows:
        ratio = r["ms"] / r["peer_ms"] if r.get("ms") and r.get("peer_ms") else float("nan")
        note = r.get("error") or r.get("peer_error") or r.get("note") or ""
        if r.get("base_ms") and r.get("ms") and r.get("peer_ms"):
            note = f"base {r['base_ms']:.2f} ms, new/base {r['ms'] / r['base_ms']:.3f}, base/peer {r['base_ms'] / r['peer_ms']:.3f} {note}"
        lines.append(f"{r.get('tag', ''):<8}{r['model']:<11}{r['mode']:<10}{r.get('status', '?'):<9}{r.get('eager_ms', math.nan):9.2f}"
                     f"{r.get('ms', math.nan):9.2f}{r.get('peer_ms', math.nan):9.2f}{ratio:10.3f}"
                     f"{r.get('speedup', math.nan):8.2f}{r.get('compile_cold_s', math.nan):12.1f}"
                     f"{r.get('peer_compile_cold_s', math.nan):12.1f}  {str(note)[:90]}")
    for tag, mode in sorted({(r.get("tag", ""), r["mode"]) for r in rows}):
        ok = [r for r in rows if r["mode"] == mode and r.get("tag", "") == tag and r.get("ms") and r.get("peer_ms")]
        lines.append(f"geomean {tag} {mode}: kiln/peer {_geomean([r['ms'] / r['peer_ms'] for r in ok]):.3f}, "
                     f"kiln x eager {_geomean([r['eager_ms'] / r['ms'] for r in ok]):.3f}, "
                     f"peer x eager {_geomean([r['eager_ms'] / r['peer_ms'] for r in ok]):.3f}, "
                     f"cold kiln/peer {_geomean([r['compile_cold_s'] / r['peer_compile_cold_s'] for r in ok if r.get('peer_compile_cold_s')]):.3f}"
                     f" ({len(ok)} rows)")
    lines.append(f"rows: {sum(r.get('status') == 'ok' for r in rows)} ok of {len(rows)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/gpu_suite")
    ap.add_argument("--models", default=",".join(_ORDER))
    ap.add_argument("--modes", default="training,inference")
    ap.add_argument("-j", type=int, default=3)
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for the whole run")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds of one row (not counting stopped time)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compile-mode", default=None)
    ap.add_argument("--profile-above", type=float, default=1.05)
    ap.add_argument("--jobs", help="a JSON list of rows instead of --models/--modes: {model, mode, tag, env, "
                                   "compile_mode, base}; env (e.g. PYTHONPATH, a config switch) is the row's process's; base "
                                   "(module:function, a context manager) adds a variant compiled under it (the A/B's base), "
                                   "timed interleaved with the others, torchkiln's caches off")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker[0]), int(args.worker[1]), int(args.worker[2]))
        return 0
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="gpu_suite-")
    models = args.models.split(",")
    models.sort(key=lambda m: _ORDER.index(m) if m in _ORDER else len(_ORDER))
    if args.jobs:
        todo = [_Job(j["model"], j["mode"], args, tmp, j.get("tag", ""), j.get("env"), j.get("compile_mode"), j.get("base"))
                for j in json.loads(args.jobs)]
    else:
        todo = [_Job(m, mode, args, tmp) for m in models for mode in args.modes.split(",")]
    running: list[_Job] = []
    waiting: list[_Job] = []  # asked for the machine
    timing: _Job | None = None
    rows = []

    def finish(job, status):
        row = job.row(status)
        rows.append(row)
        with open(os.path.join(args.out, "suite.jsonl"), "a") as f:
            f.write(json.dumps({k: v for k, v in row.items() if k != "kernel_table"}) + "\n")
        if row.get("kernel_table"):
            with open(os.path.join(args.out, "profiles.txt"), "a") as f:
                f.write(f"# {job.tag} {row['model']} {row['mode']}: kiln {row.get('ms', 0):.3f} / peer "
                        f"{row.get('peer_ms', 0):.3f} / eager {row.get('eager_ms', 0):.3f} ms\n{row['kernel_table']}\n")
        if row.get("status") != "ok":
            with open(job.log, errors="replace") as f, open(os.path.join(args.out, "errors.txt"), "a") as g:
                g.write(f"# {job.model} {job.mode}: {row.get('error', '')}\n{f.read()[-3000:]}\n")
        print(f"[{time.time() - t_start:6.0f}s] {job.tag} {job.model} {job.mode}: {row.get('status')} kiln "
              f"{row.get('ms', math.nan):.2f} peer {row.get('peer_ms', math.nan):.2f} eager "
              f"{row.get('eager_ms', math.nan):.2f} ms, cold {row.get('compile_cold_s', math.nan):.1f} / "
              f"{row.get('peer_compile_cold_s', math.nan):.1f} s {row.get('error', '')[:80]}", flush=True)

    def grant(job):
        nonlocal timing
        timing = job
        now = time.time()
        for other in running:
            if other is not job:
                _signal_tree(other.proc.pid, signal.SIGSTOP)
                other.paused.append([now, None])
        os.write(job.to_child, b"G")

    def release():
        nonlocal timing
        now = time.time()
        for other in running:
            if other is not timing and other.paused and other.paused[-1][1] is None:
                other.paused[-1][1] = now
                _signal_tree(other.proc.pid, signal.SIGCONT)
        timing = None

    def kill(job):
        _signal_tree(job.proc.pid, signal.SIGKILL)
        job.proc.wait()

    while todo or running:
        now = time.time()
        if now - t_start > args.budget:
            for job in running:
                if job is timing:
                    release()
                kill(job)
                finish(job, "timeout (budget)")
            for job in todo:
                rows.append({"model": job.model, "mode": job.mode, "tag": job.tag, "status": "not run",
                             "error": "budget"})
            break
        while todo and len(running) < args.j and timing is None:
            job = todo.pop(0)
            job.launch(args)
            running.append(job)
        fds = {job.from_child: job for job in running}
        ready, _, _ = select.select(list(fds), [], [], 0.2)
        for fd in ready:
            job = fds[fd]
            msg = os.read(fd, 1)
            if msg == b"T":
                waiting.append(job)
            elif msg == b"D":
                release()
            # b"" : the worker exited; handled below
        if timing is None and waiting:
            grant(waiting.pop(0))
        now = time.time()
        for job in list(running):
            if job.proc.poll() is not None:
                if job is timing:
                    release()
                if job in waiting:
                    waiting.remove(job)
                running.remove(job)
                os.close(job.to_child), os.close(job.from_child)
                finish(job, f"worker exited with {job.proc.returncode}")
            elif job is not timing and job.active_seconds(now) > args.timeout:
                kill(job)
                if job in waiting:
                    waiting.remove(job)
                running.remove(job)
                finish(job, f"timeout after {args.timeout:.0f} s")
    rows.sort(key=lambda r: (r.get("tag", ""), r["mode"], _ORDER.index(r["model"]) if r["model"] in _ORDER else 99))
    text = table(rows) + f"\nwall {time.time() - t_start:.0f} s, -j {args.j}"
    print(text)
    with open(os.path.join(args.out, "suite.txt"), "w") as f:
        f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
