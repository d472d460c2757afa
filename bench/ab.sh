# ab.sh — flashc alone, this tree's build against another tree's (A/B of a change), alternating rounds.
# usage (GPU machine, repo root, after make): AB_OLD=DIR [AB_ROUNDS=2] [AB_SET=all] [AB_ONLY=SUBSTRING] sh bench/ab.sh
# Builds DIR (make -j all there), then runs each tree's own bench/compare.py --fresh --flashc-only (its binding,
# its library) once per round, new first in odd rounds, old first in even ones; prints every run's table.
old=${AB_OLD:?AB_OLD: the tree to compare against}
rounds=${AB_ROUNDS:-2}
set_=${AB_SET:-all}
only=${AB_ONLY:+--only $AB_ONLY}
make -C "$old" -j16 all >/dev/null 2>&1 || { echo "ab: build of $old failed"; exit 1; }
run() { # run LABEL TREE
    echo "== ab $1 round $r"
    FLASHC_LIB=$2/build/libflashc.so PYTHONUNBUFFERED=1 python3 "$2/bench/compare.py" --fresh --flashc-only --set "$set_" $only \
        --samples "${AB_SAMPLES:-20}" 2>&1 | grep -vE '^\s*$'
}
r=1
while [ "$r" -le "$rounds" ]; do
    if [ $((r % 2)) -eq 1 ]; then run new "$PWD"; run old "$old"
    else run old "$old"; run new "$PWD"; fi
    r=$((r + 1))
done
