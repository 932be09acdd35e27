#!/bin/bash
# The checks that need a GPU, in one run: environment, the specs on CUDA, the CUDA-event timing
# test, the model relations on CUDA (TinyLM and its mutants), and the default perf run on CUDA
# with traces and summaries (GPU_CHECK_CPU=1 adds the CPU suite's serial and -n auto wall times).
#   bash tests/gpu_check.sh [RESULTS_DIR]      (default: gpu-results; the project installed as README says)
export PYTHONUNBUFFERED=1 CI=true
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-gpu-results}")
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'
  nproc; } > "$OUT/env.txt" 2>&1
step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to NAME.log, record exit code and wall time
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s%N)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))" >> "$OUT/steps.txt"
}
step specs_cuda 150 python3 -m pytest specs --device cuda -p no:xdist -q --matrix-dir "$OUT/reports-cuda"
step cuda_timing 50 python3 -m pytest tests/test_cuda_timing.py -p no:xdist -q
step models_cuda 90 python3 -m pytest specs/test_models.py --device cuda -p no:xdist -q --plugin tests.model_mutants \
    --encoders 'tinylm*' --matrix-dir "$OUT/reports-models-cuda"
# the default (short) perf run on the GPU: its duration and each group's best ×copy lead its summary
step perf_cuda 200 python3 -m pytest specs -m perf -p no:xdist -q --perf-devices cuda --device cuda \
    --profile --profile-dir "$OUT/profiles" --profile-run-id gpu \
    --benchmark-json "$OUT/benchmarks-cuda.json" --matrix-dir "$OUT/reports-perf"
if [ -n "$GPU_CHECK_CPU" ]; then  # the CPU runs on the GPU machine's cores, when asked
  step specs_cpu_serial 60 python3 -m pytest specs -p no:xdist -q --matrix-dir "$OUT/reports-serial"
  step specs_cpu_nauto 50 python3 -m pytest specs -n auto -q --matrix-dir "$OUT/reports-nauto"
fi
grep -E "^(perf run|best ×copy|cuda (forward|forward\+backward))|fused RoPE" "$OUT/perf_cuda.log" > "$OUT/perf_summary.txt"
cat "$OUT/steps.txt"
