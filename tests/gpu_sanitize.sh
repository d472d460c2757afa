# gpu_sanitize.sh — runs a reduced GPU sweep under compute-sanitizer (memcheck, racecheck); fails on any error.
# usage: sh tests/gpu_sanitize.sh [BUILD_DIR]        (build first: make test-gpu, or make build/tests/gpu_attn)
# environment: SANITIZE_TOOLS   tools to run (default "memcheck racecheck"; initcheck and synccheck work too)
#              QUICK_MEMCHECK   FLASHC_GPU_QUICK stride under memcheck (default 2: every 2nd small case)
#              QUICK_RACECHECK  the stride under racecheck and the others (default 4; racecheck is slower)
#              SANITIZE_TIMEOUT seconds allowed to each (tool, binary) run (default: no limit); a run that
#                               times out counts as an error (it was not checked to the end)
# Runs build/tests/gpu_attn, and gpu_merge / gpu_append where they exist. Exit: 0 clean, 1 an error was
# reported (or a test failed), 2 no GPU or no compute-sanitizer (nothing was checked).

build=${1:-build}
tools=${SANITIZE_TOOLS:-memcheck racecheck}
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

bins=""
for b in gpu_attn gpu_merge gpu_append; do
    if [ -x "$build/tests/$b" ]; then bins="$bins $build/tests/$b"; fi
done
if [ -z "$bins" ]; then
    echo "gpu_sanitize: no GPU test binaries in $build/tests (run make test-gpu first)"
    exit 1
fi

log=$(mktemp "${TMPDIR:-/tmp}/flashc-sanitize.XXXXXX") || exit 1
trap 'rm -f "$log"' EXIT
bad=0

# sanitize TOOL BIN: runs BIN under TOOL; a non-zero exit or an error summary above 0 counts as bad.
sanitize() {
    tool=$1
    bin=$2
    stride=${QUICK_RACECHECK:-4}
    if [ "$tool" = memcheck ]; then stride=${QUICK_MEMCHECK:-2}; fi
    start=$(date +%s)
    limit=""
    if [ -n "${SANITIZE_TIMEOUT:-}" ]; then limit="timeout $SANITIZE_TIMEOUT"; fi
    FLASHC_GPU_QUICK=$stride $limit "$san" --tool "$tool" --error-exitcode 86 --print-limit 20 "$bin" >"$log" 2>&1
    rc=$?
    if [ "$rc" -eq 124 ]; then echo "== $tool $(basename "$bin"): TIMED OUT after ${SANITIZE_TIMEOUT}s"; fi
    secs=$(($(date +%s) - start))
    # memcheck/initcheck/synccheck end with "ERROR SUMMARY: N errors", racecheck with
    # "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)"
    errors=$(grep -E 'ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: .*[0-9]+ errors' "$log" | tail -n 1 |
        sed -E -e 's/.*ERROR SUMMARY: ([0-9]+).*/\1/' -e 's/.*RACECHECK SUMMARY: .*[(]([0-9]+) errors.*/\1/')
    result=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    echo "== $tool $(basename "$bin"): exit $rc, ${errors:-?} sanitizer errors, ${result:-no result line} (${secs}s)"
    if [ "$rc" -ne 0 ] || [ "${errors:-1}" != 0 ]; then
        bad=1
        grep -E '^=========|FAIL' "$log" | head -n 60
    fi
}

for tool in $tools; do
    for bin in $bins; do
        sanitize "$tool" "$bin"
    done
done
if [ "$bad" -ne 0 ]; then
    echo "gpu_sanitize: errors reported"
    exit 1
fi
echo "gpu_sanitize: clean ($tools)"
exit 0
