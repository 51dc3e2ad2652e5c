"""The harness: planted mismatches and errors are reported, never fatal; subprocess isolation."""
import os

import pytest
import torch

from torchkiln.bench.run import Options
from torchkiln.bench.suite import measure, run_suite

HERE = os.path.dirname(__file__)
OPTS = Options(backend="eager", repeat=2, warmup=1)


class Planted(torch.nn.Module):
    """A 'compiler' whose output is 1% off."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs) * 1.01 + 1e-2


def _raise(model):
    raise ValueError("backend exploded\ndetails")


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_identity_compiler_is_ok(mode):
    row = measure("mlp", mode, OPTS, isolate=False, compile_fn=lambda m: m)
    assert row["status"] == "ok", row.get("error")
    assert row["max_abs_err"] == 0.0
    assert row["ms_iqr"] >= 0 and row["eager_ms_iqr"] >= 0
    for key in ("eager_ms", "ms", "speedup", "compile_cold_s", "compile_warm_s", "peak_mb", "eager_peak_mb"):
        assert row[key] > 0, key


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_planted_mismatch_is_caught(mode):
    row = measure("mlp", mode, OPTS, isolate=False, compile_fn=Planted)
    assert row["status"] == "mismatch"
    assert row["max_abs_err"] > 1e-3
    assert "max abs error" in row["error"]


def test_compiler_error_is_reported_with_first_line():
    row = measure("cnn", "inference", OPTS, isolate=False, compile_fn=_raise)
    assert row["status"] == "error"
    assert row["error"] == "cold: ValueError: backend exploded"
    assert row["eager_ms"] > 0  # eager was still measured


def test_failing_models_do_not_stop_the_suite(monkeypatch):
    monkeypatch.syspath_prepend(HERE)
    rows = run_suite(["no_such_model", "crashing_models:make_broken", "mlp"], ["inference"], OPTS,
                     isolate=False, compile_fn=lambda m: m)
    assert [r["status"] for r in rows] == ["error", "error", "ok"]
    assert rows[1]["error"] == "eager: RuntimeError: this model cannot be built"


def test_subprocess_isolation_survives_a_crash(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows = run_suite(["crashing_models:make_crash", "crashing_models:make_tiny"], ["inference"], OPTS, timeout=120)
    assert rows[0]["status"] == "error" and "exited with 3" in rows[0]["error"]
    assert rows[1]["status"] == "ok", rows[1].get("error")
    assert rows[1]["compile_warm_s"] > 0  # the warm subprocess ran too
    assert rows[1]["compile_warm_s"] <= rows[1]["warm_start_s"]  # spawn to the end of the first step


def test_missing_transformers_is_a_skip(monkeypatch):
    monkeypatch.setattr("torchkiln.bench.suite.transformers_available", lambda: False)
    row = measure("hf_gpt2", "training", OPTS, isolate=False)
    assert row["status"] == "skipped"
    assert row["error"] == "skipped: pip install torchkiln[models]"


def test_worker_env_waits_passively_with_threads(monkeypatch):
    """More than one thread: OpenMP threads sleep at barriers (spinning ones stall a shared
    machine); one thread, or a policy the user chose, is left alone."""
    from torchkiln.bench.suite import worker_env

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert worker_env(Options(threads=2), "/tmp/c")["OMP_WAIT_POLICY"] == "PASSIVE"
    assert worker_env(Options(threads=2), "/tmp/c")["TORCHKILN_CACHE_DIR"] == os.path.join("/tmp/c", "torchkiln")
    assert "OMP_WAIT_POLICY" not in worker_env(Options(threads=1), "/tmp/c")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert worker_env(Options(threads=2), "/tmp/c")["OMP_WAIT_POLICY"] == "ACTIVE"
