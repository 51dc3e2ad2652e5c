#!/usr/bin/env bash
# Warm start on a GPU (one device call, < 150 s): nanogpt inference and training, torchkiln
# vs torch.compile, new process to the end of the first step, with the strict floor (bare:
# import torch, CUDA initialised, model and inputs on the device, no step).  One table;
# kiln hits read <frames installed from records>/tc<Triton kernels that process compiled>.
# Run from the repository root through the device tool (carry [".whl"] for `bytecode`).
set -u
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
timeout ${LIMIT:-140} python3 benchmarks/warm_start_bench.py --device cuda --models ${MODELS:-nanogpt} \
  --modes ${MODES:-inference,training} --floor bare --bytecode write --warm ${WARM:-1} --json "$OUT/warm.json" \
  2>&1 | tee "$OUT/warm.txt"
