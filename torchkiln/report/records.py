"""Reading a ``TORCHKILN_TRACE`` directory: processes, compile ids, stage times."""
from __future__ import annotations

import dataclasses
import json
import os


@dataclasses.dataclass
class Compile:
    """Every record of one compile id of one process, by kind, in trace order."""

    cid: str
    records: list = dataclasses.field(default_factory=list)

    def of(self, kind: str) -> list[dict]:
        return [r["data"] for r in self.records if r["kind"] == kind]

    def first(self, kind: str) -> dict:
        found = self.of(kind)
        return found[0] if found else {}

    @property
    def frame(self) -> dict:
        return self.first("frame")

    @property
    def total_s(self) -> float:
        return sum(s["duration_s"] for s in self.of("stage") if s["name"] == "capture")


@dataclasses.dataclass
class Process:
    """One trace file: a process's records, grouped by compile id (first-seen order)."""

    label: str
    path: str
    info: dict
    compiles: list[Compile]
    loose: list[dict]  # records outside any compile id (backward compiled on first use, cache...)
    stages: list[dict]  # every stage record, with "cid" and "exclusive_s" added

    def stage_totals(self) -> dict[str, float]:
        """Seconds per stage name, each stage counted without the stages nested in it,
        so the values add up to the process's total compile time."""
        totals: dict[str, float] = {}
        for s in self.stages:
            totals[s["name"]] = totals.get(s["name"], 0.0) + s["exclusive_s"]
        return totals


def load(directory: str) -> list[Process]:
    """Every ``*.jsonl`` trace under ``directory`` (recursively), as :class:`Process` es.

    Raises ``FileNotFoundError`` when there is no trace file.  Lines that do not parse
    (a process killed mid-write) are skipped.
    """
    paths = []
    for root, _, files in os.walk(directory):
        paths += [os.path.join(root, f) for f in files if f.endswith(".jsonl")]
    if not paths:
        raise FileNotFoundError(f"no TORCHKILN_TRACE files (*.jsonl) under {directory}")
    processes = [_load_file(p, directory) for p in sorted(paths)]
    return [p for p in processes if p.compiles or p.loose]


def _load_file(path: str, root: str) -> Process:
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    info = next((r["data"] for r in records if r["kind"] == "process"), {})
    rel = os.path.relpath(os.path.dirname(path), root)
    label = info.get("label") or (rel if rel != "." else "")
    label = label or " ".join(os.path.basename(a) for a in info.get("argv", [])[:3]) or os.path.basename(path)
    compiles: dict[str, Compile] = {}
    loose = []
    for r in records:
        if r["kind"] == "process":
            continue
        cid = r.get("compile_id")
        if cid is None:
            loose.append(r)
        else:
            compiles.setdefault(cid, Compile(cid)).records.append(r)
    stages = []
    for r in records:
        if r["kind"] == "stage":
            stages.append(dict(r["data"], cid=r.get("compile_id")))
    _exclusive(stages)
    return Process(label, path, info, list(compiles.values()), loose, stages)


def _exclusive(stages: list[dict]) -> None:
    """Add ``exclusive_s``: a stage's time minus that of the stages directly inside it
    (nesting by time interval: one thread compiles)."""
    spans = sorted(stages, key=lambda s: (s["start"], -s["duration_s"]))
    open_: list[dict] = []
    for s in spans:
        s["exclusive_s"] = s["duration_s"]
        end = s["start"] + s["duration_s"]
        while open_ and open_[-1]["start"] + open_[-1]["duration_s"] < end - 5e-6:  # records round to 1 µs
            open_.pop()
        if open_:
            open_[-1]["exclusive_s"] -= s["duration_s"]
            s["depth"] = open_[-1]["depth"] + 1
        else:
            s["depth"] = 0
        open_.append(s)
    for s in stages:
        s["exclusive_s"] = max(s["exclusive_s"], 0.0)
