#!/usr/bin/env python3
"""perf_md.py — turn bench/compare.py's JSON into the Markdown rows docs/PERF.md keeps."""
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


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: perf_md.py compare.json COMMIT")
    data, commit = json.load(open(sys.argv[1])), sys.argv[2]
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
