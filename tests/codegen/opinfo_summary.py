"""Per-dtype counts of an OpInfo sweep's log (``TORCHKILN_OPINFO_LOG``, JSON lines).

    python3 tests/codegen/opinfo_summary.py LOG [--json OUT]

Prints, per dtype and fwd/grad, pass / expected failure (xfail) / skip / fail (FAIL,
XPASS, crash), the expected-failure share of op/dtype pairs, and the failing ids.
``--json`` writes ``{"counts": {...}, "cases": {id: outcome}, "failures": {id: message}}``.
The last outcome logged for an id wins (a resumed or rerun case).
"""
from __future__ import annotations

import argparse
import collections
import json

COLUMNS = ("pass", "xfail", "skip", "fail")


def load(path: str) -> dict[str, dict]:
    cases = {}
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("outcome") != "start":
                cases[rec["id"]] = rec
    return cases


def column(outcome: str) -> str:
    return outcome if outcome in ("pass", "xfail", "skip") else "fail"


def summarize(cases: dict[str, dict]) -> dict:
    counts = collections.defaultdict(collections.Counter)
    pairs, xfail_pairs = set(), set()
    for rec in cases.values():
        counts[f"{rec['dtype']} {rec['mode']}"][column(rec["outcome"])] += 1
        if rec["outcome"] != "skip":
            pairs.add((rec["op"], rec["dtype"]))
        if rec["outcome"] == "xfail":
            xfail_pairs.add((rec["op"], rec["dtype"]))
    return {
        "counts": {k: dict(v) for k, v in sorted(counts.items())},
        "cases": {k: v["outcome"] for k, v in sorted(cases.items())},
        "failures": {k: v["message"] for k, v in sorted(cases.items()) if column(v["outcome"]) == "fail"},
        "pairs": len(pairs),
        "xfail_pairs": len(xfail_pairs),
        "xfail_cases": sum(v["outcome"] == "xfail" for v in cases.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--json")
    args = parser.parse_args()
    summary = summarize(load(args.log))
    print(f"| dtype, mode | {' | '.join(COLUMNS)} |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    total = collections.Counter()
    for key, c in summary["counts"].items():
        total.update(c)
        print(f"| {key} | {' | '.join(str(c.get(col, 0)) for col in COLUMNS)} |")
    print(f"| all | {' | '.join(str(total.get(col, 0)) for col in COLUMNS)} |")
    n = max(summary["pairs"], 1)
    print(f"\n{len(summary['cases'])} cases; expected failures: {summary['xfail_cases']} cases, "
          f"{summary['xfail_pairs']} of {summary['pairs']} op/dtype pairs ({100 * summary['xfail_pairs'] / n:.2f}%)")
    for case_id, message in summary["failures"].items():
        print(f"FAIL {case_id}: {summary['cases'][case_id]} {message[:200]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
