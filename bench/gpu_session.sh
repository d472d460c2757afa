# gpu_session.sh — one device session in one command: build, GPU sweep, torch comparison, bench, sanitizer.
# usage (on the GPU machine, repo root): sh bench/gpu_session.sh [STEP...]
#   steps: build attn compare bench sanitize demo suite hostile ab overhead eager eagerdense python fp8 (default: the first
#   five, in that order); overhead: bench/overhead.py on CUDA; eager: compare.py --set decode --eager (the
#   Python fast path against torch eager); eagerdense: the same with flashc on torch's dense K/V (--kv-dense); python: tests/test_python.py with its torch CUDA checks; fp8:
#   compare.py --set decode --kv-fp8 --fresh (flashc on an e4m3 paged cache against torch on bf16); each
#   has a time limit (seconds: T_ATTN 200, T_COMPARE 300, T_BENCH 150, T_SANITIZE 150, T_SUITE 400, T_AB 400)
#   so later steps still run. suite: make test-gpu; hostile: gpu_hostile; ab: flashc alone, this tree against
#   the tree in $AB_OLD (built there first), AB_ROUNDS alternating rounds of compare.py --fresh --flashc-only
#   (AB_SET: decode, prefill or all).
# Logs and results go to $OUT (or /tmp/gpu-session-out): gpu_attn.log, compare.log/.json/.png, bench.log,
# sanitize.log. The last lines printed summarise every step.

out=${OUT:-${TMPDIR:-/tmp}/gpu-session-out}
mkdir -p "$out"
steps=${*:-build attn compare bench sanitize}
summary=""

# step NAME LIMIT CMD...: runs CMD under timeout, output to $out/NAME.log and the terminal.
step() {
    name=$1
    limit=$2
    shift 2
    start=$(date +%s)
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    cat "$out/$name.log"
    summary="$summary
$name: exit $rc in $(($(date +%s) - start))s$([ "$rc" -eq 124 ] && echo " (TIMED OUT at ${limit}s)")"
}

nvidia-smi -L
for s in $steps; do
    case $s in
    build) step build 300 make -j16 all $(ls tests/gpu_*.c tests/gpu_*.cu 2>/dev/null | sed -E 's#^tests/(.*)\.cu?$#build/tests/\1#') ;;
    attn) step gpu_attn "${T_ATTN:-200}" ./build/tests/gpu_attn ;;
    compare) step compare "${T_COMPARE:-300}" env PYTHONUNBUFFERED=1 python3 bench/compare.py --fresh \
        --json "$out/compare.json" --png "$out/compare.png" ;;
    bench) step bench "${T_BENCH:-150}" ./build/flashc-bench --device cuda --set perf ;;
    demo) step demo 120 ./build/flashc-bench --demo ;;
    sanitize) step sanitize "${T_SANITIZE:-150}" sh tests/gpu_sanitize.sh ;;
    suite) step suite "${T_SUITE:-400}" make test-gpu ;;
    hostile) step hostile 120 ./build/tests/gpu_hostile ;;
    ab) step ab "${T_AB:-400}" sh bench/ab.sh ;;
    overhead) step overhead 200 python3 bench/overhead.py --device cuda --n 2000 --repeats 9 ;;
    eager) step eager 300 env PYTHONUNBUFFERED=1 python3 bench/compare.py --set decode --eager --json "$out/eager.json" ;;
    eagerdense) step eagerdense 300 env PYTHONUNBUFFERED=1 python3 bench/compare.py --set decode --eager --kv-dense \
        --json "$out/eagerdense.json" ;;
    fp8) step fp8 300 env PYTHONUNBUFFERED=1 python3 bench/compare.py --set decode --kv-fp8 --fresh --json "$out/fp8.json" ;;
    python) step python 300 env FLASHC_LIB="$PWD/build/libflashc.so" FLASHC_TEST_PIP=0 python3 tests/test_python.py ;;
    *) echo "gpu_session: unknown step $s" ;;
    esac
done
echo "== summary$summary"
grep -hE '^[0-9]+ passed, [0-9]+ failed|SKIPPED [0-9]+ x|^== |gpu_sanitize:' "$out"/*.log 2>/dev/null | head -40
