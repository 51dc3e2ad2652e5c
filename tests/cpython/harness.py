"""Run CPython's own unit tests eagerly and under ``torchkiln.compile(backend="eager")``.

The ``test`` package that ships with the interpreter (``test.test_list``, ...) is the
oracle, as PyTorch's ``test/dynamo/cpython`` port uses it for TorchDynamo.  Each test
method is run twice in a worker process: eagerly, then on a fresh instance whose test
method is replaced by ``torchkiln.compile(bound_method, backend="eager")``.  Outcomes
are ``pass`` / ``fail`` / ``error`` / ``skip`` / ``timeout`` / ``crash``.  Each test
that passes eagerly is classified by its compiled outcome:

- ``same``: the compiled run passed too;
- ``wrong``: a different outcome with the user's own exception (an assertion fails,
  a different exception is raised, an infinite loop);
- ``error``: the compiled run raised an internal torchkiln error (a ``torchkiln.exc``
  exception, or one whose innermost frame is in the ``torchkiln`` package);
- ``crash``: the worker process died (segfault, abort) during the compiled run.

Workers: one per module at a time; it streams one JSON line per event on a private
file descriptor (tests may print to stdout).  When a worker dies, the parent records a
crash for the test in flight and starts a new worker at the next test.  A per-test
timeout (``SIGALRM`` in the worker, then a hard kill by the parent) turns an infinite
loop into a ``timeout`` outcome instead of a hang.

Only test methods defined in CPython's ``test`` package are run (doctest cases, whose
``runTest`` lives in ``doctest``, are left out).

CLI::

    python -m tests.cpython.harness --modules test_list test_dict --report
    python -m tests.cpython.harness --all --report --update   # rewrite known_differences.txt

``--update`` rewrites ``known_differences.txt`` from the run (refusing to add new
crash/wrong entries unless ``--allow-new``).
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
KNOWN_FILE = HERE / "known_differences.txt"
REPO_ROOT = HERE.parent.parent

ALL_MODULES = ["test_list", "test_tuple", "test_dict", "test_set", "test_int", "test_float", "test_math",
               "test_string", "test_operator", "test_functools", "test_itertools", "test_collections",
               "test_contextlib", "test_generators"]
# The CI subset (tests/cpython/test_cpython.py, about 6 CPU-minutes); TORCHKILN_CPYTHON_FULL=1
# runs ALL_MODULES (about 40 CPU-minutes on the 2-core CI machine: by hand).
CI_MODULES = ["test_list", "test_contextlib", "test_operator"]

TEST_TIMEOUT_S = float(os.environ.get("TORCHKILN_CPYTHON_TIMEOUT", "30"))
# The backend the compiled runs use.  "eager" checks capture alone; the default backend
# ("inductor") with a kept TORCHKILN_CACHE_DIR checks warm-start records: run the harness
# twice, and the second run replays the first run's records in new processes.
BACKEND = os.environ.get("TORCHKILN_CPYTHON_BACKEND", "eager")
FLOOR_SLACK = 2  # tests below the measured count that the recorded floor allows
KILL_GRACE_S = 15.0


class HarnessTimeout(BaseException):
    """Raised in the worker by SIGALRM when one test runs past its time limit."""


# ----------------------------------------------------------------------------------------
# worker side
# ----------------------------------------------------------------------------------------
def has_cpython_tests() -> bool:
    try:
        import test.support  # noqa: F401
    except ImportError:
        return False
    return True


def _flatten(suite):
    import unittest

    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flatten(item)
        else:
            yield item


def collect(module_name: str) -> list:
    """Test cases of ``test.<module_name>`` whose method is defined in that module."""
    import importlib
    import unittest

    module = importlib.import_module(f"test.{module_name}")
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    cases = []
    for case in _flatten(suite):
        method = getattr(type(case), getattr(case, "_testMethodName", ""), None)
        fn = getattr(method, "__func__", method)
        if getattr(fn, "__module__", "").startswith("test.") and hasattr(fn, "__code__"):
            cases.append(case)
    return cases


def _is_internal(err) -> bool:
    """An exception of torchkiln's own (not one of the user's code run on its behalf):
    a ``torchkiln.exc`` type, or an innermost frame in the torchkiln package other than
    the transformed code's call of a user callable at a graph break."""
    exc_type, _, tb = err
    if exc_type is not None and getattr(exc_type, "__module__", "").startswith("torchkiln"):
        return True
    if exc_type is None or issubclass(exc_type, AssertionError):
        return False
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return False
    code = last.tb_frame.f_code
    return f"{os.sep}torchkiln{os.sep}" in code.co_filename and code.co_name not in ("step", "run")


