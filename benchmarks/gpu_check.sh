#!/usr/bin/env bash
# One batched GPU session (run by hand through the device tool): the test suite on a CUDA
# machine (Python 3.12, torch 2.11, Triton 3.6) and the benchmarks, logs under $OUT.
# Usage: bash benchmarks/gpu_check.sh [tests|bench|suite|profile|all]   (MODELS=a,b narrows the suite)
# Note: the device tool sends the checkout the session started in (/work/main), not a
# helper's worktree; carry a copy of the code under an ignored folder to test a branch.
set -u
what=${1:-all}
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
python3 -c 'import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name())' | tee "$OUT/env.txt"
if [ "$what" = tests ] || [ "$what" = all ]; then
  for d in capture aot codegen; do
    timeout 280 python3 -m pytest -q -p no:cacheprovider --timeout 120 -n 8 -rfE tests/$d > "$OUT/test_$d.log" 2>&1
    echo "== tests/$d: $(tail -n 1 "$OUT/test_$d.log")"
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  timeout 120 python3 benchmarks/capture_overhead.py > "$OUT/capture_overhead.txt" 2>&1; cat "$OUT/capture_overhead.txt"
  timeout 200 python3 benchmarks/codegen_bench.py --device cuda --json "$OUT/codegen_bench.json" > "$OUT/codegen_bench.txt" 2>&1; tail -n 20 "$OUT/codegen_bench.txt"
fi
if [ "$what" = suite ] || [ "$what" = all ]; then
  # The model suite with the peer; MODELS narrows it to fit one device call.
  timeout 540 python3 -m torchkiln.cli bench --device cuda --peer ${MODELS:+--models $MODELS} --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1
  tail -n 45 "$OUT/bench.txt"
fi
if [ "$what" = profile ]; then
  # kiln vs torch.compile per step: kernels, GPU time, top kernels (docs/codegen_triton.md)
  for mm in ${ROWS:-nanogpt:training hf_bert:inference resnet_cnn:training}; do
    timeout 120 python3 benchmarks/gpu_profile.py ${mm%%:*} ${mm##*:} "$OUT" > "$OUT/log_${mm%%:*}_${mm##*:}.txt" 2>&1
    grep -E "first call|median|kernels/step|vs eager" "$OUT/log_${mm%%:*}_${mm##*:}.txt"
  done
  timeout 200 python3 benchmarks/triton_block_sweep.py "$OUT" > "$OUT/sweep.txt" 2>&1; grep -E "==|top" "$OUT/sweep.txt"
fi
