#!/usr/bin/env bash
# Verify attnbench's CUDA paths on a GPU machine in one go; everything lands in the folder given ($1).
#   bash benchmarks/gpu_verify.sh OUTDIR [install|suite|flex|checks|preset|measure|session|resume RUN_DIR]
# install: attnbench itself (a wheel of this checkout in .whl/, made here with
#          `python3 -m pip wheel --no-deps --no-build-isolation . -w .whl`, else an editable install) and any wheels carried in .whl/ (xformers: pip download it where pip works,
#          see the device notes), offline: --no-deps --no-build-isolation, into /tmp/site and the image's env.
# suite:   the whole test suite on this GPU (tests/harness/test_cuda.py included: none may skip for want of a device).
# flex:    benchmarks/flex_options.py: flex's compile and kernel options against the best SDPA backend.
# checks:  environment, the CUDA tests, the correctness gate table for every variant in fp16/bf16/fp32 with
#          the numerics probe, the harness-vs-triton.do_bench timing check, and events against CUDA-graph
#          timing (--timing) on a small and a large cell.
# preset:  the gpu preset into OUTDIR/gpu-run (bounded by GPU_RUN_SECONDS; resumable).
# measure: xformers (load, gate, axes, attnbench bench), an energy run, the varlen and paged presets, and the gpu preset twice
#          (fresh, then with torch's compile caches warm), each run's log lines stamped, in one command
#          (SESSION_SKIP leaves steps out, PYTEST_K picks the CUDA tests, ENERGY_VARIANTS and ENERGY_SEQ size
#          the energy run; DEVICE_REPORTS=1 makes the reports there too).
# session: all of the above in one device command (install, the CUDA tests and the gate table side by side,
#          then the timed checks one at a time, then as much of a gpu-preset run as the time left allows, and
#          its report), each step bounded so that the whole fits SESSION_SECONDS (default 530); steps.txt
#          says what each took; SESSION_SKIP="harness-check ..." leaves steps out; HC_VARIANTS, HC_ROUNDS and
#          HC_SECONDS size the do_bench check. The rest of the suite runs beside the CUDA tests, a test file
#          per process (SUITE_PROCESSES, default 8). For a lease too short for several machine starts. The
#          device tool brings back 8 files at most: run it as `timeout 575 bash benchmarks/gpu_verify.sh
#          /tmp/gs session; tar czf $OUT/gs.tgz -C /tmp gs` (first run 2026-11-25 on an H100:
#          results/reference/gpu-checks-h100-2026-11-25/steps.txt has each step's time).
# One device command per step keeps each under the 10-minute limit; install once per fresh machine.
# The device tool carries the working tree and .whl/ (64 MiB at most): reports/reference (about 46 MB) is not
# needed there, so move it out of the checkout for the call (`mv reports/reference /tmp/rr`) and back after.
# xformers for a machine with no registry, fetched where pip works (0.0.35: 3.2 MB, needs torch >= 2.10):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d .whl xformers==0.0.35
# Rehearse a mode on the CPU before a GPU session: `GPU_VERIFY_REHEARSE=1 bash benchmarks/gpu_verify.sh /tmp/gv MODE`.
set -uo pipefail
out=${1:?usage: gpu_verify.sh OUTDIR [install|suite|flex|checks|preset|measure|session|resume RUN_DIR]}
what=${2:-checks}
mkdir -p "$out"
# Every python3 of the GPU's work runs as "${py[@]}" (the stamp filter and the list of variants are the script's
# own); GPU_VERIFY_REHEARSE=1 runs benchmarks/gpu_rehearse.py with the same argv instead, which checks it on
# the CPU (a dry run, the flags' parse, the paths and names it gives) and measures nothing: a flag or a name
# the code no longer has fails there, each line in $out/rehearsal.txt (tests/frontends/test_gpu_script.py).
py=(python3)
rehearsal=
if [ "${GPU_VERIFY_REHEARSE:-}" = 1 ]; then
    py=(python3 benchmarks/gpu_rehearse.py)
    if [ -z "${GPU_VERIFY_REHEARSAL_LOG:-}" ]; then  # not a mode this one starts (install): it says how it went
        rehearsal=$out/rehearsal.txt
        export GPU_VERIFY_REHEARSAL_LOG=$rehearsal
        : > "$rehearsal"
    fi
