"""The ``torchkiln`` command: ``bench``, ``explain``, ``report`` and ``cache``.

``torchkiln bench`` compiles the model suite for inference and training, checks every
result against eager and prints speedups and compile times (``torchkiln bench -h``;
``--report DIR`` traces every compile into DIR); ``torchkiln explain MODEL`` prints
``torchkiln.explain`` of a suite model; ``torchkiln report DIR`` renders a
``TORCHKILN_TRACE`` directory as one HTML page; ``torchkiln cache dir|stats|clear``
shows, summarizes or empties the persistent cache.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time

BENCH_EPILOG = """\
exit status: 0 when every row is ok or skipped; 1 when any row is a mismatch or an
error (torchkiln's result; the peer's status does not count); 2 for bad arguments;
130 when interrupted (Ctrl-C or SIGTERM), after printing the rows measured so far.

Each model and mode runs in two fresh subprocesses: a cold one (empty caches: compile
time, correctness, steady-state times) and a warm one (the caches kept: compile time,
correctness again, peak memory).  Times are medians of --repeat steps, eager and
compiled interleaved, with torch.set_num_threads(--threads)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchkiln", description="torchkiln, a compiler for PyTorch programs: "
                                     "benchmark it, explain what it captures, manage its cache.")
    sub = parser.add_subparsers(dest="command", metavar="{bench,explain,report,cache}")

    bench = sub.add_parser("bench", help="run the model suite against eager (and torch.compile with --peer)",
                           epilog=BENCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("--models", help="comma-separated model names (default: the whole suite; see --list); "
                                        "'package.module:function' names a factory of your own")
    bench.add_argument("--mode", choices=("inference", "training", "both"), default="both",
                       help="inference (eval, no_grad), training (forward, loss, backward, AdamW) or both (default)")
    bench.add_argument("--backend", default="inductor", help="torchkiln backend: eager, aot_eager, inductor (default)")
    bench.add_argument("--repeat", type=int, help="timed steps per variant (default 20, 10 with --quick)")
    bench.add_argument("--warmup", type=int, default=3, help="untimed steps before timing (default 3)")
    bench.add_argument("--peer", action="store_true", help="also measure torch.compile (inductor) side by side")
    bench.add_argument("--compiled-autograd", action="store_true",
                       help="torchkiln's training backwards through compiled autograd (the peer's stay eager)")
    bench.add_argument("--compile-mode", choices=("default", "reduce-overhead", "max-autotune"), default=None,
                       help="the mode of torchkiln.compile and of the peer's torch.compile (default: none)")
    bench.add_argument("--quick", action="store_true", help="a small subset (mlp, cnn, lstm, nanogpt) and fewer repeats")
    bench.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    bench.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for every variant (default 1)")
    bench.add_argument("--timeout", type=float, default=300, help="seconds per subprocess before it counts as an error (default 300)")
    bench.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    bench.add_argument("--profile", action="store_true",
                       help="after timing, a breakdown of one step per variant: generated kernels, extern calls "
                            "by op, allocation, optimizer, Python (wrapper, guards); the kernels are marked for "
                            "the profiler, so times are a little above the table's")
    bench.add_argument("--list", action="store_true", help="list the suite's models and exit")
    bench.add_argument("--report", metavar="DIR", help="write the TORCHKILN_TRACE of every model compiled into DIR "
                                                        "(one subdirectory per model, mode and phase); render it "
                                                        "with `torchkiln report DIR`")

    explain = sub.add_parser("explain", help="print torchkiln.explain of a suite model: graphs, graph breaks, reasons")
    explain.add_argument("model")
    explain.add_argument("--mode", choices=("inference", "training"), default="inference")
    explain.add_argument("--device", default="cpu")

    report = sub.add_parser("report", help="render a TORCHKILN_TRACE directory as one self-contained HTML page")
    report.add_argument("trace_dir", metavar="DIR")
    report.add_argument("-o", "--output", default="report.html", help="the HTML file to write (default report.html)")

    cache = sub.add_parser("cache", help="the persistent cache: print its directory, its statistics, or clear it")
    cache.add_argument("action", choices=("dir", "stats", "clear"),
                       help="dir: the local directory; stats: entries and bytes per layer and the hit/miss counts "
                            "of every process since the last clear; clear: empty the local directory (the remote "
                            "server is shared by a fleet and left alone)")
    return parser


def _list_models(console) -> int:
    from rich.table import Table

    from .bench.models import MODELS_EXTRA_HINT, QUICK, SUITE, transformers_available

    has_hf = transformers_available()
    t = Table("model", "description", "quick", "available", title="torchkiln bench models", title_justify="left")
    for spec in SUITE.values():
        available = "yes" if has_hf or not spec.needs_transformers else MODELS_EXTRA_HINT
        t.add_row(spec.name, spec.description, "yes" if spec.name in QUICK else "", available)
    console.print(t)
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _bench(args, console) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from .bench import report
    from .bench.models import QUICK, SUITE
    from .bench.run import Options
    from .bench.suite import run_suite

    if args.list:
        return _list_models(console)
    if args.models:
        models = [m.strip() for m in args.models.split(",") if m.strip()]
    else:
        models = list(QUICK if args.quick else SUITE)
    modes = ["inference", "training"] if args.mode == "both" else [args.mode]
    repeat = args.repeat or (10 if args.quick else 20)
    if args.report:  # the workers inherit it (bench.suite gives each model its own subdirectory)
        os.environ["TORCHKILN_TRACE"] = os.path.abspath(args.report)
    opts = Options(backend=args.backend, device=args.device, repeat=repeat, warmup=args.warmup, peer=args.peer,
                   threads=args.threads, compiled_autograd=args.compiled_autograd, profile=args.profile,
                   compile_mode=args.compile_mode)
    start = time.perf_counter()
    err = Console(stderr=True)
    rows: list[dict] = []
    total = len(models) * len(modes)
    interrupted = False
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=err,
                      transient=True) as progress:
            task = progress.add_task("compiling", total=total)

            def on_start(name, mode):
                progress.update(task, description=f"{name} {mode}")

            def on_row(row):
                rows.append(row)
                progress.advance(task)
                detail = row.get("error") or ""
                if row["status"] == "ok":
                    detail = f"{row.get('speedup', 0):.2f}x, compile {row.get('compile_cold_s', 0):.1f} s"
                progress.console.print(f"{row['model']} {row['mode']}: {row['status']} {detail}".rstrip(),
                                       markup=False, highlight=False, soft_wrap=True)

            run_suite(models, modes, opts, args.timeout, on_row=on_row, on_start=on_start)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: report what was measured
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    elapsed = time.perf_counter() - start
    summary = report.summarize(rows)
    title = (f"torchkiln bench: backend={opts.backend}, device={opts.device}, threads={opts.threads}, "
             f"repeat={opts.repeat}")
    if interrupted:
        title += f" -- INTERRUPTED after {len(rows)} of {total} rows"
    report.print_report(rows, summary, opts.peer, title, console, elapsed)
    if args.profile:
        from .bench.profile import format_breakdowns

        for row in rows:
            if row.get("profile"):
                console.print(format_breakdowns(row["model"], row["mode"], row["profile"]), markup=False,
                              highlight=False)
    if args.report:
        console.print(f"trace of every compile in {args.report}: render it with `torchkiln report {args.report}`")
    if args.json:
        report.write_json(args.json, rows, summary, {"options": vars(opts), "models": models, "modes": modes,
                                                     "elapsed_s": elapsed, "interrupted": interrupted})
    if interrupted:
        return 130
    return 1 if report.failed(rows) else 0


