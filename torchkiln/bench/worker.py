"""Subprocess entry: ``python -m torchkiln.bench.worker SPEC_JSON OUT_JSON``.

Runs :func:`torchkiln.bench.run.measure_model` for the spec (``model``, ``mode``,
``phase`` and the fields of :class:`~torchkiln.bench.run.Options`) and writes the row
to ``OUT_JSON``; stdout and stderr are left to the model and the compilers.
"""
from __future__ import annotations

import json
import sys

from .run import Options, measure_model


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    opts = Options(**spec["options"])
    row = measure_model(spec["model"], spec["mode"], opts, spec["phase"], only=spec.get("only"),
                        spawn_time=spec.get("spawn_time"))
    with open(argv[1], "w") as f:
        json.dump(row, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
