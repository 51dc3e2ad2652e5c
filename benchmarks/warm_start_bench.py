"""Warm start, new process to the end of the first step: torchkiln vs torch.compile.

    python3 benchmarks/warm_start_bench.py [--models a,b] [--modes inference,training]
        [--warm 3] [--device cpu|cuda] [--bytecode nowrite|write|both] [--json PATH]
        [--keep DIR]

Per model and mode, in one cache directory: one cold process per compiler (empty
caches: fills them), then ``--warm`` rounds of fresh processes, the variants
interleaved in each round (kiln, peer), each timed from the parent's spawn to the end
of its first compiled step (interpreter start, imports, building the model, compile,
the step: what a restarted job waits for).  Reported: the fastest warm start of each
variant (a shared machine only ever adds time), kiln/peer per row, the geometric mean,
and each row's ``warm_start_hits`` (frames installed from records, no capture) and
result check against eager.

``--bytecode``: ``nowrite`` runs torchkiln's processes with ``PYTHONDONTWRITEBYTECODE=1``
and no ``.pyc`` of torchkiln (every process compiles torchkiln's sources: a checkout
used in place, CI here); ``write`` gives them a ``PYTHONPYCACHEPREFIX`` kept across
the run (what a ``pip install`` user sees: ``.pyc`` files exist); ``both`` measures
the two, interleaved.  Each process also reports its CPU time (``time.process_time()``) at the end of the
first step: ``cpu`` columns, far less sensitive to a loaded machine than wall time
(torch.compile's compile workers, if it starts any, are not counted: a flattering peer).
The peer's process imports neither torchkiln's compiler nor its
``__init__`` (the suite's model factories are loaded under stub packages), so its
time holds torch.compile's work only.

``--base DIR`` adds ``base``: torchkiln from another source tree (``git archive main |
tar -x -C DIR``), cold and warm alike, interleaved with the others in every round, so
a before/after comparison sees the same machine load.

``--floor`` adds ``eager``: a process that imports torch (not torchkiln), builds the
model and runs eager's first step, timed the same way: the part of every variant's time
that is not compiling (interpreter, ``import torch``, the model, the optimizer's
``torch._dynamo`` import in training rows, the step itself); kiln minus eager is what
torchkiln's warm start adds.  On a GPU eager's first step is no lower bound (it loads
ATen's and cuBLAS's kernels lazily, which a compiled step partly avoids): ``--floor bare``
adds ``bare`` instead, the same process without the step (``import torch``, CUDA
initialised, the model and its inputs built on the device, the optimizer made), and
``--floor both`` adds the two.

On a GPU the kiln column's hits read ``<frame hits>/tc<n>``: ``n`` Triton kernels
compiled by that process (``triton_cache_saved``; a warm start should compile none).

``--keep DIR`` keeps the caches under ``DIR/<model>-<mode>``; a later run with the
same ``DIR`` skips the peer's cold process where its caches exist (torch.compile's
caches do not depend on torchkiln's sources; torchkiln's keys do, so its cold process
always runs).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import types

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL = ("mlp", "cnn", "resnet_cnn", "lstm", "nanogpt", "gpt2_block", "moe",
       "hf_gpt2", "hf_bert", "hf_llama", "hf_t5", "hf_vit", "hf_resnet")


def _stub_packages() -> None:
    """``torchkiln`` and ``torchkiln.bench`` as empty packages: the suite's model
    factories and the harness import without torchkiln's ``__init__`` (the peer's process)."""
    for name in ("torchkiln", "torchkiln.bench"):
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(REPO, *name.split("."))]
        sys.modules[name] = module


def eager_worker(spec: dict) -> dict:
    """The floor: eager's first step in a new process, the model built as the others do
    (``bare``: everything but the step)."""
    import copy

    from torchkiln.bench import measure, run

    with measure.threads(spec["threads"]):
        work = run.build(spec["model"], spec["device"])
        model = copy.deepcopy(copy.deepcopy(work.model))
        step = run._Step(model, model, work, spec["mode"], spec["device"])
        if spec["variant"] == "bare":
            measure.timed(lambda: None, spec["device"])  # synchronizes the device
        else:
            measure.timed(step.first, spec["device"])
        seconds = time.time() - spec["spawn_time"]
    return {"s": seconds, "cpu": time.process_time(), "status": "ok", "error": "", "hits": None, "graphs": 0}


def worker(spec: dict) -> dict:
    """One process: one variant's first step, timed from ``spec["spawn_time"]``."""
    if spec["variant"] in ("peer", "eager", "bare"):
        _stub_packages()
    if spec["variant"] in ("eager", "bare"):
        return eager_worker(spec)
    from torchkiln.bench import run

    run._peak_memory = lambda *a, **k: None  # not measured here: only the first step
    opts = run.Options(device=spec["device"], peer=spec["variant"] == "peer", threads=spec["threads"])
    row = run.measure_model(spec["model"], spec["mode"], opts, "warm", only="peer_" if spec["variant"] == "peer" else "",
                            spawn_time=spec["spawn_time"])
    prefix = "peer_" if spec["variant"] == "peer" else ""
    if prefix:  # whether torch.compile's warm process hit its caches
        from torch._dynamo.utils import counters

        hits = {k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")}
        hits.update({k: v for k, v in counters["aot_autograd"].items() if k.startswith("autograd_cache")})
    else:
        from torchkiln import counters

        hits = row.get("warm_start_hits")
        if spec["device"] != "cpu":  # Triton kernels this process compiled (cache/triton_store.py)
            hits = f"{hits}/tc{counters['inductor'].get('triton_cache_saved', 0)}"
    return {"s": row.get(f"{prefix}warm_start_s"), "cpu": row.get(f"{prefix}warm_start_cpu_s"),
            "status": row.get(f"{prefix}status"),
            "error": row.get(f"{prefix}error", ""), "hits": hits, "graphs": row.get(f"{prefix}graphs")}


def spawn(model: str, mode: str, variant: str, cache: str, args, pycache: str | None, timeout: float,
          repo: str = REPO) -> dict:
    env = dict(os.environ, TORCHKILN_CACHE_DIR=os.path.join(cache, "torchkiln"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
               TRITON_CACHE_DIR=os.path.join(cache, "triton"), OMP_NUM_THREADS=str(args.threads))
    env["PYTHONPATH"] = os.pathsep.join([repo] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.pop("PYTHONPYCACHEPREFIX", None)
    if pycache:  # a pip-installed torchkiln: .pyc files exist after the first process
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    elif variant == "kiln":
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        spec = {"model": model, "mode": mode, "variant": variant, "device": args.device, "threads": args.threads,
                "spawn_time": time.time()}
        try:
            worker_script = os.path.join(repo, "benchmarks", os.path.basename(__file__))
            if not os.path.exists(worker_script):
                worker_script = os.path.abspath(__file__)
            proc = subprocess.run([sys.executable, worker_script, "--worker", json.dumps(spec), out.name],
                                  env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"s": None, "status": "error", "error": f"timeout after {timeout:.0f} s"}
        text = out.read()
        if proc.returncode != 0 or not text:
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            return {"s": None, "status": "error", "error": lines[-1] if lines else f"exit {proc.returncode}"}
        return json.loads(text)


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def measure_row(model: str, mode: str, args, pycache: str | None) -> dict:
    kinds = {"nowrite": [("kiln", None)], "write": [("kiln_pyc", pycache)],
             "both": [("kiln", None), ("kiln_pyc", pycache)]}[args.bytecode]
    cold_pyc = kinds[-1][1]  # the cold processes write .pyc files where a warm variant reads them
    if args.base:
        kinds = [("base", kinds[0][1])] + kinds
    # the peer and the floors read and write .pyc files where kiln_pyc does: a machine whose
    # site-packages hold no .pyc of torch (read-only, none shipped) would otherwise make them
    # compile torch's sources in every process (~7 s on the H100 host) and flatter kiln
    shared = pycache if args.bytecode != "nowrite" else None
    kinds = kinds + [(name, shared) for name in _floors(args.floor)]
    repos = {"base": args.base}
    cache = os.path.join(args.keep, f"{model}-{mode}") if args.keep else tempfile.mkdtemp(prefix="tk-warm-")
    os.makedirs(cache, exist_ok=True)
    row = {"model": model, "mode": mode}
    if args.base:
        row["base_cold"] = spawn(model, mode, "kiln", cache, args, cold_pyc, args.timeout, args.base)
    row["kiln_cold"] = spawn(model, mode, "kiln", cache, args, cold_pyc, args.timeout)
    if not os.path.isdir(os.path.join(cache, "inductor")) or not args.keep:
        row["peer_cold"] = spawn(model, mode, "peer", cache, args, shared, args.timeout)
    samples = {name: [] for name, _ in kinds}
    samples["peer"] = []
    for _ in range(args.warm):
        for name, prefix in kinds + [("peer", shared)]:
            samples[name].append(spawn(model, mode, name if name in ("peer", "eager", "bare") else "kiln", cache, args,
                                       prefix, args.timeout, repos.get(name) or REPO))
    for name, results in samples.items():
        times = [r["s"] for r in results if r.get("s") is not None and r.get("status") == "ok"]
        bad = [r for r in results if r.get("status") != "ok"]
        row[name] = min(times) if times else None
        cpus = [r["cpu"] for r in results if r.get("cpu") is not None and r.get("status") == "ok"]
        row[f"{name}_cpu"] = min(cpus) if cpus else None
        row[f"{name}_all"] = [r.get("s") for r in results]
        if bad:
            row[f"{name}_error"] = f"{bad[0].get('status')}: {bad[0].get('error')}"
        row[f"{name}_hits"] = [r.get("hits") for r in results]
    for name, _ in kinds:
        if row[name] and row["peer"]:
            row[f"{name}/peer"] = row[name] / row["peer"]
        if row[f"{name}_cpu"] and row["peer_cpu"]:
            row[f"{name}/peer_cpu"] = row[f"{name}_cpu"] / row["peer_cpu"]
    if not args.keep:
        import shutil

        shutil.rmtree(cache, ignore_errors=True)
    return row


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        spec = json.loads(sys.argv[2])
        with open(sys.argv[3], "w") as f:
            json.dump(worker(spec), f)
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(ALL))
    p.add_argument("--modes", default="inference,training")
    p.add_argument("--warm", type=int, default=3, help="warm rounds (default 3)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bytecode", choices=("nowrite", "write", "both"), default="both")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--keep", metavar="DIR")
    p.add_argument("--base", metavar="DIR", help="also torchkiln from this source tree (before/after)")
    p.add_argument("--floor", nargs="?", const="eager", choices=("eager", "bare", "both"),
                   help="also eager's first step in a new process (eager), that process without the step (bare), or both")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    pycache = tempfile.mkdtemp(prefix="tk-pyc-")
    kinds = ["kiln"] if args.bytecode == "nowrite" else ["kiln_pyc"] if args.bytecode == "write" else ["kiln", "kiln_pyc"]
    kinds = ["base"] * bool(args.base) + kinds + _floors(args.floor)
    rows = []
    print(f"{'model':12} {'mode':9} " + " ".join(f"{k + ' s':>9}" for k in kinds) + f" {'peer s':>8} "
          + " ".join(f"{k + '/peer':>13}" for k in kinds) + " " + " ".join(f"{k + ' cpu':>11}" for k in kinds)
          + f" {'peer cpu':>9} " + " ".join(f"{k + '/peer cpu':>14}" for k in kinds) + "  hits  notes", flush=True)
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            row = measure_row(model, mode, args, pycache)
            rows.append(row)
            notes = "; ".join(f"{k}: {row[k]}" for k in row if k.endswith("_error"))
            fmt = lambda v, spec: format(v, spec) if v is not None else "-"
            print(f"{model:12} {mode:9} " + " ".join(f"{fmt(row[k], '9.2f')}" for k in kinds)
                  + f" {fmt(row['peer'], '8.2f')} " + " ".join(f"{fmt(row.get(k + '/peer'), '13.3f')}" for k in kinds)
                  + " " + " ".join(f"{fmt(row.get(k + '_cpu'), '11.2f')}" for k in kinds)
                  + f" {fmt(row.get('peer_cpu'), '9.2f')} "
                  + " ".join(f"{fmt(row.get(k + '/peer_cpu'), '14.3f')}" for k in kinds)
                  + "  " + " ".join(str(row.get(k + "_hits")) for k in kinds if k not in ("eager", "bare"))
                  + f"  {notes}", flush=True)
    summary = {k: geomean([r.get(f"{k}/peer") for r in rows]) for k in kinds}
    summary.update({f"{k} cpu": geomean([r.get(f"{k}/peer_cpu") for r in rows]) for k in kinds})
    worst = {k: max((r.get(f"{k}/peer") or 0 for r in rows), default=None) for k in kinds}
    worst.update({f"{k} cpu": max((r.get(f"{k}/peer_cpu") or 0 for r in rows), default=None) for k in kinds})
    print("geomean " + ", ".join(f"{k}/peer {fmt(v, '.3f')} (worst row {fmt(worst[k], '.3f')})"
                                 for k, v in summary.items()), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "geomean": summary, "worst": worst, "args": vars(args)}, f, indent=1)
    return 0


def _floors(floor: str | None) -> list[str]:
    return {None: [], "eager": ["eager"], "bare": ["bare"], "both": ["eager", "bare"]}[floor]


def fmt(v, spec):
    return format(v, spec) if v is not None else "-"


if __name__ == "__main__":
    sys.exit(main())