fi
export PYTHONUNBUFFERED=1
if [ -d /tmp/site ]; then export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}; fi
# the session and measure modes: steps bounded by their own limits and by what is left of $seconds
start=$(date +%s)
left() { echo $(( seconds - ($(date +%s) - start) )); }
step() {  # step NAME SECONDS COMMAND...: bounded by SECONDS (SIGINT first, as Ctrl-C), timed in steps.txt
    local name=$1 limit=$2 t0=$(date +%s) rc
    shift 2
    if [[ " ${SESSION_SKIP:-} " == *" $name "* ]]; then echo "$name: skipped (SESSION_SKIP)" >> "$out/steps.txt"; return; fi
    if [ "$(type -t "$1")" = function ]; then  # a function of this script (stamped): in a bash of its own
        timeout -s INT -k 10 "$limit" bash -c "$(declare -f "$1"); \"\$@\"" _ "$@"
    else
        timeout -s INT -k 10 "$limit" "$@"
    fi
    rc=$?
    echo "$name: exit $rc after $(( $(date +%s) - t0 )) s (limit $limit s)" | tee -a "$out/steps.txt"
}
stamped() {  # stamped COMMAND...: COMMAND's output lines, each led by the seconds since it started
    "$@" 2>&1 | python3 -u -c 'import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command says its last lines after a Ctrl-C: kept
t0 = time.time()
for line in sys.stdin:
    print(f"{time.time() - t0:7.2f} {line}", end="", flush=True)'
    return "${PIPESTATUS[0]}"
}
case "$what" in
install)
    if compgen -G ".whl/*.whl" >/dev/null; then
        "${py[@]}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    fi
    if ! compgen -G ".whl/attnbench-*.whl" >/dev/null; then  # no wheel of this checkout carried: editable
        "${py[@]}" -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | tail -3 | tee "$out/install.txt"
    fi
    PYTHONPATH=/tmp/site "${py[@]}" -c "import torch, attnbench; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
        | tee -a "$out/install.txt"
    ;;
suite)
    # tests/harness/test_cuda.py in one process (CUDA_TESTS_K: a -k filter of the tests to run first, e.g. those a
    # cut run left, then the others)
    # beside the rest of the suite in SUITE_PROCESSES pytest-xdist processes of two threads each, -v so
    # that a run cut by SUITE_SECONDS still names every test that ended
    t0=$(date +%s)
    cuda_tests() {  # cuda_tests NAME [pytest args]: test_cuda.py within what is left of SUITE_SECONDS
        local name=$1
        shift
        timeout -s INT -k 10 $(( ${SUITE_SECONDS:-300} - ($(date +%s) - t0) )) "${py[@]}" -m pytest \
            tests/harness/test_cuda.py -v -p no:cacheprovider -rs --junitxml="$out/$name.xml" "$@" >> "$out/pytest-cuda.txt" 2>&1
    }
    if [ -n "${CUDA_TESTS_K:-}" ]; then
        { cuda_tests pytest-cuda-first -k "$CUDA_TESTS_K"; cuda_tests pytest-cuda -k "not ($CUDA_TESTS_K)"; } &
    else
        cuda_tests pytest-cuda &
    fi
    timeout -s INT -k 10 "${SUITE_SECONDS:-300}" env OMP_NUM_THREADS=2 "${py[@]}" -m pytest tests -v -p no:cacheprovider \
        -n "${SUITE_PROCESSES:-14}" --dist loadfile -rfEs --durations=25 --ignore=tests/harness/test_cuda.py \
        --junitxml="$out/pytest-suite.xml" > "$out/pytest-suite.txt" 2>&1
    echo "suite exit status $?" >> "$out/pytest-suite.txt"
    wait
    tail -n 4 "$out/pytest-cuda.txt" "$out/pytest-suite.txt"
    ;;
