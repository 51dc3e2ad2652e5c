"""The results: a rich table, the summary line with geometric means, the JSON file.

Geometric means are taken over rows whose status is ``ok`` only (a fast wrong answer
is no speedup); "vs peer" compares torchkiln's steady-state time with
``torch.compile``'s on rows where both are ok.
"""
from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import time
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

STATUS_STYLE = {"ok": "green", "mismatch": "bold red", "error": "red", "skipped": "yellow"}


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def summarize(rows: list[dict]) -> dict[str, Any]:
    """Counts per status and geometric-mean speedups per mode."""
    summary: dict[str, Any] = {"counts": {}}
    for row in rows:
        summary["counts"][row["status"]] = summary["counts"].get(row["status"], 0) + 1
    for mode in ("inference", "training"):
        ours = [r for r in rows if r["mode"] == mode and r["status"] == "ok"]
        peers = [r for r in rows if r["mode"] == mode and r.get("peer_status") == "ok"]
        both = [r for r in ours if r.get("peer_status") == "ok"]
        summary[mode] = {
            "rows_ok": len(ours),
            "speedup_geomean": geomean([r.get("speedup") for r in ours]),
            "peer_speedup_geomean": geomean([r.get("peer_speedup") for r in peers]),
            "vs_peer_geomean": geomean([r["peer_ms"] / r["ms"] for r in both if r.get("ms") and r.get("peer_ms")]),
            "warm_ratio_geomean": geomean([warm_ratio(r) for r in both]),
        }
    return summary


def warm_ratio(row: dict) -> float | None:
    """torchkiln's warm start over torch.compile's (each a new process with full caches,
    spawn to the end of the first step); below 1 is faster."""
    ours, peer = row.get("warm_start_s"), row.get("peer_warm_start_s")
    return ours / peer if ours and peer else None


def failed(rows: list[dict]) -> bool:
    """True when any torchkiln row is a mismatch or an error (the CLI's exit status)."""
    return any(r["status"] in ("mismatch", "error") for r in rows)


def _fmt(value, spec: str, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:{spec}}{suffix}"


def _x(value) -> str:
    return _fmt(value, ".2f", "x")


def summary_line(summary: dict, peer: bool, elapsed_s: float | None = None) -> str:
    parts = []
    for mode in ("inference", "training"):
        s = summary[mode]
        text = f"{mode} {_x(s['speedup_geomean'])} vs eager ({s['rows_ok']} ok)"
        if peer:
            text += (f", torch.compile {_x(s['peer_speedup_geomean'])}, torchkiln/torch.compile {_x(s['vs_peer_geomean'])}"
                     f", warm start kiln/peer {_fmt(s.get('warm_ratio_geomean'), '.3f')}")
        parts.append(text)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(summary["counts"].items()))
    line = "geomean speedup: " + "; ".join(parts) + f" | rows: {counts}"
    if elapsed_s is not None:
        line += f" | {elapsed_s / 60:.1f} min"
    return line


def table(rows: list[dict], peer: bool, title: str) -> Table:
    mem_kind = next((r["mem_kind"] for r in rows if r.get("mem_kind")), "rss")
    t = Table(title=title, title_justify="left", header_style="bold")
    for name, justify in [("model", "left"), ("mode", "left"), ("status", "left"), ("graphs/breaks", "right"),
                          ("compile s cold/warm", "right"), ("warm start s", "right"), ("eager ms", "right"), ("kiln ms", "right"),
                          ("speedup", "right"), (f"peak MB ({mem_kind}) eager/kiln", "right")]:
        t.add_column(name, justify=justify)
    if peer:
        for name in ("peer status", "peer compile s cold/warm", "peer warm start s", "warm kiln/peer", "peer ms",
                     "peer speedup", "kiln/peer"):
            t.add_column(name, justify="right")
    t.add_column("note", overflow="fold", max_width=60)
    for r in rows:
        status = r["status"]
        cells = [Text(r["model"]), r["mode"], Text(status, STATUS_STYLE.get(status, "")),
                 f"{_fmt(r.get('graphs'), 'd')}/{_fmt(r.get('graph_breaks'), 'd')}",
                 f"{_fmt(r.get('compile_cold_s'), '.2f')}/{_fmt(r.get('compile_warm_s'), '.2f')}",
                 _fmt(r.get("warm_start_s"), ".2f"), _fmt(r.get("eager_ms"), ".2f"), _fmt(r.get("ms"), ".2f"), _x(r.get("speedup")),
                 f"{_fmt(r.get('eager_peak_mb'), '.0f')}/{_fmt(r.get('peak_mb'), '.0f')}"]
        if peer:
            ps = r.get("peer_status", "-")
            vs = r["peer_ms"] / r["ms"] if r.get("peer_ms") and r.get("ms") else None
            cells += [Text(ps, STATUS_STYLE.get(ps, "")),
                      f"{_fmt(r.get('peer_compile_cold_s'), '.2f')}/{_fmt(r.get('peer_compile_warm_s'), '.2f')}",
                      _fmt(r.get("peer_warm_start_s"), ".2f"), _fmt(warm_ratio(r), ".3f"), _fmt(r.get("peer_ms"), ".2f"), _x(r.get("peer_speedup")), _x(vs)]
        note = r.get("error") or r.get("note") or ""
        if not note and r.get("graphs") == 0 and status == "ok":
            note = "no graph captured: ran eagerly"
        if not note and r.get("noise_ulps") and status == "ok":  # bench/correctness.py
            note = f"float64 error {r['err_vs_noise']:.2f}x the noise of eager perturbed by {r['noise_ulps']} ulps"
        if peer and r.get("peer_error"):
            note = (note + " | " if note else "") + "peer " + r["peer_error"]
        cells.append(Text(note))
        t.add_row(*cells)
    return t


def print_report(rows: list[dict], summary: dict, peer: bool, title: str, console: Console,
                 elapsed_s: float | None = None) -> None:
    console.print(table(rows, peer, title))
    console.print(summary_line(summary, peer, elapsed_s), soft_wrap=True, markup=False)


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _git_commit() -> str | None:
    """The checkout's commit, when torchkiln runs from a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=os.path.dirname(__file__), capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def write_json(path: str, rows: list[dict], summary: dict, meta: dict) -> None:
    """``{"meta": {...}, "summary": {...}, "rows": [...]}``; times in ms/s, memory in MiB,
    non-finite numbers as null."""
    import torch

    meta = dict(meta, torch=torch.__version__, python=platform.python_version(), machine=platform.machine(),
                time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), commit=_git_commit())
    with open(path, "w") as f:
        json.dump(_clean({"meta": meta, "summary": summary, "rows": rows}), f, indent=1)
        f.write("\n")
