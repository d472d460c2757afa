# ab.sh — flashc alone, builds of several trees side by side (A/B of a change), in rotating order.
# usage (GPU machine, repo root, after make): AB_TREES="new:. old:DIR [name:DIR ...]" [AB_ROUNDS=2]
#        [AB_SET=all] [AB_ONLY="SUBSTRING ..."] [AB_SAMPLES=20] [AB_FLAGS="--kv-fp8 ..."] [AB_FRESH=0] sh bench/ab.sh
# AB_ONLY: one compare.py process per substring (AB_SET=table: one per sequence length unless AB_ONLY=whole).
# Another branch's tree: `git archive BRANCH | tar -x -C DIR` into an untracked, not ignored DIR inside the
# repository (the device tool copies such files; build/ stays ignored, so each tree builds there).
# Builds every tree but the first (make -j all there, in parallel), then runs each tree's own
# bench/compare.py --fresh --flashc-only (its binding, its library) once per round, the order rotated by one
# each round so no tree always runs first; prints every run's table. AB_FRESH=0 leaves out --fresh (a child
# process a shape: ~35 s of device time each, which decode's paged shapes need and prefill's do not), and
# with it the ceiling (--no-ceiling). With $OUT set (the device tool's folder) every row also goes to
# $OUT/ab-NAME.log, one file per tree, so a long A/B survives the tool's output tail. AB_BUILD=0 skips the
# make of the other trees (their build/ was made elsewhere and carried: make would rebuild on new mtimes).
# Side by side afterwards (the fastest round of each, + where a tree is faster than the first named):
#   python3 bench/ab_compare.py $OUT main branch [...]
trees=${AB_TREES:?AB_TREES: name:dir pairs, the first one already built}
rounds=${AB_ROUNDS:-2}
set_=${AB_SET:-all}
only=${AB_ONLY:-}
# The prefill table by default one process a sequence length: in one process a faster cell lowers the clock of the
# cells after it, so a change that speeds up the short cells read as a loss on the long ones (PERF.md steps 121, 124).
# AB_ONLY=whole runs the whole set in one process.
if [ -z "$only" ] && [ "$set_" = table ]; then only="-s512 -s1k -s2k -s4k -s8k -s16k"; fi
if [ "$only" = whole ]; then only=""; fi
fresh="--fresh"
if [ "${AB_FRESH:-1}" = 0 ]; then fresh="--no-ceiling"; fi
first=1
for t in $trees; do
    if [ $first -eq 0 ] && [ "${AB_BUILD:-1}" != 0 ]; then make -C "${t#*:}" -j16 all >"/tmp/ab-build-${t%%:*}.log" 2>&1 & fi
    first=0
done
wait
for t in $trees; do
    [ -f "${t#*:}/build/libflashc.so" ] || { echo "ab: ${t#*:} has no build/libflashc.so"; exit 1; }
done
r=0
while [ "$r" -lt "$rounds" ]; do
    list=$(echo $trees | tr ' ' '\n' | awk -v r="$r" '{a[NR-1]=$0} END {for (i = 0; i < NR; i++) print a[(i + r) % NR]}')
    for t in $list; do
        name=${t%%:*} dir=$(cd "${t#*:}" && pwd)
        log=${OUT:+$OUT/ab-$name.log}
        echo "== ab $name round $((r + 1))" | tee -a ${log:-/dev/null}
        for o in ${only:-""}; do # one compare.py per substring of AB_ONLY (or one over the whole set)
            FLASHC_LIB=$dir/build/libflashc.so PYTHONUNBUFFERED=1 python3 "$dir/bench/compare.py" $fresh --flashc-only \
                --set "$set_" ${o:+"--only=$o"} --samples "${AB_SAMPLES:-20}" ${AB_FLAGS:-} 2>&1 | grep -E '^(decode|prefill)' |
                tee -a ${log:-/dev/null}
        done
    done
    r=$((r + 1))
done