flex)
    # flex's compile and kernel options against the best SDPA backend (benchmarks/flex_options.py), alone
    # on the GPU; FLEX_SECONDS bounds each pass's compiles
    timeout -s INT -k 10 "${FLEX_LIMIT:-290}" "${py[@]}" benchmarks/flex_options.py --seconds "${FLEX_SECONDS:-110}" \
        --json "$out/flex-options.json" > "$out/flex-options.txt" 2>&1
    echo "flex_options exit status $?" >> "$out/flex-options.txt"
    grep -v "^AUTOTUNE\|^  " "$out/flex-options.txt" | tail -20
    ;;
checks)
    nvidia-smi | tee "$out/nvidia-smi.txt"
    "${py[@]}" -m attnbench env | tee "$out/env.txt"
    "${py[@]}" -m attnbench list > "$out/list.txt" 2>&1
    "${py[@]}" -m pytest tests/harness/test_cuda.py -q -p no:cacheprovider 2>&1 | tail -15 | tee "$out/pytest-cuda.txt"
    "${py[@]}" -m attnbench check --device cuda --dtype float16,bfloat16,float32 --seq-len 200 --probe > "$out/gate.txt" 2>&1
    echo "gate exit status $?" >> "$out/gate.txt"
    "${py[@]}" benchmarks/harness_check.py --device cuda --json "$out/harness_check.json" 2>&1 | tee "$out/harness_check.txt"
    "${py[@]}" benchmarks/timing_modes.py --device cuda --json "$out/timing_modes.json" 2>&1 | tee "$out/timing_modes.txt"
    ;;
session)
    seconds=${SESSION_SECONDS:-530}
    bash "$0" "$out" install
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
    nvidia-smi > "$out/nvidia-smi.txt" 2>&1
    "${py[@]}" -m pip list > "$out/pip-list.txt" 2>&1
    step env 60 "${py[@]}" -m attnbench env > "$out/env.txt" 2>&1
    step list 60 "${py[@]}" -m attnbench list > "$out/list.txt" 2>&1
    # correctness side by side (nothing timed here is compared with anything else). flex compiles a kernel
    # per dtype and mask (20-28 s each on an H200), so its CUDA tests and its gate run beside the others'
    # (together, each took over 195 s there and was cut)
    step pytest-cuda 200 "${py[@]}" -m pytest tests/harness/test_cuda.py -q -p no:cacheprovider -rs -k "not flex" \
        --durations=30 --junitxml="$out/pytest-cuda.xml" > "$out/pytest-cuda.txt" 2>&1 &
    step pytest-cuda-flex 200 "${py[@]}" -m pytest tests/harness/test_cuda.py -q -p no:cacheprovider -rs -k flex \
        --junitxml="$out/pytest-cuda-flex.xml" > "$out/pytest-cuda-flex.txt" 2>&1 &
    # the rest of the suite beside them, a test file per process (pytest-xdist is in the image; two
    # processes take 456 s on the 2-core CI machine), two threads each as there; -v names each test as it
    # ends, so that a suite cut by its limit still says which failed
    step suite 200 env OMP_NUM_THREADS=2 "${py[@]}" -m pytest tests -v -p no:cacheprovider -n "${SUITE_PROCESSES:-10}" \
        --dist loadfile -rfE --ignore=tests/harness/test_cuda.py --junitxml="$out/pytest-suite.xml" \
        > "$out/pytest-suite.txt" 2>&1 &
    others=$(python3 -c "from attnbench import variants; print(','.join(n for n in variants.all_variants() if 'flex' not in n))")
    step gate 195 "${py[@]}" -m attnbench check --device cuda --dtype float16,bfloat16,float32 --seq-len 200 \
        --variants "$others" --probe > "$out/gate.txt" 2>&1 &
    step gate-flex 195 "${py[@]}" -m attnbench check --device cuda --dtype float16,bfloat16,float32 --seq-len 200 \
        --variants flex,hf_flex --probe > "$out/gate-flex.txt" 2>&1
    wait
    # timing, one thing at a time on the GPU
    step harness-check "${HC_SECONDS:-150}" "${py[@]}" benchmarks/harness_check.py --device cuda --budget-ms 500 \
        --rounds "${HC_ROUNDS:-15}" --variants "${HC_VARIANTS:-sdpa_flash,sdpa_cudnn,sdpa_efficient,flex}" \
        --json "$out/harness_check.json" > "$out/harness_check.txt" 2>&1
    step timing-modes 70 "${py[@]}" benchmarks/timing_modes.py --device cuda --budget-ms 150 \
        --json "$out/timing_modes.json" > "$out/timing_modes.txt" 2>&1
    step gpu-run $(( $(left) - 30 )) "${py[@]}" -m attnbench run --preset gpu --out "$out/gpu-run" "${@:3}" \
        > "$out/run.log" 2>&1
    step report 25 "${py[@]}" -m attnbench report "$out/gpu-run" --out "$out/gpu-report" > "$out/report.log" 2>&1
    tail -n 12 "$out/steps.txt" "$out/pytest-cuda.txt" "$out/harness_check.txt"
    ;;
