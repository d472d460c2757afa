# gpu_suite.sh — make test-gpu's programs from binaries already built (here or carried), every C program at once and
# gpu_random in four shards of 2 500 seeds (~75 s on an H100 against ~5 min one after another), then sass_overlap and
# test_python, then compute-sanitizer synccheck / racecheck / memcheck over gpu_attn core (quick), long256, mid64, long128 and walks.
# usage (GPU machine, repo root, after make all and the build/tests/gpu_* binaries): [OUT=DIR] sh bench/gpu_suite.sh
# Logs go to $OUT (default /tmp/gpu-suite-out); one line per program with its "N passed, M failed" and exit status.
# GPU_SUITE_SAN=0 leaves out the sanitizers (where they already ran over the same kernels).
out=${OUT:-/tmp/gpu-suite-out}
mkdir -p "$out"
nvidia-smi -L
s=$(date +%s)
for p in gpu_attn gpu_big gpu_hostile gpu_merge gpu_append gpu_spec gpu_tile; do
    (./build/tests/$p >"$out/$p.log" 2>&1; echo "$p exit $?" >>"$out/$p.log") &
done
for k in 0 1 2 3; do
    (./build/tests/gpu_random --cases 2500 --first $((1 + k * 2500)) >"$out/random$k.log" 2>&1
     echo "random$k exit $?" >>"$out/random$k.log") &
done
wait
echo "C programs in $(($(date +%s) - s))s"
for f in "$out"/*.log; do
    echo "$(basename "$f"): $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$f" | tail -1) | $(tail -1 "$f")"
done
python3 tests/sass_overlap.py build/libflashc.so >"$out/sass.txt" 2>&1
echo "sass_overlap exit $?: $(tail -1 "$out/sass.txt")"
FLASHC_LIB=$PWD/build/libflashc.so FLASHC_TEST_PIP=0 timeout 300 python3 tests/test_python.py >"$out/python.txt" 2>&1
echo "test_python exit $?: $(grep -E 'passed' "$out/python.txt" | tail -1)"
[ "${GPU_SUITE_SAN:-1}" = 0 ] && exit 0
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in synccheck racecheck memcheck; do
    for g in core long256 mid64 long128 walks; do
        quick=4
        [ "$tool" = memcheck ] && quick=2
        [ "$g" != core ] && quick=0 # every case
        s=$(date +%s)
        FLASHC_GPU_QUICK=$quick timeout 300 "$san" --tool $tool --error-exitcode 86 --print-limit 20 \
            ./build/tests/gpu_attn $g >"$out/san-$tool-$g.txt" 2>&1
        echo "$tool $g exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/san-$tool-$g.txt" | tail -1)" \
            "$(grep -E '^[0-9]+ passed' "$out/san-$tool-$g.txt" | tail -1) ($(($(date +%s) - s))s)"
    done
done