def _outcome(result) -> tuple[str, str, bool]:
    """(outcome, detail, internal) of a finished unittest result."""
    if result.errors or result.failures:
        kind = "error" if result.errors else "fail"
        case, tb_text = (result.errors or result.failures)[0]
        internal = getattr(result, "_kiln_internal", [False])[0]
        if "HarnessTimeout" in tb_text:
            return "timeout", "test ran past its time limit", False
        last = tb_text.strip().splitlines()[-1] if tb_text.strip() else kind
        return kind, last[:300], internal
    if result.unexpectedSuccesses:
        return "fail", "unexpected success", False
    if result.skipped and not result.testsRun - len(result.skipped) > 0:
        return "skip", result.skipped[0][1][:200], False
    if result.skipped:
        return "skip", result.skipped[0][1][:200], False
    return "pass", "", False


def _make_result():
    import unittest

    class Result(unittest.TestResult):
        def __init__(self):
            super().__init__()
            self._kiln_internal = []

        def addError(self, test, err):
            self._kiln_internal.append(_is_internal(err))
            super().addError(test, err)

        def addFailure(self, test, err):
            self._kiln_internal.append(_is_internal(err))
            super().addFailure(test, err)

        def addSubTest(self, test, subtest, err):
            if err is not None:
                self._kiln_internal.append(_is_internal(err))
            super().addSubTest(test, subtest, err)

    return Result()


def _on_alarm(signum, frame):
    raise HarnessTimeout()


def run_case(case, compiled: bool) -> tuple[str, str, bool]:
    """Run one test on a fresh instance; returns (outcome, detail, internal_error)."""
    import warnings

    fresh = type(case)(case._testMethodName)
    if compiled:
        import torchkiln

        bound = getattr(fresh, fresh._testMethodName)
        setattr(fresh, fresh._testMethodName, torchkiln.compile(bound, backend=BACKEND))
    result = _make_result()
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TEST_TIMEOUT_S)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fresh(result)
    except HarnessTimeout:
        return "timeout", "test ran past its time limit", False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    outcome = _outcome(result)
    if compiled:
        import torchkiln

        torchkiln.reset()
    return outcome


def worker_main(module_name: str, start: int, fd: int) -> None:
    out = os.fdopen(fd, "w", buffering=1)

    def emit(**kw):
        out.write(json.dumps(kw) + "\n")
        out.flush()

    # tests print: keep stdout/stderr away from the protocol
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        import torchkiln  # noqa: F401 - import once, before the first test

        cases = collect(module_name)
    except BaseException:  # noqa: BLE001 - say why, then exit: the parent reports it
        emit(event="fatal", detail=traceback.format_exc()[-2000:])
        raise
    emit(event="count", n=len(cases))
    for i in range(start, len(cases)):
        case = cases[i]
        emit(event="start", i=i, id=case.id(), phase="eager")
        try:
            eager = run_case(case, compiled=False)
        except BaseException as e:  # noqa: BLE001
            eager = ("error", f"harness: {type(e).__name__}: {e}"[:300], False)
        if eager[0] == "pass":
            emit(event="start", i=i, id=case.id(), phase="compiled")
            try:
                comp = run_case(case, compiled=True)
            except BaseException as e:  # noqa: BLE001
                comp = ("error", f"harness: {type(e).__name__}: {e}"[:300], True)
        else:
            comp = ("not-run", "", False)
        emit(event="result", i=i, id=case.id(), eager=eager[0], compiled=comp[0], detail=comp[1] or eager[1],
             internal=comp[2])
    emit(event="done")


# ----------------------------------------------------------------------------------------
# parent side
# ----------------------------------------------------------------------------------------
@dataclass
class TestRecord:
    id: str
    eager: str
    compiled: str
    detail: str = ""
    internal: bool = False

    @property
    def classification(self) -> str | None:
        """same / wrong / error / crash for eager-passing tests, None otherwise."""
        if self.eager != "pass":
            return None
        if self.compiled == "pass":
            return "same"
        if self.compiled == "crash":
            return "crash"
        if self.internal:
            return "error"
        return "wrong"


@dataclass
class ModuleResult:
    module: str
    records: list[TestRecord] = field(default_factory=list)
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        c = {"same": 0, "wrong": 0, "error": 0, "crash": 0}
        for r in self.records:
            k = r.classification
            if k is not None:
                c[k] += 1
        return c


def _spawn(module_name: str, start: int):
    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen([sys.executable, "-m", "tests.cpython.harness", "--worker", module_name,
                             "--start", str(start), "--fd", str(write_fd)],
                            cwd=str(REPO_ROOT), env=env, pass_fds=(write_fd,), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write_fd)
    return proc, os.fdopen(read_fd, "r")