measure)
    # the GPU issue's measurements in one device command, each step bounded and timed in steps.txt:
    # xformers loaded (its wheel and nvidia-cuda-runtime-cu12's carried in .whl/) and gated in every dtype,
    # its axes (grouped-query, lower-right, windows, key padding) in both passes; a run of the fused kernels
    # with energy per call (--energy); the varlen and paged presets' CUDA sizes; the gpu preset with its phase
    # columns, twice. The device tool
    # brings back 8 files: `timeout 520 bash benchmarks/gpu_verify.sh /tmp/gm measure; tar czf $OUT/gm.tgz -C /tmp gm`
    seconds=${SESSION_SECONDS:-480}
    bash "$0" "$out" install
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
    nvidia-smi > "$out/nvidia-smi.txt" 2>&1
    step env 60 "${py[@]}" -m attnbench env > "$out/env.txt" 2>&1
    step start-up 60 "${py[@]}" -c "import time; t = time.time(); import torch; a = time.time(); torch.zeros(1, device='cuda'); b = time.time(); import attnbench.cli; c = time.time(); print(f'import torch {a - t:.2f} s, CUDA context {b - a:.2f} s, attnbench.cli {c - b:.2f} s')" \
        > "$out/start-up.txt" 2>&1
    step xformers-info 60 "${py[@]}" -c "from attnbench.variants import xformers_mea as x; print('runtime', x.load_cuda_runtime_12()); print('problem', x._extensions_problem()); import xformers.info as i; i.print_info()" \
        > "$out/xformers-info.txt" 2>&1
    # correctness side by side (nothing timed here is compared with anything else), then the timed runs alone
    step pytest-cuda 150 "${py[@]}" -m pytest tests/harness/test_cuda.py -q -p no:cacheprovider -rs -k "${PYTEST_K:-not flex}" \
        --junitxml="$out/pytest-cuda.xml" > "$out/pytest-cuda.txt" 2>&1 &
    step gate-xformers 90 "${py[@]}" -m attnbench check --device cuda --dtype float16,bfloat16,float32 --seq-len 200 \
        --variants xformers,sdpa_efficient --probe > "$out/gate-xformers.txt" 2>&1
    ax=(--variants xformers,sdpa --device cuda --dtype bfloat16 --heads 16 --kv-heads 16,4 --pass both --budget-ms 30)
    step xformers-axes 60 "${py[@]}" -m attnbench run "${ax[@]}" --seq-len 1024 --causal both --padding 0,0.25 \
        --out "$out/xformers-axes" > "$out/xformers-axes.log" 2>&1
    step xformers-window 40 "${py[@]}" -m attnbench run "${ax[@]}" --seq-len 1024 --causal yes --window 256 \
        --out "$out/xformers-window" > "$out/xformers-window.log" 2>&1
    step xformers-lower-right 50 "${py[@]}" -m attnbench run "${ax[@]}" --seq-len 512 --seq-k 2048 \
        --causal lower-right --window 0,256 --out "$out/xformers-lower-right" > "$out/xformers-lower-right.log" 2>&1
    wait
    # attnbench bench on CUDA: its N = 100 gate (forward and backward) and declared workloads on the device,
    # and its exit status (0: right everywhere)
    step bench-cuda 60 "${py[@]}" -m attnbench bench xformers --device cuda --dtype bfloat16 -q \
        --out "$out/bench-cuda" > "$out/bench-cuda.txt" 2>&1
    step energy 120 "${py[@]}" -m attnbench run --energy --device cuda --dtype bfloat16 --heads 16 --d-k 128 \
        --variants "${ENERGY_VARIANTS:-sdpa_cudnn,sdpa_flash,sdpa_efficient,xformers,naive,sdpa_math}" \
        --seq-len "${ENERGY_SEQ:-4096,16384}" --pass fwd \
        --out "$out/energy-run" > "$out/energy.log" 2>&1
    # the packed and paged workloads' CUDA sizes (varlen_attn, xformers' block-diagonal masks, flex's document
    # mask; varlen_attn's block_table where this torch has it): never measured on a GPU before
    step varlen-run "${VARLEN_SECONDS:-150}" stamped "${py[@]}" -m attnbench run --preset varlen --device cuda \
        --out "$out/varlen-run" > "$out/varlen.log"
    step paged-run "${PAGED_SECONDS:-120}" stamped "${py[@]}" -m attnbench run --preset paged --device cuda \
        --out "$out/paged-run" > "$out/paged.log"
    # the gpu preset twice: on a fresh machine, then again with torch's compile caches (inductor's and
    # Triton's, under /tmp) as that first run left them, as a user's second run finds them; each log line
    # stamped with the seconds since the command started, so the time outside the cells is seen too
    step gpu-run $(( $(left) - 45 )) stamped "${py[@]}" -m attnbench run --preset gpu --out "$out/gpu-run" "${@:3}" \
        > "$out/run.log"
    step gpu-run-warm $(( $(left) - 15 )) stamped "${py[@]}" -m attnbench run --preset gpu --out "$out/gpu-run-warm" \
        "${@:3}" > "$out/run-warm.log"
    if [ -n "${DEVICE_REPORTS:-}" ]; then  # reports need no GPU: made where the files come back, unless asked
        for r in gpu-run gpu-run-warm energy-run xformers-axes varlen-run paged-run; do
            [ -d "$out/$r" ] || continue
            step "report-$r" 30 "${py[@]}" -m attnbench report "$out/$r" --out "$out/$r-report" > "$out/report-$r.log" 2>&1
        done
    fi
    tail -n 20 "$out/steps.txt" "$out/pytest-cuda.txt"
    ;;
