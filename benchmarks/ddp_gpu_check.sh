#!/usr/bin/env bash
# Issue 19's batched 2-GPU run (through the device tool, kind nvidia-h200-x2): the
# distributed tests with NCCL, then ddp_bench.py on GPT-2 small and hf_llama; logs and
# gzipped profiler traces under $OUT.  Every step has a timeout under one overall
# deadline (DEADLINE seconds from the start), so one hang cannot eat the device budget.
# Usage: bash benchmarks/ddp_gpu_check.sh   (STEPS="env tests gpt2 llama" narrows it;
#        LLAMA_BATCH, GPT2_BATCH, LLAMA_MODES, GPT2_MODES override the defaults)
set -u
OUT=${OUT:-/tmp/ddp_out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
elif ls ../../.whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl
fi
export PYTHONPATH="$PWD:/tmp/site"
START=$(date +%s); DEADLINE=${DEADLINE:-450}
left() { local l=$((DEADLINE - ($(date +%s) - START))); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
STEPS=${STEPS:-env tests llama gpt2}
bench() {  # name, timeout, args...
  local name=$1 t; t=$(left "$2"); shift 2
  if [ "$t" -le 20 ]; then echo "== $name: skipped (deadline)"; return; fi
  echo "== $name (timeout ${t}s, at $(( $(date +%s) - START ))s)"
  timeout -k 5 "$t" python3 benchmarks/ddp_bench.py --device cuda --nproc 2 --trace-dir "$OUT/traces" "$@" \
    > "$OUT/bench_$name.log" 2>&1; echo "rc=$?"
  grep -E "first step|rc=" "$OUT/bench_$name.log"; grep -A8 "^DDP benchmark" "$OUT/bench_$name.log" || tail -n 25 "$OUT/bench_$name.log"
}
for step in $STEPS; do case $step in
env)
  timeout 60 python3 - <<'PY' 2>&1 | tee "$OUT/env.txt"
import sys, torch, transformers, triton
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "triton", triton.__version__, "transformers", transformers.__version__)
print("nccl", torch.cuda.nccl.version(), "device_count", torch.cuda.device_count(),
      [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
PY
  timeout 20 nvidia-smi topo -m 2>&1 | head -5 | tee -a "$OUT/env.txt" ;;
tests)
  t=$(left 150); echo "== tests/distributed with NCCL (timeout ${t}s)"
  TORCHKILN_DIST_BACKEND=nccl timeout -k 5 "$t" python3 -m pytest -q -p no:cacheprovider --timeout 140 -n 4 \
    -rfE tests/distributed > "$OUT/test_distributed_nccl.log" 2>&1; echo "rc=$?"
  tail -n 1 "$OUT/test_distributed_nccl.log"; grep -E "^(FAILED|ERROR)" "$OUT/test_distributed_nccl.log" | head -8 ;;
gpt2)
  bench gpt2 220 --config gpt2 --batch "${GPT2_BATCH:-4}" --modes "${GPT2_MODES:-eager,kiln,kiln_nosplit,torch}" \
    --rounds 3 --steps 4 --warmup 2 --profile-steps 2 ;;
llama)
  bench hf_llama 170 --config hf_llama --batch "${LLAMA_BATCH:-32}" --modes "${LLAMA_MODES:-eager,kiln,torch}" \
    --rounds 3 --steps 4 --warmup 2 --profile-steps 2 ;;
esac; done
echo "== done at $(( $(date +%s) - START ))s"
ls -la "$OUT/traces" 2>/dev/null | tail -n +2 | awk '{s+=$5} END {print "traces bytes", s}'