def _kill(proc) -> None:
    try:
        proc.kill()
    except OSError:
        pass
    proc.wait()


def run_module(module_name: str, timeout_s: float = TEST_TIMEOUT_S) -> ModuleResult:
    """Run every test of ``test.<module_name>`` (eager, then compiled) in workers."""
    t0 = time.time()
    res = ModuleResult(module_name)
    start = 0
    total = None
    restarts = 0
    while total is None or start < total:
        proc, stream = _spawn(module_name, start)
        in_flight = None
        deadline = time.time() + 120.0  # import + collect
        done = False
        buf = ""
        try:
            while True:
                remaining = deadline - time.time()
                if remaining <= 0:
                    _kill(proc)
                    if in_flight is None:
                        raise RuntimeError(f"{module_name}: worker did not start")
                    i, tid, phase = in_flight
                    res.records.append(TestRecord(tid, "timeout" if phase == "eager" else "pass",
                                                  "timeout", "hard timeout: worker killed"))
                    start = i + 1
                    break
                ready, _, _ = select.select([stream], [], [], remaining)
                if not ready:
                    continue
                line = stream.readline()
                if not line:  # the worker died
                    proc.wait()
                    if in_flight is None:
                        if total is not None and start >= total:
                            done = True
                            break
                        raise RuntimeError(f"{module_name}: worker exited (rc={proc.returncode}) before a test")
                    i, tid, phase = in_flight
                    rc = proc.returncode
                    why = f"signal {-rc}" if rc is not None and rc < 0 else f"exit code {rc}"
                    res.records.append(TestRecord(tid, "crash" if phase == "eager" else "pass", "crash",
                                                  f"worker died ({why}) in the {phase} run"))
                    start = i + 1
                    break
                msg = json.loads(line)
                ev = msg["event"]
                if ev == "fatal":
                    raise RuntimeError(f"{module_name}: worker failed before a test:\n{msg['detail']}")
                if ev == "count":
                    total = msg["n"]
                    deadline = time.time() + timeout_s + KILL_GRACE_S
                elif ev == "start":
                    in_flight = (msg["i"], msg["id"], msg["phase"])
                    deadline = time.time() + timeout_s + KILL_GRACE_S
                elif ev == "result":
                    res.records.append(TestRecord(msg["id"], msg["eager"], msg["compiled"], msg["detail"],
                                                  msg["internal"]))
                    in_flight = None
                    start = msg["i"] + 1
                    deadline = time.time() + timeout_s + KILL_GRACE_S
                elif ev == "done":
                    done = True
                    break
        finally:
            stream.close()
            if proc.poll() is None:
                if done:
                    proc.wait(timeout=30)
                else:
                    _kill(proc)
        if done:
            break
        restarts += 1
        if restarts > 200:
            raise RuntimeError(f"{module_name}: too many worker restarts")
    res.seconds = time.time() - t0
    return res


