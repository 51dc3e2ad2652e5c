"""OpInfo cases that still fail under torchkiln, and why (tests/codegen/test_opinfo.py).

Keys: ``(op name[.variant], dtype, "fwd" | "grad")``; dtype ``"*"`` covers every dtype.
This list only shrinks: an entry whose case passes makes the test fail.
"""

EXPECTED_FAILURES: dict[tuple[str, str, str], str] = {
}
