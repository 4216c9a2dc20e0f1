#!/usr/bin/env bash
# Verify attnbench's CUDA paths on a GPU machine in one go; everything lands in the folder given ($1).
#   bash benchmarks/gpu_verify.sh OUTDIR [checks|preset|resume RUN_DIR]
# checks: environment, the test suite's CUDA tests, the correctness gate table for every variant in
#         fp16/bf16 with the numerics probe, the harness-vs-triton.do_bench timing check, and events against
#         CUDA-graph timing (--timing) on a small and a large cell.
# preset: the gpu preset into OUTDIR/gpu-run (bounded by GPU_RUN_SECONDS; resumable).
set -uo pipefail
out=${1:?usage: gpu_verify.sh OUTDIR [checks|preset|resume RUN_DIR]}
what=${2:-checks}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
case "$what" in
checks)
    nvidia-smi | tee "$out/nvidia-smi.txt"
    python3 -m attnbench env | tee "$out/env.txt"
    python3 -m attnbench list > "$out/list.txt" 2>&1
    python3 -m pytest tests/test_cuda.py -q -p no:cacheprovider 2>&1 | tail -15 | tee "$out/pytest-cuda.txt"
    python3 -m attnbench check --device cuda --dtype float16,bfloat16 --seq-len 200 --probe > "$out/gate.txt" 2>&1
    echo "gate exit status $?" >> "$out/gate.txt"
    python3 benchmarks/harness_check.py --device cuda --json "$out/harness_check.json" 2>&1 | tee "$out/harness_check.txt"
    python3 benchmarks/timing_modes.py --device cuda --json "$out/timing_modes.json" 2>&1 | tee "$out/timing_modes.txt"
    ;;
preset)
    timeout "${GPU_RUN_SECONDS:-500}" python3 -m attnbench run --preset gpu --out "$out/gpu-run" "${@:3}" 2>&1 \
        | grep -v USDT > "$out/run.log"
    echo "run exit status ${PIPESTATUS[0]}" >> "$out/run.log"
    ;;
resume)
    timeout "${GPU_RUN_SECONDS:-500}" python3 -m attnbench run --resume --out "${3:?run dir}" 2>&1 \
        | grep -v USDT > "$out/run.log"
    echo "run exit status ${PIPESTATUS[0]}" >> "$out/run.log"
    ;;
esac
