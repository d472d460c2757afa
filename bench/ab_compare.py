# ab_compare.py — the rows of bench/ab.sh's per-tree logs ($OUT/ab-NAME.log) side by side: per shape the fastest
# round of each tree and its change against the first tree named, then the geometric mean of the changes.
# usage: python3 bench/ab_compare.py [--median] DIR BASE OTHER [OTHER ...]   (DIR holds ab-BASE.log, ab-OTHER.log, ...)
# --median: each tree's median round instead of its fastest, and how many rounds OTHER was faster than BASE in the
# same round (k/n: the rounds run in rotated order, bench/ab.sh).
# A positive change is a faster OTHER (BASE time / OTHER time - 1). Rows are compare.py's: "name  ms ...".
import collections
import math
import re
import statistics
import sys


def fastest_rounds(path):
    """Shape name -> list of its times (ms), one per round, from one tree's log."""
    times = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            m = re.match(r"((?:prefill|decode)\S*)\s+([\d.]+)\s", line)
            if m:
                times[m.group(1)].append(float(m.group(2)))
    return times


def main():
    args = sys.argv[1:]
    median = "--median" in args
    args = [a for a in args if a != "--median"]
    if len(args) < 3:
        print("usage: python3 bench/ab_compare.py [--median] DIR BASE OTHER [OTHER ...]")
        return 1
    folder, trees = args[0], args[1:]
    pick = statistics.median if median else min
    logs = {t: fastest_rounds("%s/ab-%s.log" % (folder, t)) for t in trees}
    base = trees[0]
    changes = {t: [] for t in trees[1:]}
    print("%-32s %10s" % ("shape", base + " ms") + "".join("  %18s" % (t + " ms (change)") for t in trees[1:]))
    for name, base_times in logs[base].items():
        if not all(logs[t].get(name) for t in trees[1:]):
            continue
        b = pick(base_times)
        row = "%-32s %10.4f" % (name, b)
        for t in trees[1:]:
            o = pick(logs[t][name])
            changes[t].append(b / o)
            row += "  %9.4f (%+6.1f%%)" % (o, 100 * (b / o - 1))
            if median:
                pairs = list(zip(base_times, logs[t][name]))
                row += " %d/%d" % (sum(y < x for x, y in pairs), len(pairs))
        print(row)
    for t, c in changes.items():
        if c:
            g = math.exp(sum(math.log(x) for x in c) / len(c))
            print("%s against %s: geometric mean %+.2f%% over %d shapes, %d faster" %
                  (t, base, 100 * (g - 1), len(c), sum(x > 1 for x in c)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