# ----------------------------------------------------------------------------------------
# known differences file
# ----------------------------------------------------------------------------------------
def load_known(path: Path = KNOWN_FILE) -> tuple[dict[str, tuple[str, str]], dict[str, float]]:
    """``({test id: (classification, reason)}, {module: floor ratio})``."""
    known: dict[str, tuple[str, str]] = {}
    floors: dict[str, float] = {}
    if not path.exists():
        return known, floors
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("# floor "):
            _, _, module, ratio = line.split()[:4]
            floors[module] = float(ratio)
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        known[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return known, floors


def kept_ratio(res: ModuleResult, count_timeouts: bool = True) -> float:
    """Share of eager-passing tests that keep their outcome.  ``count_timeouts=False``
    leaves compiled runs that only timed out out of the count (CI: a loaded machine)."""
    c = res.counts()
    total = sum(c.values())
    if not count_timeouts:
        total -= sum(1 for r in res.records if r.classification not in (None, "same") and r.compiled == "timeout")
    return c["same"] / total if total else 1.0


def write_known(results: list[ModuleResult], path: Path = KNOWN_FILE) -> None:
    known, floors = load_known(path)
    ran = {r.module for r in results}
    lines = ["# Eager-passing CPython tests whose outcome differs under torchkiln.compile(backend=\"eager\").",
             "# Written by `python -m tests.cpython.harness --all --update`; this list only shrinks.",
             "# Format: <test id> <same|wrong|error|crash|timeout> <reason>.  '# floor <module> <ratio>' is the",
             "# minimum share of eager-passing tests that keep their outcome (tests/cpython/test_cpython.py).",
             ""]
    by_module = {r.module: r for r in results}
    for module in ALL_MODULES:
        if module in by_module:
            res = by_module[module]
            c = res.counts()
            total = sum(c.values())
            # two tests of slack: a loaded machine may time a slow capture out
            ratio = max(0, c["same"] - FLOOR_SLACK) / total if total else 1.0
            floor = max(floors.get(module, 0.0), int(ratio * 1000) / 1000)
            lines.append(f"# floor {module} {floor:.3f}  (same {c['same']} wrong {c['wrong']} error {c['error']} "
                         f"crash {c['crash']})")
            for rec in res.records:
                k = rec.classification
                if k not in (None, "same"):
                    lines.append(f"{rec.id} {k} {rec.compiled}: {' '.join(rec.detail.split())}")
        else:
            if module in floors:
                lines.append(f"# floor {module} {floors[module]:.3f}")
            lines += [f"{tid} {k} {why}" for tid, (k, why) in known.items() if tid.startswith(f"test.{module}.")]
        lines.append("")
    del ran
    path.write_text("\n".join(lines))


def new_differences(res: ModuleResult, known: dict) -> list[TestRecord]:
    """Crash/wrong results of ``res`` not listed in the known-differences file.

    A compiled run that only timed out is left to the module's floor: on a loaded
    machine a slow capture may pass the limit (an infinite loop still lowers the ratio).
    """
    return [r for r in res.records
            if r.classification in ("crash", "wrong") and r.compiled != "timeout" and r.id not in known]


def print_report(results: list[ModuleResult]) -> None:
    print(f"{'module':<18}{'tests':>6}{'eager ok':>9}{'same':>6}{'wrong':>6}{'error':>6}{'crash':>6}"
          f"{'kept':>8}{'secs':>7}")
    tot = {"same": 0, "wrong": 0, "error": 0, "crash": 0}
    n_tests = n_ok = 0
    for res in results:
        c = res.counts()
        ok = sum(c.values())
        n_tests += len(res.records)
        n_ok += ok
        for k in tot:
            tot[k] += c[k]
        print(f"{res.module:<18}{len(res.records):>6}{ok:>9}{c['same']:>6}{c['wrong']:>6}{c['error']:>6}"
              f"{c['crash']:>6}{kept_ratio(res):>8.1%}{res.seconds:>7.0f}")
    ratio = tot["same"] / n_ok if n_ok else 1.0
    print(f"{'TOTAL':<18}{n_tests:>6}{n_ok:>9}{tot['same']:>6}{tot['wrong']:>6}{tot['error']:>6}"
          f"{tot['crash']:>6}{ratio:>8.1%}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modules", nargs="*", default=None)
    p.add_argument("--all", action="store_true")
    p.add_argument("--report", action="store_true", help="print the per-module table")
    p.add_argument("--details", action="store_true", help="print each test that does not keep its outcome")
    p.add_argument("--update", action="store_true", help="rewrite known_differences.txt")
    p.add_argument("--allow-new", action="store_true", help="with --update: allow new crash/wrong entries")
    p.add_argument("--json", help="write all records to this file")
    p.add_argument("--from-json", help="report / update from records saved with --json instead of running")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--fd", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker_main(args.worker, args.start, args.fd)
        return 0
    if not has_cpython_tests():
        print("CPython's `test` package is not installed; nothing to run")
        return 0
    modules = ALL_MODULES if args.all or not args.modules else args.modules
    results = []
    saved = {}
    if args.from_json:
        for item in json.loads(Path(args.from_json).read_text()):
            saved[item["module"]] = ModuleResult(item["module"], [TestRecord(**r) for r in item["records"]])
        modules = [m for m in modules if m in saved]
    for m in modules:
        res = saved[m] if m in saved else run_module(m)
        results.append(res)
        c = res.counts()
        print(f"{m}: same {c['same']} wrong {c['wrong']} error {c['error']} crash {c['crash']} ({res.seconds:.0f} s)",
              flush=True)
        if args.json:  # after each module, so an interrupted run keeps what it measured
            Path(args.json).write_text(json.dumps([{"module": r.module, "records": [vars(x) for x in r.records]}
                                                   for r in results], indent=1))
        if args.details:
            for r in res.records:
                if r.classification not in (None, "same"):
                    print(f"  {r.id} {r.classification} {r.compiled}: {r.detail}", flush=True)
    if args.report or not args.update:
        print_report(results)
    if args.json:
        Path(args.json).write_text(json.dumps([{"module": r.module, "records": [vars(x) for x in r.records]}
                                               for r in results], indent=1))
    if args.update:
        known, _ = load_known()
        fresh = [r for res in results for r in new_differences(res, known)]
        if fresh and not args.allow_new:
            print("new crash/wrong results (not written; fix them or pass --allow-new):")
            for r in fresh:
                print(f"  {r.id} {r.classification}: {r.detail}")
            return 1
        write_known(results)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(2)
