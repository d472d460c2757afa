"""decode_splits.py — flashc's paged decode at each forced split count beside the automatic one and cuDNN's, on the GPU.

usage: python3 bench/decode_splits.py [--shapes b8-32k,b32-8k,...] [--splits 0,1,2,...] [--samples N] [--kv-fp8] [--dense]
                                     [--warm]

Same inputs, timing and anchor as compare.py's decode set (paged page 16, 32 / 8 heads, d 128; CUDA-graph
replay; torch SDPA cuDNN on the dense copy), one process. Where the automatic choice (splits 0) reads slower
than a forced one, the planner (src/plan.c) is what to change; where no split count reaches the anchor,
the kernel is. --dense: flashc reads the dense copy that cuDNN reads ((b, s_k, h_k, d), no page table), so the two
kernels read the same bytes in the same layout. Each figure is timed in turns with a read-only pass over 256 MB (an
L2 flush: a serving engine runs decode after other kernels; after its own pass flashc read 1-5% faster from the L2's
leftovers, cuDNN not: PERF.md step 204); --warm times each alone, back to back, as before.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as C  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="b1-32k,b8-8k,b8-32k,b32-1k,b32-8k,b128-1k,b128-32k")
    ap.add_argument("--splits", default="0,1,2,3,4,6,8,12,16")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--kv-fp8", action="store_true", help="flashc reads an e4m3 cache (compare.py --kv-fp8)")
    ap.add_argument("--dense", action="store_true", help="flashc reads cuDNN's dense K/V instead of the paged cache")
    ap.add_argument("--warm", action="store_true", help="time each alone, back to back (the L2 keeps what it can)")
    args = ap.parse_args()
    junk = torch.ones(128 * 2**20, dtype=torch.bfloat16, device="cuda")
    flush = [lambda: junk.sum()]

    def time_calls(calls):  # ms of one call, cold (in turns with the flush) unless --warm
        return C.time_passes([calls] if args.warm else [calls, flush], args.samples, 5, True)[0][0]

    gen = torch.Generator(device="cuda").manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    splits = [int(x) for x in args.splits.split(",")]
    print("shape      KV MB  cuDNN us  " + "  ".join("s=%-6s" % (x if x else "auto") for x in splits))
    for name in args.shapes.split(","):
        b, ctx = name[1:].split("-")
        p = dict(b=int(b), s_k=int(ctx[:-1]) * 1024, h_q=32, h_k=8, d=128, page=16)
        kv_bytes = 2 * p["b"] * p["s_k"] * p["h_k"] * p["d"] * 2
        sets = C.make_decode_inputs(p, C.num_sets(kv_bytes, l2), gen)
        fp8 = {}
        if args.kv_fp8:
            if args.dense:
                sys.exit("--dense with --kv-fp8: cuDNN's copy is bf16")
            for s in sets:
                s["kc"], s["vc"] = s["kc"].to(torch.float8_e4m3fn), s["vc"].to(torch.float8_e4m3fn)
            one = torch.ones(1, device="cuda", dtype=torch.float32)
            fp8 = dict(k_descale=one, v_descale=one)
        anchor = time_calls([C.sdpa_call(C.SDPBackend.CUDNN_ATTENTION, s["q"], s["kd"], s["vd"], False, "gqa")
                             for s in sets])
        cells = []
        for n in splits:
            if args.dense:
                calls = [lambda s=s, n=n: C.flashc.flash_attn_with_kvcache(
                    s["q"], s["kd"], s["vd"], cache_seqlens=s["seqlens"], num_splits=n, **fp8) for s in sets]
            else:
                calls = [lambda s=s, n=n: C.flashc.flash_attn_with_kvcache(
                    s["q"], s["kc"], s["vc"], cache_seqlens=s["seqlens"], block_table=s["table"], num_splits=n, **fp8)
                    for s in sets]
            ms = time_calls(calls)
            cells.append("%7.1f" % (ms * 1e3))
        print("%-9s %6.0f  %8.1f  %s" % (name, kv_bytes / 2**20, anchor * 1e3, "  ".join(cells)))
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
