"""sass_loops.py — what ptxas made of each kernel: instructions, spills, uniform moves, and its loops by size.

For the kernel work of docs/PERF.md: a change meant for a tile's edge should leave the block loops as they were,
and a loop that grew or spilled is read before anything is timed (PERF.md steps 58, 109, 114). Per kernel whose
mangled name contains FILTER (default fwd_wgmma): SASS instructions, LDL/STL (spills), R2UR (values moved to the
uniform datapath: many mean addresses built per thread, step 109), then every loop (a backward branch) of 300 to
1500 instructions with its size, spills and MUFU.EX2 count — the wgmma prefill's block loops are the ones with
BN / 2 + 2 exponentials.

usage: python3 bench/sass_loops.py LIB_OR_CUBIN [FILTER]
Needs cuobjdump (CUDA_HOME/bin, /usr/local/cuda/bin or PATH; no GPU). Two builds side by side: run it on each.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from sass_overlap import find_cuobjdump, functions  # noqa: E402


def kernels(sass):
    """(mangled name, [(address, instruction)]) of every function in cuobjdump -sass output."""
    for name, body in functions(sass):
        yield name, [(int(m.group(1), 16), m.group(2)) for line in body
                     for m in [re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", line)] if m]


def loops(ins):
    """(first, last) instruction indices of every backward branch's body."""
    index = {a: i for i, (a, _) in enumerate(ins)}
    for i, (a, text) in enumerate(ins):
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", text)
        target = int(m.group(1), 16) if m else a
        if target < a and target in index:
            yield index[target], i


def count(ins, lo, hi, pattern):
    return sum(1 for _, t in ins[lo:hi + 1] if re.search(pattern, t))


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().split("\n\n")[-1])
        return 2
    tool = find_cuobjdump()
    if not tool:
        print("sass_loops: no cuobjdump")
        return 2
    want = sys.argv[2] if len(sys.argv) > 2 else "fwd_wgmma"
    sass = subprocess.run([tool, "-sass", sys.argv[1]], capture_output=True, text=True).stdout
    for name, ins in kernels(sass):
        if want not in name:
            continue
        last = len(ins) - 1
        print("%s\n  %d instructions, LDL/STL %d, R2UR %d" %
              (name[:140], len(ins), count(ins, 0, last, r"\b(LDL|STL)\b"), count(ins, 0, last, r"\bR2UR\b")))
        for lo, hi in loops(ins):
            if 300 <= hi - lo + 1 <= 1500:
                print("  loop at %6d: %4d instructions, LDL/STL %d, MUFU.EX2 %d" %
                      (lo, hi - lo + 1, count(ins, lo, hi, r"\b(LDL|STL)\b"), count(ins, lo, hi, r"MUFU\.EX2")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
