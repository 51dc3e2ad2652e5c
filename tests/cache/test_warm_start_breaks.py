"""Warm start for frames that graph-break (capture/warm_start.py, ``describe_break``):
the graph before the break, the breaking call or branch and the resume functions are
replayed from records in a new process, without capture; each resume function is a
frame with its own record.  A result holding an object made in the frame (a plain
class: transformers' ``DynamicCache``) is rebuilt as capture's recipe does; a frame
with symbolic sizes keeps its shape guards.  Two subprocesses (cold, then warm); every result and the
side effects of the breaking calls are checked against eager, and a changed argument
or global that fails a guard captures again."""
import pytest

from ._subprocess import run_worker


def _run(phase, **env):
    return run_worker("tests.cache._warm_breaks_worker", phase, **env)


def test_frames_with_graph_breaks_load_from_records(fresh_cache):
    cold = _run("cold")
    assert cold["ok"], cold
    for name, f in cold["frames"].items():  # the breaking frame and its resume function(s)
        assert f["saved"] >= (1 if name in ("new_object", "dyn") else 2), (name, f)

    warm = _run("warm", WB_SCALE="5.0")
    assert warm["ok"], warm  # results and the breaking calls' side effects equal eager's
    if warm["source_hash"] != cold["source_hash"]:  # a checkout updated between the processes (a merge)
        pytest.skip("torchkiln's sources changed between the cold and the warm process: every record misses")
    frames = warm["frames"]
    for name in ("call", "branch", "kwargs", "module"):  # nothing captured: every piece from its record
        assert frames[name]["captured"] == 0 and frames[name]["hit"] >= 2, (name, frames[name])
    # symbolic sizes: the record's shape guards are evaluated on the live sizes, so one
    # record serves another size; a size outside them captures again
    for name in ("dyn", "dyn_other_size"):
        assert frames[name]["captured"] == 0 and frames[name]["hit"] == 1, (name, frames[name])
    fails = frames["dyn_guard_fails"]
    assert fails["captured"] == 1 and fails["reasons"] == {"guard failed": 1}, fails
    # an object made in the frame (a plain class, as transformers' DynamicCache) is rebuilt
    assert frames["new_object"]["captured"] == 0 and frames["new_object"]["hit"] == 1, frames["new_object"]
    assert frames["new_object_other"]["captured"] == 1 and frames["new_object_other"]["reasons"] == {
        "guard failed": 1}, frames["new_object_other"]
    # another value of a guarded argument: the breaking frame's record is refused, captured again
    other = frames["call_other_scale"]
    assert other["captured"] >= 1 and other["reasons"].get("guard failed", 0) >= 1, other
    # the branch goes the other way: the installed frame runs the other resume function,
    # which had no record (captured); the breaking frame itself is not captured again
    way = frames["branch_other_way"]
    assert way["captured"] == 1 and way["bypass"] == 0, way
    # the changed global fails the breaking frame's guard; its resume frame still hits
    g = frames["global"]
    assert g["captured"] >= 1 and g["reasons"].get("guard failed", 0) >= 1 and g["hit"] >= 1, g
    # the breaking call raises in the warm process: the replayed frame hands the exception
    # to its handler resume function (the frame's own ``except``), as capture's code does
    assert frames["handler"]["hit"] >= 1, frames["handler"]
