#!/usr/bin/env python3
# make_seeds.py — writes the seed corpus of fuzz_api (tests/fuzz/corpus/): hand-written valid cases,
# encoded in the order fuzz_api.c decodes its bytes (pick(n) = one byte < n, range(lo, hi) = one byte
# v - lo for spans up to 256). Layout bytes 0 are contiguous views. Run from anywhere.
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
BF16, FP16, FP32 = 0, 1, 2
DIMS = {64: 0, 128: 1, 96: 2, 192: 3, 256: 4}


def head(threads, op):
    return [threads - 1, op]


def length(n):  # read_len: pick(16) < 13, then range(0, typical)
    return [0, n]


def attn(dtype, b, h_k, group, d, d_v, q_varlen, kv, s_new_code, s_q, q_lens, k_lens, lse, seqused,
         kv_extra, rotary=None, window=(0,), scale=(0,), softcap=(0,), alibi=0, sinks=0, splits=0,
         layouts=None, seed=12345):
    """kv_extra: dense [slack]; varlen [slack]; paged [page_size_code, extra_pages, mode, unused, extra]."""
    lay = layouts or {}
    by = list(struct.pack("<I", seed))
    by += [dtype, 0, b - 1, h_k - 1, group - 1, DIMS[d]]
    by += [1] if d_v == d else [0, DIMS[d_v]]
    by += [q_varlen, kv, s_new_code] + length(s_q)
    for i in range(b):
        if q_varlen:
            by += length(q_lens[i])
        by += length(k_lens[i])
    n_q = 3 if q_varlen else 4
    if q_varlen:
        by += [0] + lay.get("q", [0]) + lay.get("out", [0]) + [0]  # total_q slack, q, out, cu_seqlens_q
    else:
        by += lay.get("q", [0]) + lay.get("out", [0])
    by += [1, 0] if lse else [0]
    by += [seqused]
    if kv == 0:
        by += kv_extra + lay.get("k", [0]) + lay.get("v", [0])
        if seqused or s_new_code >= 4:
            by += [0]
    elif kv == 1:
        by += kv_extra + lay.get("k", [0]) + lay.get("v", [0]) + [0]
        if seqused == 1:
            by += [0]
    else:
        ps, extra_pages, mode, unused, extra = kv_extra
        by += [ps, extra_pages, mode, unused, extra] + lay.get("k", [0]) + lay.get("v", [0]) + [0, 0]
    if s_new_code >= 4:
        by += [0, 0]  # k_new, v_new
    by += [1]  # max_seqlen: the longest
    if rotary:
        interleaved, half_minus_1, f32 = rotary
        by += [1 if interleaved else 2, half_minus_1, 1, f32, 0, 1]
    else:
        by += [0]
    by += list(window) + list(scale) + list(softcap)
    by += [0, 0]  # alibi and sink fill modes: small finite values
    by += [alibi, 0] if alibi else [0]
    by += [1, 0] if sinks else [0]
    by += [splits, 0]  # num_splits, then no hostile edits
    return bytes(by)


def merge(n, rows, h, dv_code, lse_mode, op_dt, out_dt, lse, seed=777):
    by = list(struct.pack("<I", seed))
    by += [0, 1, n - 1, 1, rows, h - 1, dv_code, lse_mode, op_dt, out_dt, 0, 0, 0]
    by += [1, 0] if lse else [0]
    by += [0]
    return bytes(by)


SEEDS = {
    # dense bf16, GQA 2:4, causal, lse
    "dense_causal_bf16": head(1, 0) + list(attn(BF16, 2, 2, 2, 64, 64, 0, 0, 0, 5, None, [37, 70], 1, 0, [1],
                                                window=(2,))),
    # varlen queries over a paged fp16 cache, two new tokens appended with interleaved rotary, sinks
    "paged_append_rotary_fp16": head(2, 1) + list(attn(FP16, 2, 1, 4, 128, 128, 1, 2, 5, 0, [2, 3], [20, 33], 1, 1,
                                                       [0, 1, 0, 0, 1], rotary=(1, 31, 1), sinks=1)),
    # varlen q and k in fp32, sliding window (8, 3), ALiBi per head, softcap 30, three splits, d 128 / d_v 64
    "varlen_window_alibi_fp32": head(2, 2) + list(attn(FP32, 3, 2, 1, 128, 64, 1, 1, 0, 0, [4, 0, 9], [30, 5, 90], 1, 0,
                                                       [1], window=(3, 8, 3), softcap=(4,), alibi=1, splits=3)),
    # decode: one query over 150 keys, four splits, GQA 4, d 256, dense seqused
    "decode_splits_d256": head(3, 3) + list(attn(BF16, 2, 1, 4, 256, 256, 0, 0, 0, 1, None, [150, 3], 0, 1, [0],
                                                 splits=4)),
    # padded and permuted strides, fp16, d 96, window right only
    "dense_strided_fp16": head(1, 4) + list(attn(FP16, 1, 3, 1, 96, 96, 0, 0, 0, 7, None, [40], 1, 0, [2],
                                                 window=(6, 5), layouts={"q": [4, 1, 2, 3], "k": [5], "v": [6, 1],
                                                                          "out": [4, 0, 0, 1]})),
    # page size 1, shuffled pages, causal
    "paged_pagesize1": head(1, 5) + list(attn(BF16, 2, 2, 1, 64, 64, 0, 2, 0, 3, None, [9, 4], 1, 1, [1, 1, 0, 0, 2],
                                              window=(2,))),
    # fc_merge_states: 3 partials with some -inf, fp32 in, bf16 out, lse
    "merge_bf16": head(1, 12) + list(merge(3, 5, 2, 0, 1, 0, 1, 1)),
    # fc_merge_states: all partials -inf, fp16 out, d_v 3
    "merge_all_empty": head(2, 13) + list(merge(2, 4, 1, 2, 2, 1, 2, 0)),
    # NULL arguments and a thread count
    "null_args": head(1, 15) + [0, 1],
}

os.makedirs(OUT, exist_ok=True)
for name, data in SEEDS.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes(data))
print("wrote %d seeds to %s" % (len(SEEDS), OUT))
