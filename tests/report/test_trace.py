"""TORCHKILN_TRACE records: one JSON line per event, per compile id."""
from __future__ import annotations

import json

import pytest
import torch

from torchkiln.utils import progress, trace

from .conftest import BREAK_LINE, branchy


def _kinds(compile_):
    return [r["kind"] for r in compile_.records]


def test_trace_is_json_lines_with_compile_ids(traced):
    directory, proc = traced
    files = list(directory.glob("trace_*.jsonl"))
    assert len(files) == 1
    records = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert records[0]["kind"] == "process"
    assert all({"ts", "compile_id", "kind", "data"} <= set(r) for r in records)
    assert [c.cid for c in proc.compiles][:2] == ["0/0", "1/0"]  # branchy, then its resume function


def test_frame_graph_guards_and_break(traced):
    _, proc = traced
    first = proc.compiles[0]
    assert first.frame["name"] == "branchy" and first.frame["lineno"] == branchy.__code__.co_firstlineno
    assert {"frame", "graph", "guards", "graph_break", "aot_graph", "ir", "kernel", "wrapper", "stage"} <= set(_kinds(first))
    assert "sin" in first.first("graph")["code"]
    assert any("L['x']" in g for g in first.first("guards")["guards"])
    br = first.first("graph_break")
    assert "data-dependent" in br["reason"] and br["lineno"] == BREAK_LINE
    assert br["user_stack"].endswith(f":{BREAK_LINE}") and isinstance(br["offset"], int)


def test_recompile_names_the_failing_guard_and_both_values(traced):
    _, proc = traced
    recompiled = next(c for c in proc.compiles if c.of("recompile"))
    assert recompiled.cid == "0/1"
    rc = recompiled.first("recompile")
    assert rc["guard"] == "L['x'].shape == (4,)" or "L['x']" in rc["guard"]
    assert (rc["expected"], rc["actual"]) == ("4", "5")


def test_backward_graphs_partition_and_kernels(traced):
    _, proc = traced
    c = next(c for c in proc.compiles if c.frame.get("name") == "linear_relu_sum")
    assert {g["graph"] for g in c.of("aot_graph")} == {"joint", "forward", "backward"}
    part = c.first("partition")
    assert part["saved"] and part["saved_bytes"] == sum(r["bytes"] for r in part["saved"])
    kernels = c.of("kernel")
    assert len(kernels) >= 2 and all(k["source"] and k["kind"] in ("pointwise", "reduction") for k in kernels)
    assert any(k["kind"] == "reduction" and k["fused"] for k in kernels)
    assert any(call["op"] == "aten.mm.default" for x in c.of("extern_calls") for call in x["calls"])
    assert len(c.of("wrapper")) == 2  # forward and backward
    names = {s["name"] for s in c.of("stage")}
    assert {"capture", "backend", "aot.trace_joint", "aot.partition", "codegen.lowering", "codegen.scheduling",
            "codegen.kernels", "codegen.wrapper"} <= names


def test_stage_times_nest_and_add_up(traced):
    _, proc = traced
    totals = proc.stage_totals()
    top = sum(s["duration_s"] for s in proc.stages if s["depth"] == 0)
    assert abs(sum(totals.values()) - top) < 1e-3
    assert all(v >= 0 for v in totals.values())


def test_cache_records_from_other_stages(traced):
    _, proc = traced
    # emitted outside any frame compile: no compile id
    assert any(r["kind"] == "cache" and r["data"]["key"] == "demo-key" for r in proc.loose)


def test_off_costs_nothing(tmp_path):
    assert not trace.enabled
    assert trace.stage("x") is trace._NULL and trace.frame(branchy.__code__) is trace._NULL
    trace.emit("graph", {"code": ""})  # a no-op while off
    assert list(tmp_path.iterdir()) == []