preset)
    timeout "${GPU_RUN_SECONDS:-500}" "${py[@]}" -m attnbench run --preset gpu --out "$out/gpu-run" "${@:3}" 2>&1 \
        | grep -v USDT > "$out/run.log"
    echo "run exit status ${PIPESTATUS[0]}" >> "$out/run.log"
    ;;
resume)
    timeout "${GPU_RUN_SECONDS:-500}" "${py[@]}" -m attnbench run --resume --out "${3:?run dir}" 2>&1 \
        | grep -v USDT > "$out/run.log"
    echo "run exit status ${PIPESTATUS[0]}" >> "$out/run.log"
    ;;
*)  # a misspelt mode: said at once, not a machine start that does nothing
    echo "gpu_verify.sh: unknown mode '$what' (install, suite, flex, checks, preset, measure, session, resume)" >&2
    exit 2
    ;;
esac
status=$?  # the mode's last command's, as the script's
if [ -n "$rehearsal" ]; then  # GPU_VERIFY_REHEARSE=1: what was rehearsed, and exit status 1 where any failed
    echo "rehearsal of $what: $(grep -c '^ok' "$rehearsal") ok, $(grep -c '^FAIL' "$rehearsal") failed in" \
        "$(( $(date +%s) - start )) s ($rehearsal)"
    cut -c1-200 "$rehearsal"
    if grep -q '^FAIL' "$rehearsal"; then exit 1; fi
fi
exit "$status"
