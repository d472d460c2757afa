# run_tests.sh — runs test binaries (then the Python tests), sums their "N passed, M failed" lines.
# usage: sh tests/run_tests.sh [--gpu | --no-python] BIN...
# --no-python leaves the Python tests out (the sanitizer builds: their runtime is not in python3).
# Each program must end its output with "N passed, M failed"; one that crashes, exits non-zero without
# reporting a failure, or prints no such line counts as 1 failed. Skips never count as passed.
# Exit status: 0 all passed, 1 something failed, 2 nothing failed but GPU tests were skipped.

gpu=0
python=1
if [ "$1" = "--gpu" ]; then
    gpu=1
    shift
elif [ "$1" = "--no-python" ]; then
    python=0
    shift
fi

passed=0
failed=0
skipped=0
tmp=$(mktemp "${TMPDIR:-/tmp}/flashc-tests.XXXXXX") || exit 1
trap 'rm -f "$tmp" "$tmp.rc"' EXIT

# run_one NAME CMD...: runs CMD, shows its output, adds its counts.
run_one() {
    name=$1
    shift
    start=$(date +%s)
    { "$@" 2>&1; echo $? >"$tmp.rc"; } | tee "$tmp"
    rc=$(cat "$tmp.rc" 2>/dev/null || echo 127)
    secs=$(($(date +%s) - start))
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp" | tail -n 1)
    if [ -z "$line" ]; then
        echo "== $name: no \"N passed, M failed\" line (exit status $rc): counted as 1 failed"
        failed=$((failed + 1))
        return
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed, ([0-9]+) failed.*/\1/')
    f=$(echo "$line" | sed -E 's/^([0-9]+) passed, ([0-9]+) failed.*/\2/')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "== $name: exit status $rc with no failure reported: counted as 1 failed"
        f=1
    fi
    echo "== $name: $p passed, $f failed (${secs}s)"
    passed=$((passed + p))
    failed=$((failed + f))
}

have_gpu() {
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'
}

if [ "$gpu" -eq 1 ]; then
    if [ $# -eq 0 ]; then
        echo "gpu: no GPU test binaries (built without nvcc?): GPU tests skipped, not passed"
        skipped=1
    elif ! have_gpu; then
        echo "gpu: no NVIDIA GPU visible: GPU tests skipped, not passed"
        skipped=1
    fi
fi

if [ "$skipped" -eq 0 ]; then
    for bin in "$@"; do
        if [ ! -x "$bin" ]; then
            echo "== $bin: missing or not executable: counted as 1 failed"
            failed=$((failed + 1))
            continue
        fi
        run_one "$bin" "$bin"
    done
fi

# The CPU tile kernels are built per instruction set (src/cpu/isa.c runs the best): test_cpu once more
# under each lower one, forced by FLASHC_CPU_ISA (one the CPU or the build lacks falls back to the best).
if [ "$gpu" -eq 0 ] && [ "$skipped" -eq 0 ]; then
    for bin in "$@"; do
        case "$bin" in
        */test_cpu)
            for isa in ${FLASHC_TEST_CPU_ISAS-baseline v3}; do
                run_one "FLASHC_CPU_ISA=$isa $bin" env FLASHC_CPU_ISA="$isa" "$bin"
            done ;;
        esac
    done
fi

# The compiled wgmma kernels' softmax/PV overlap (reads the SASS; needs cuobjdump, not a GPU): in make test-gpu, and in
# make test where the library has CUDA kernels and cuobjdump is found (.ci/run installs one); make test without either
# says so and counts nothing (a CPU-only build has no such kernel to check).
if [ -f build/libflashc.so ] && { [ "$gpu" -eq 1 ] || [ "$python" -eq 1 ]; }; then
    if command -v python3 >/dev/null 2>&1; then
        python3 tests/sass_overlap.py build/libflashc.so >"$tmp.sass" 2>&1
        src=$?
        if [ "$src" -eq 2 ]; then
            cat "$tmp.sass"
            [ "$gpu" -eq 1 ] && skipped=1
        else
            run_one "python3 tests/sass_overlap.py" cat "$tmp.sass"
        fi
        rm -f "$tmp.sass"
    else
        echo "sass_overlap: no python3: skipped, not passed"
        [ "$gpu" -eq 1 ] && skipped=1
    fi
fi

# The Python tests: in make test (torch CPU checks where torch is installed), and in make test-gpu, where
# their torch CUDA checks run (CUDA graph capture and replay, the custom ops, cache_batch_idx / leftpad).
if [ "$gpu" -eq 0 ] || [ "$skipped" -eq 0 ]; then
    if [ "$python" -eq 0 ]; then
        echo "python: left out of this run (--no-python)"
    elif [ ! -f tests/test_python.py ]; then
        echo "python: skipped (tests/test_python.py not there)"
    elif ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import numpy' >/dev/null 2>&1; then
        echo "python: skipped (numpy not installed)"
    else
        FLASHC_LIB="$PWD/build/libflashc.so"
        export FLASHC_LIB
        run_one "python3 tests/test_python.py" python3 tests/test_python.py
    fi
fi

echo "$passed passed, $failed failed"
if [ "$failed" -ne 0 ]; then exit 1; fi
if [ "$skipped" -ne 0 ]; then exit 2; fi
exit 0
