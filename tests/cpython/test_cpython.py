"""CPython's own unit tests under ``torchkiln.compile(backend="eager")`` (see harness.py).

One pytest test per CPython test module, so ``-n 2`` runs two modules at once.  Each
asserts: no crash and no wrong result outside ``known_differences.txt``, and the share
of eager-passing tests that keep their outcome is at least the module's recorded floor.
A compiled run that only times out (the limit is 30 s a test; on a loaded 2-core
machine a slow capture can pass it) counts neither way here; the CLI report counts
it as wrong.
CI runs ``CI_MODULES``; ``TORCHKILN_CPYTHON_FULL=1`` runs every module of the harness.
An entry of the file that now keeps its outcome is reported (remove it: the file only
shrinks); ``TORCHKILN_CPYTHON_STRICT=1`` makes that a failure.
"""
from __future__ import annotations

import os
import sys

import pytest

from .harness import ALL_MODULES, CI_MODULES, has_cpython_tests, kept_ratio, load_known, new_differences, run_module

MODULES = ALL_MODULES if os.environ.get("TORCHKILN_CPYTHON_FULL") else CI_MODULES

# CPython's tests differ between versions: the file and its floors were recorded on 3.11.
RECORDED_ON = (3, 11)

pytestmark = [
    pytest.mark.skipif(not has_cpython_tests(), reason="CPython's `test` package is not installed"),
    pytest.mark.skipif(sys.version_info[:2] != RECORDED_ON,
                       reason="known_differences.txt is recorded on CPython 3.11; on this version run "
                              "`python -m tests.cpython.harness --report` by hand"),
]


@pytest.mark.parametrize("module", MODULES)
def test_cpython_module(module):
    known, floors = load_known()
    res = run_module(module)
    new = new_differences(res, known)
    assert not new, "new crash / wrong results (fix them; never add them to known_differences.txt):\n" + "\n".join(
        f"  {r.id} {r.classification} {r.compiled}: {r.detail}" for r in new)
    floor = floors.get(module, 0.0)
    ratio = kept_ratio(res, count_timeouts=False)
    assert ratio >= floor - 1e-9, f"{module}: {ratio:.1%} of eager-passing tests keep their outcome, floor {floor:.1%}"
    fixed = [r.id for r in res.records if r.classification == "same" and r.id in known]
    if fixed:
        message = f"{module}: now keep their outcome, remove from known_differences.txt: {fixed}"
        if os.environ.get("TORCHKILN_CPYTHON_STRICT"):
            pytest.fail(message)
        print(message)