def test_env_switch_in_a_fresh_process(tmp_path):
    import os
    import subprocess
    import sys

    code = ("import torch, torchkiln\n"
            "f = torchkiln.compile(lambda x: x.relu() + 1, backend='eager')\n"
            "f(torch.randn(8))\n")
    env = dict(os.environ, TORCHKILN_TRACE=str(tmp_path), TORCHKILN_PROGRESS="0")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
    (path,) = tmp_path.glob("trace_*.jsonl")
    kinds = {json.loads(line)["kind"] for line in path.read_text().splitlines()}
    assert {"process", "frame", "graph", "guards", "stage"} <= kinds


def test_progress_line(monkeypatch):
    from io import StringIO

    from rich.console import Console

    assert not progress.enabled  # tests do not run on a terminal
    monkeypatch.setattr(progress, "enabled", True)
    monkeypatch.setattr(progress, "DELAY_S", 3600.0)  # never shown here
    progress.start_frame("f [0/0]")
    progress.set_stage("codegen.lowering")
    progress.add_kernels(3, lambda: True)
    progress.add_kernels(2, lambda: False)
    out = StringIO()
    Console(file=out, width=200).print(progress._Line())
    progress.end_frame()
    assert "f [0/0]" in out.getvalue() and "codegen.lowering" in out.getvalue()
    assert "kernels compiled 3/5" in out.getvalue()
    assert progress._live is None
    progress.set_stage("after")  # outside a frame: nothing happens


def test_cache_miss_then_hit_is_traced(tmp_path, monkeypatch):
    """The persistent caches (on here, in an empty directory, as tests/cache does) emit
    their misses and hits as ``cache`` records with their keys."""
    import torchkiln
    import torchkiln.aot
    import torchkiln.codegen
    from torchkiln.cache import clear_memory

    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCHKILN_REMOTE_CACHE", raising=False)
    monkeypatch.setattr(torchkiln.codegen.config, "fx_graph_cache", True)
    monkeypatch.setattr(torchkiln.aot.config, "enable_autograd_cache", True)
    clear_memory()

    def cached_fn(x):
        return (x * 3).tanh()

    try:
        trace.enable(str(tmp_path / "trace"))
        x = torch.randn(16)
        torchkiln.compile(cached_fn)(x)
        torchkiln.reset()  # drops in-memory compiles; the persistent cache stays
        torchkiln.compile(cached_fn)(x)
    finally:
        trace.disable()
        torchkiln.reset()
        clear_memory()
    (path,) = (tmp_path / "trace").glob("trace_*.jsonl")
    events = [r["data"] for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == "cache"]
    misses = [e for e in events if e["event"] == "miss"]
    hits = [e for e in events if e["event"] == "hit"]
    assert {e["stage"] for e in misses} == {"aot_autograd", "fx_graph"}
    assert hits and hits[0]["stage"] == "aot_autograd"
    assert hits[0]["key"] == next(e["key"] for e in misses if e["stage"] == "aot_autograd")


def test_kernel_sources_are_split_out_of_the_generators_source():
    from torchkiln.codegen.trace_records import _split_kernels

    cpp = 'prelude\n\nextern "C" void kernel1(float* a) {\n  a[0] = 1;\n}\n\nextern "C" void kernel10(float* a) {\n}\n'
    out = _split_kernels(cpp, ["kernel1", "kernel10"])
    assert out["kernel1"].startswith('extern "C" void kernel1(') and "kernel10" not in out["kernel1"]
    assert out["kernel10"].startswith('extern "C" void kernel10(')
    triton = ("import triton\n\n@triton.jit\ndef kernel0_persistent(x):\n    pass\n\ndef kernel0_launch(x):\n"
              "    kernel0_persistent[1](x)\n\n@triton.jit\ndef kernel1(x):\n    pass\n")
    out = _split_kernels(triton, ["kernel0", "kernel1"])
    assert out["kernel0"].startswith("@triton.jit\ndef kernel0_persistent") and "kernel0_launch" in out["kernel0"]
    assert out["kernel1"].startswith("@triton.jit\ndef kernel1(")
