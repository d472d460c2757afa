# build_trees.sh — on the development machine (no GPU needed): other branches' trees built for the device tool, slim.
# usage (repo root, after make all and the gpu tests here): sh bench/build_trees.sh BRANCH[:NAME] ...
# Each branch goes to abtrees/NAME (an untracked, not ignored folder: the device tool copies its sources), with this
# tree's build/ copied in and only the files the branch changes against HEAD touched, so make rebuilds what the
# change reaches (every CUDA unit where a .cuh changed) and nothing else. Then the library, gpu_attn, gpu_random,
# gpu_hostile, gpu_append and gpu_tile (bench/check_trees.sh's programs, CHECK_BUILD=0), the rest of build/ removed:
# ~14 MB a tree. build/ is ignored, so the device tool's
# carry must name it: carry ["abtrees/NAME/build", ...] (64 MiB in all), then bench/ab.sh with AB_BUILD=0.
# Logs: /tmp/build-NAME.log; a line per tree with make's exit status.
set -u
[ -f build/libflashc.so ] || { echo "build_trees: make all here first (its objects are copied)"; exit 1; }
for arg in "$@"; do
    br=${arg%%:*} name=${arg#*:}
    [ "$name" = "$arg" ] && name=$(echo "$br" | tr -cd 'A-Za-z0-9_-')
    dir=abtrees/$name log=/tmp/build-$name.log
    git rev-parse --verify -q "$br" >/dev/null || { echo "$name: no branch $br"; continue; }
    rm -rf "$dir" && mkdir -p "$dir"
    git archive "$br" | tar -x -C "$dir"
    cp -a build "$dir/"
    # git archive gives every file the commit's time, older than the copied objects: touch what the branch changes
    (cd "$dir" && git -C ../.. diff --name-only HEAD "$br" | while read -r f; do [ -f "$f" ] && touch "$f"; done)
    (cd "$dir" && make -j2 all build/tests/gpu_attn build/tests/gpu_random build/tests/gpu_hostile build/tests/gpu_append build/tests/gpu_tile) \
        >"$log" 2>&1
    rc=$?
    (cd "$dir/build" && rm -rf src tools examples python libflashc.a flashc-bench tests/*.o tests/test_*)
    find "$dir/build/tests" -type f ! -name gpu_attn ! -name gpu_random ! -name gpu_hostile ! -name gpu_append ! -name gpu_tile -delete
    echo "$name ($br): make exit $rc, $(du -sh "$dir/build" | cut -f1) in $dir/build"
done
