"""A suite model's first compiled step under ``codegen.config.debug`` (compile errors
raise with their traceback instead of falling back to eager).

    python3 benchmarks/debug_first_call.py MODEL MODE   (DEV=cpu: on the CPU)
"""
from __future__ import annotations

import os
import sys
import traceback

import torch

import torchkiln
from torchkiln.bench.models import build
from torchkiln.bench.run import _Step
from torchkiln.codegen import config

DEV = os.environ.get("DEV", "cuda")
name, mode = sys.argv[1], sys.argv[2]
work = build(name, DEV)
with config.patch(debug=True):
    try:
        _Step(work.model, torchkiln.compile(work.model), work, mode, DEV).first()
        print("first call ok")
    except Exception:
        print(traceback.format_exc()[-12000:])