def _explain(args) -> int:
    import torchkiln

    from .bench.models import build

    work = build(args.model, args.device)
    work.model.train(args.mode == "training")
    try:
        print(torchkiln.explain(work.model)(*work.args, **work.kwargs))
    except Exception as exc:
        print(f"torchkiln explain {args.model}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def _report(args) -> int:
    from .report import write_report

    try:
        path = write_report(args.trace_dir, args.output)
    except FileNotFoundError as exc:
        print(f"torchkiln report: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


def _cache(args, console) -> int:
    from .cache.store import LocalStore, cache_root, read_stats

    path = cache_root()
    if args.action == "dir":
        print(path)
    elif args.action == "clear":
        shutil.rmtree(path, ignore_errors=True)
        print(f"removed {path}")
    else:
        _cache_stats(console, path, LocalStore(path), read_stats(path))
    return 0


def _cache_stats(console, path: str, local, stats: dict) -> None:
    import os

    from rich.table import Table

    t = Table("layer", "entries", "bytes", title=f"torchkiln cache: {path}", title_justify="left")
    for ns in ("fxgraph", "aotautograd", "frames"):
        items = local.entries(ns)
        t.add_row(ns, str(len(items)), f"{sum(size for _, size, _ in items):,}")
    for sub, suffix in (("cpp", ".so"), ("triton", ".py")):
        folder = os.path.join(path, sub)
        files = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(suffix)] if os.path.isdir(folder) else []
        t.add_row(f"{sub} ({suffix})", str(len(files)), f"{sum(os.path.getsize(f) for f in files):,}")
    console.print(t)
    layers = [("FX graph", "inductor", "fxgraph_cache_"), ("AOT autograd", "aot_autograd", "autograd_cache_"),
              ("C++ library", "inductor", "cpp_cache_"), ("frame record", "warm_start", "")]
    c = Table("cache", "hit", "miss", "bypass", "saved", title="since the last clear, all processes",
              title_justify="left")
    for label, group, prefix in layers:
        c.add_row(label, *(str(stats.get(f"{group}.{prefix}{k}", 0)) for k in ("hit", "miss", "bypass", "saved")))
    console.print(c)
    store = Table("store", "count", title="store lookups", title_justify="left")
    for name in ("memory_hit", "local_hit", "remote_hit", "miss", "put", "corrupt", "evicted", "put_error",
                 "remote_error", "remote_rejected"):
        store.add_row(name, str(stats.get(f"cache.{name}", 0)))
    console.print(store)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``torchkiln`` console script; returns the exit status."""
    from rich.console import Console

    args = _parser().parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 220)
    if args.command == "bench":
        return _bench(args, console)
    if args.command == "explain":
        return _explain(args)
    if args.command == "report":
        return _report(args)
    if args.command == "cache":
        return _cache(args, console)
    _parser().print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
