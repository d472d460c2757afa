#!/usr/bin/env python3
"""perf_md.py — turn bench/compare.py's JSON into the Markdown rows docs/PERF.md keeps.

usage: perf_md.py compare.json COMMIT          one row per shape
       perf_md.py compare.json COMMIT --grid   the prefill table (--set table): a row per (d, causal), a column
                                               per seqlen, flashc / cuDNN TF/s (cuDNN time / flashc time)"""
import json
import sys


def fmt_side(side, kind):
    if not side or side.get("error") or side.get("ms") is None:
        return "n/a"
    if kind == "decode":
        return f"{side['ms'] * 1e3:.1f} µs, {side['gbps']:.0f} GB/s"
    return f"{side['ms']:.3f} ms, {side['tflops']:.0f} TF/s"


def ratio(anchor, ours):
    if not anchor or not ours or anchor.get("ms") is None or ours.get("ms") is None:
        return "n/a"
    return f"{anchor['ms'] / ours['ms']:.2f}×"


def grid(data):
    cells, lens, ratios = {}, [], []
    for row in data["rows"]:
        p, ours, anchor = row["params"], row.get("flashc"), row.get("cudnn")
        if row["kind"] != "prefill" or not ours or ours.get("tflops") is None:
            continue
        d, dv = p["d"], p.get("d_v", p["d"])
        key = ("%d" % d if dv == d else "%d / %d" % (d, dv), "yes" if p["causal"] else "no")
        if p["s"] not in lens:
            lens.append(p["s"])
        text = "%.0f" % ours["tflops"]
        if anchor and anchor.get("ms"):
            ratios.append(anchor["ms"] / ours["ms"])
            text += " / %.0f (%.2f)" % (anchor["tflops"], ratios[-1])
        cells.setdefault(key, {})[p["s"]] = text
    name = lambda s: "%dk" % (s // 1024) if s >= 1024 else str(s)
    print("| d | causal | " + " | ".join(name(s) for s in lens) + " |")
    print("|---|---|" + "---|" * len(lens))
    for (d, causal), row in cells.items():
        print("| %s | %s | " % (d, causal) + " | ".join(row.get(s, "n/a") for s in lens) + " |")
    if ratios:
        gm = 1.0
        for r in ratios:
            gm *= r ** (1.0 / len(ratios))
        print("\nGeometric mean of cuDNN time / flashc time over %d cells: %.2f; %d at 1.0 or above." % (
            len(ratios), gm, sum(r >= 1.0 for r in ratios)))


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: perf_md.py compare.json COMMIT [--grid]")
    data, commit = json.load(open(sys.argv[1])), sys.argv[2]
    if "--grid" in sys.argv[3:]:
        return grid(data)
    meta = data["meta"]
    ceiling = meta.get("read_ceiling_gbps")
    print(f"Device: {meta['device']}, torch {meta['torch']}, cuDNN {meta['cudnn']}; {meta['timing']}; "
          f"streaming-read ceiling {ceiling:.0f} GB/s (same run).\n")
    print("| date | shape | flashc | % of read ceiling | cuDNN | flash | cuDNN time / flashc | flash time / flashc | commit |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in data["rows"]:
        ours, kind = row.get("flashc"), row["kind"]
        pct = f"{100 * ours['gbps'] / ceiling:.0f}%" if kind == "decode" and ours and ours.get("gbps") else ""
        print(f"| {meta['date']} | {row['name']} | {fmt_side(ours, kind)} | {pct} | {fmt_side(row.get('cudnn'), kind)} | "
              f"{fmt_side(row.get('flash'), kind)} | {ratio(row.get('cudnn'), ours)} | {ratio(row.get('flash'), ours)} | {commit} |")


if __name__ == "__main__":
    main()
