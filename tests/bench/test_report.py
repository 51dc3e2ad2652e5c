"""Summary, exit status, table and JSON output."""
import json
import math

from rich.console import Console

from torchkiln.bench import report

ROWS = [
    {"model": "a", "mode": "inference", "status": "ok", "speedup": 2.0, "ms": 1.0, "eager_ms": 2.0,
     "peer_status": "ok", "peer_ms": 2.0, "peer_speedup": 1.0, "graphs": 1, "graph_breaks": 0},
    {"model": "b", "mode": "inference", "status": "ok", "speedup": 0.5, "ms": 4.0, "eager_ms": 2.0,
     "peer_status": "ok", "peer_ms": 2.0, "peer_speedup": 1.0, "graphs": 2, "graph_breaks": 1},
    {"model": "c", "mode": "training", "status": "mismatch", "speedup": 10.0, "max_abs_err": float("inf"),
     "error": "cold: 1 of 3 tensors differ"},
    {"model": "d", "mode": "training", "status": "skipped", "error": "skipped: pip install torchkiln[models]"},
]


def test_summary_geomeans_count_only_ok_rows():
    s = report.summarize(ROWS)
    assert s["counts"] == {"ok": 2, "mismatch": 1, "skipped": 1}
    assert math.isclose(s["inference"]["speedup_geomean"], 1.0)
    assert math.isclose(s["inference"]["vs_peer_geomean"], 1.0)  # peer_ms / ms: 2/1 and 2/4
    assert s["training"]["speedup_geomean"] is None  # the mismatch's 10x does not count
    line = report.summary_line(s, peer=True)
    assert "inference 1.00x vs eager (2 ok)" in line and "1 mismatch" in line


def test_exit_status():
    assert report.failed(ROWS)
    assert not report.failed([ROWS[0], ROWS[3]])


def test_table_prints_every_row():
    console = Console(width=300, record=True)
    report.print_report(ROWS, report.summarize(ROWS), True, "t", console)
    text = console.export_text()
    for word in ("mismatch", "skipped: pip install torchkiln[models]", "kiln/peer", "geomean speedup"):
        assert word in text


def test_json_shape(tmp_path):
    path = tmp_path / "out.json"
    report.write_json(str(path), ROWS, report.summarize(ROWS), {"models": ["a"]})
    data = json.loads(path.read_text())  # strict JSON: infinities became null
    assert set(data) == {"meta", "summary", "rows"}
    assert data["meta"]["models"] == ["a"] and "torch" in data["meta"]
    assert data["rows"][2]["max_abs_err"] is None
    assert data["summary"]["inference"]["rows_ok"] == 2
