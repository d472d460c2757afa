#!/bin/sh
# replay.sh — runs fuzz_api on reproducers named CLASS--what (tests/fuzz/crashes/), each as it was found:
# every other known class skipped. Prints whether each still fails; exit 1 if any does.
# usage: sh tests/fuzz/replay.sh [FILE...]   (default: tests/fuzz/crashes/*; make fuzz first)
classes="window biglen cu_overflow append31 softcap nanmask overlap mergeprec"
bin=./build-fuzz/fuzz_api
[ -x "$bin" ] || { echo "replay: $bin missing (make fuzz)"; exit 2; }
[ $# -gt 0 ] || set -- tests/fuzz/crashes/*--*
failing=0
for f in "$@"; do
    class=$(basename "$f" | sed 's/--.*//')
    skip=$(for c in $classes; do [ "$c" != "$class" ] && printf '%s,' "$c"; done)
    if FLASHC_FUZZ_SKIP=$skip "$bin" "$f" >/tmp/replay.$$ 2>&1; then
        echo "fixed        $f"
    else
        failing=$((failing + 1))
        echo "still fails  $f: $(grep -m1 -E 'runtime error|VIOLATION|ERROR: AddressSanitizer' /tmp/replay.$$)"
    fi
done
rm -f /tmp/replay.$$
[ "$failing" -eq 0 ]
