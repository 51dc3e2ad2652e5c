"""Class lookups across a warm start (capture/warm_start.py): a frame installed from its
record checks the class lookups its capture relied on (a method it inlined, a property,
a class attribute, a subclass not shadowing its base, the base ``super()`` reached)
exactly as a freshly captured frame does, when it is installed (a class edited between
processes: the record is refused) and on every later call (a class changed after the
warm start: captured again, never the stale graph).  The cases of
tests/capture/test_class_lookup_guards.py; two subprocesses (cold, then warm), every
result checked against eager."""
from ._subprocess import run_worker


def test_class_lookups_are_checked_after_a_warm_start(fresh_cache):
    cold = run_worker("tests.cache._warm_lookup_worker", "cold")
    assert cold["ok"], cold
    for name, f in cold["frames"].items():
        assert f["saved"] >= 1 and f["not_recordable"] == 0, (name, f)

    warm = run_worker("tests.cache._warm_lookup_worker", "warm", LC_VARIANT="1")
    assert warm["ok"], warm  # every result, before and after each class change, equals eager's
    frames = warm["frames"]
    for name in ("prop", "method", "module", "shadow", "super", "const"):
        f = frames[name]
        assert f["hit"] == 1 and f["captured"] == 0 and f["same_guard"], (name, f)  # the guard a fresh capture builds
    for name in ("edited_const", "edited_override"):  # the class's source changed between the processes
        f = frames[name]
        assert f["hit"] == 0 and f["captured"] == 1 and "changed source" in f["reasons"], (name, f)
