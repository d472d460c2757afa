# gpu_sanitize.sh — runs the GPU tests under compute-sanitizer (memcheck, racecheck, synccheck, initcheck); fails on any report.
# usage: sh tests/gpu_sanitize.sh [BUILD_DIR]        (build first: make test-gpu, or make build/tests/gpu_attn ...)
# environment:
#   SANITIZE_TOOLS    tools to run (default "memcheck racecheck synccheck initcheck")
#   SANITIZE_BINS     the runs, each BIN or BIN:ARG (default "gpu_attn gpu_random gpu_merge gpu_append gpu_spec
#                     gpu_big:--small"; add "gpu_big" for the > 2^31-element cases at full size, ~9 GB)
#   QUICK_MEMCHECK    FLASHC_GPU_QUICK under memcheck (default 2): gpu_attn every 2nd small case of each group,
#                     gpu_random 600/2 = 300 small random cases
#   QUICK_RACECHECK   the same under racecheck, synccheck and initcheck (default 4: gpu_random 150 cases)
#   SANITIZE_TIMEOUT  seconds allowed to each (tool, run) (default 900); a run that times out counts as an
#                     error (it was not checked to the end)
# initcheck runs with FLASHC_GPU_UNINIT_WS=1: gpu_attn / gpu_random / gpu_big leave their workspaces as
# cudaMalloc returns them, so a read of workspace the library did not write first is reported; every other
# device buffer of those tests is written in full (uploaded or memset) before the library sees it, so what
# initcheck can find is the library's. gpu_merge, gpu_append and gpu_spec upload what they allocate (gpu_spec's
# workspace is never written by the test).
# Prints one line per run (tool, binary, exit, sanitizer errors, the test's "N passed, M failed", seconds) and
# the same lines again as a summary at the end. Exit: 0 clean, 1 an error was reported (or a test failed or
# timed out), 2 no GPU or no compute-sanitizer (nothing was checked).

build=${1:-build}
tools=${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}
runs=${SANITIZE_BINS:-gpu_attn gpu_random gpu_merge gpu_append gpu_spec gpu_big:--small}
timeout_s=${SANITIZE_TIMEOUT:-900}
san=$(command -v compute-sanitizer 2>/dev/null)
if [ -z "$san" ] && [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" ]; then
    san=${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer
fi
if [ -z "$san" ]; then
    echo "gpu_sanitize: compute-sanitizer not found: nothing checked"
    exit 2
fi
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "gpu_sanitize: no NVIDIA GPU visible: nothing checked"
    exit 2
fi

present=""
for run in $runs; do
    bin=${run%%:*}
    if [ -x "$build/tests/$bin" ]; then
        present="$present $run"
    else
        echo "gpu_sanitize: $build/tests/$bin not built: not checked"
    fi
done
if [ -z "$present" ]; then
    echo "gpu_sanitize: no GPU test binaries in $build/tests (run make test-gpu first)"
    exit 1
fi

log=$(mktemp "${TMPDIR:-/tmp}/flashc-sanitize.XXXXXX") || exit 1
summary=$(mktemp "${TMPDIR:-/tmp}/flashc-sanitize-summary.XXXXXX") || exit 1
trap 'rm -f "$log" "$summary"' EXIT
bad=0

# sanitize TOOL RUN: runs BIN [ARG] under TOOL; a non-zero exit, a timeout or an error count above 0 is bad.
sanitize() {
    tool=$1
    bin=${2%%:*}
    arg=""
    case "$2" in *:*) arg=${2#*:} ;; esac
    stride=${QUICK_RACECHECK:-4}
    if [ "$tool" = memcheck ]; then stride=${QUICK_MEMCHECK:-2}; fi
    uninit=0
    if [ "$tool" = initcheck ]; then uninit=1; fi
    start=$(date +%s)
    FLASHC_GPU_QUICK=$stride FLASHC_GPU_UNINIT_WS=$uninit timeout "$timeout_s" \
        "$san" --tool "$tool" --error-exitcode 86 --print-limit 20 "$build/tests/$bin" $arg >"$log" 2>&1
    rc=$?
    secs=$(($(date +%s) - start))
    # memcheck / initcheck / synccheck end with "ERROR SUMMARY: N errors", racecheck with
    # "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)"
    errors=$(grep -E 'ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: .*[0-9]+ errors' "$log" | tail -n 1 |
        sed -E -e 's/.*ERROR SUMMARY: ([0-9]+).*/\1/' -e 's/.*RACECHECK SUMMARY: .*[(]([0-9]+) errors.*/\1/')
    result=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    note=""
    if [ "$rc" -eq 124 ]; then note=", TIMED OUT after ${timeout_s}s"; fi
    line=$(printf '%-9s %-22s exit %3s, %s sanitizer errors, %s (%ss)%s' "$tool" "$bin${arg:+ $arg}" "$rc" \
        "${errors:-?}" "${result:-no result line}" "$secs" "$note")
    echo "== $line"
    echo "$line" >>"$summary"
    if [ "$rc" -ne 0 ] || [ "${errors:-1}" != 0 ]; then
        bad=1
        grep -E '^=========|FAIL' "$log" | head -n 60
    fi
}

for tool in $tools; do
    for run in $present; do
        sanitize "$tool" "$run"
    done
done
echo "gpu_sanitize: summary ($("$san" --version 2>/dev/null | grep -iE 'version' | head -n 1))"
cat "$summary"
if [ "$bad" -ne 0 ]; then
    echo "gpu_sanitize: errors reported"
    exit 1
fi
echo "gpu_sanitize: clean ($tools)"
exit 0
