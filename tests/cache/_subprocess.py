"""Run a tests/cache worker module in a new process (a cold or warm start) and read the
JSON line it prints last."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_worker(module: str, *argv: str, **env) -> dict:
    """``python -m module *argv`` in the repo with ``env`` added; the caller's PYTHONPATH is
    kept (on the GPU machine, ``bytecode`` comes from it)."""
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p),
             OMP_NUM_THREADS="1", **env)
    p = subprocess.run([sys.executable, "-m", module, *argv], cwd=REPO, env=e, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])
