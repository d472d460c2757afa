# check_trees.sh — builds several source trees at once on the GPU machine and runs the quick GPU checks in each.
# usage (repo root, GPU machine): CHECK_TREES="name:dir ..." [CHECK_CASES=2000] [CHECK_ONLY="gpu_attn ..."] sh bench/check_trees.sh
# A tree: this one (.) or another branch's, brought along as `git archive BRANCH | tar -x -C DIR` into an untracked,
# not ignored DIR inside the repository. Each tree builds in its own build/ (make -j over the CPUs shared out),
# then runs gpu_attn, gpu_hostile, gpu_random --cases CHECK_CASES and gpu_append (or CHECK_ONLY's programs);
# every program's log goes to $OUT/NAME-PROGRAM.log and its last line to the summary.
# CHECK_BUILD=0: the trees were built elsewhere and carried (bench/build_trees.sh): no make, and every tree's
# programs run at once (as bench/gpu_suite.sh runs them), tests/sass_overlap.py over each library beside them.
trees=${CHECK_TREES:?CHECK_TREES: name:dir pairs}
progs=${CHECK_ONLY:-gpu_attn gpu_hostile gpu_random gpu_append}
out=${OUT:-/tmp/check-trees-out}
mkdir -p "$out"
n=$(echo $trees | wc -w)
jobs=$(( $(nproc) / n ))
[ "$jobs" -ge 1 ] || jobs=1
start=$(date +%s)
# One GPU program of one tree, its log in $out and its last "passed / failed" line on stdout.
check_one() {
    name=$1 dir=$2 p=$3 args="" s=$(date +%s)
    [ "$p" = gpu_random ] && args="--cases ${CHECK_CASES:-2000}"
    (cd "$dir" && timeout 300 "./build/tests/$p" $args) >"$out/$name-$p.log" 2>&1
    echo "$name $p: exit $? in $(( $(date +%s) - s ))s: $(grep -E 'passed|failed' "$out/$name-$p.log" | tail -1)"
}
if [ "${CHECK_BUILD:-1}" = 0 ]; then
    for t in $trees; do
        for p in $progs; do check_one "${t%%:*}" "${t#*:}" "$p" & done
        ( (cd "${t#*:}" && python3 tests/sass_overlap.py build/libflashc.so) >"$out/${t%%:*}-sass.log" 2>&1
          echo "${t%%:*} sass_overlap: exit $?: $(tail -1 "$out/${t%%:*}-sass.log")") &
    done
    wait
    echo "checked in $(( $(date +%s) - start ))s"
    exit 0
fi
for t in $trees; do
    (make -C "${t#*:}" -j"$jobs" all $(for p in $progs; do echo "build/tests/$p"; done) >"$out/${t%%:*}-build.log" 2>&1
     echo "${t%%:*}: build exit $?") &
done
wait
echo "built in $(( $(date +%s) - start ))s"
for t in $trees; do
    for p in $progs; do check_one "${t%%:*}" "${t#*:}" "$p"; done
done
