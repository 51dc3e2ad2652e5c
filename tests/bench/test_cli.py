"""The ``torchkiln`` command line."""
import json

import pytest

from torchkiln.cli import main
from torchkiln.utils.paths import cache_dir


def test_list(capsys):
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("mlp", "nanogpt", "hf_llama", "hf_t5"):
        assert name in out


def test_bench_help_documents_exit_status(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "exit status" in out and "--peer" in out and "--quick" in out


def test_bench_runs_and_writes_json(tmp_path, capsys):
    path = tmp_path / "bench.json"
    code = main(["bench", "--models", "mlp", "--mode", "inference", "--backend", "eager", "--repeat", "2",
                 "--warmup", "1", "--json", str(path)])
    assert code == 0
    assert "geomean speedup" in capsys.readouterr().out
    rows = json.loads(path.read_text())["rows"]
    assert [(r["model"], r["mode"], r["status"]) for r in rows] == [("mlp", "inference", "ok")]


def test_unknown_model_fails(capsys):
    assert main(["bench", "--models", "no_such_model", "--mode", "inference", "--backend", "eager"]) == 1


def test_cache_dir(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("TORCHKILN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == str(tmp_path / "torchkiln")
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path / "c"))
    (tmp_path / "c").mkdir()
    assert main(["cache", "dir"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "c")
    assert main(["cache", "clear"]) == 0
    assert not (tmp_path / "c").exists()


def test_explain_prints_or_reports(capsys):
    code = main(["explain", "mlp"])
    captured = capsys.readouterr()
    assert (code == 0 and "Graph Count" in captured.out) or (code == 1 and "torchkiln explain mlp" in captured.err)
