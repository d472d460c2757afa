// mask.cuh — scores of a tile row: scale, softcap, ALiBi, causal/window/length mask (FlashAttention's Mask).
#pragma once
#include <math.h>

#include "internal.h"
#include "tile/math.cuh"

#define FC_LOG2E 1.4426950408889634f

// What a thread needs to turn raw dot products of its row into log2-domain scores.
struct row_scores {
    int r;            // query row within the sequence (the diagonal sits at key r + off)
    float slope;      // ALiBi slope * log2(e), 0 without ALiBi
};

// Per-problem score constants: s = dot * mul (no softcap), or tanh(dot * mul) * cap (softcap).
struct score_consts {
    float mul, cap;   // cap == 0: no softcap
    int off, s_k;     // off = s_k - s_q of the sequence
    int wl, wr;       // resolved window, -1 = unbounded
};

__device__ __forceinline__ score_consts score_consts_of(const fc_problem &p, int s_q, int s_k) {
    score_consts c;
    if (p.softcap > 0.0f) {
        c.mul = p.scale / p.softcap;
        c.cap = p.softcap * FC_LOG2E;
    } else {
        c.mul = p.scale * FC_LOG2E;
        c.cap = 0.0f;
    }
    c.off = s_k - s_q;
    c.s_k = s_k;
    // A window reaching past every key of the sequence is no window: as -1 it cannot overflow diag +- w
    // (diag = r + off lies in [s_k - s_q, s_k - 1]; api.c keeps s_q + s_k < 2^31).
    c.wl = p.window_left >= s_k ? -1 : p.window_left;
    c.wr = p.window_right >= s_q ? -1 : p.window_right;
    return c;
}

// Whether the scores are plain scaled dot products (no softcap, no ALiBi, a positive multiplier: the softmax folds
// the scale into its exp2). VOTE (fp8 kernels, whose multiplier holds descales read from memory): by a warp vote,
// which ptxas takes as warp-uniform; a branch on the value itself put the FP8 prefill's block loops' ring and
// descriptor arithmetic on the vector datapath (d 128: 24 R2UR a block, 103 spill instructions; PERF.md step 125).
// The multiplier is the same in every thread of a tile, so the vote is the value.
template <bool VOTE>
__device__ __forceinline__ bool plain_scores(const fc_problem &p, const score_consts &c) {
    bool positive = VOTE ? __all_sync(0xffffffffu, c.mul > 0.0f) : c.mul > 0.0f;
    return c.cap == 0.0f && !p.alibi && positive;
}

__device__ __forceinline__ bool key_visible(const score_consts &c, int r, int j) {
    int diag = r + c.off;
    return j < c.s_k && (c.wl < 0 || j >= diag - c.wl) && (c.wr < 0 || j <= diag + c.wr);
}

// key_visible for a whole row, relative to key j0: key j0 + c is visible iff lo <= c <= hi (both clamped
// at -1, so a check of c >= 0 against them never overflows). Hoisted out of a block's per-score loop.
__device__ __forceinline__ void visible_range(const score_consts &c, int r, int j0, int *lo, int *hi) {
    int diag = r + c.off, last = c.s_k - 1;
    if (c.wr >= 0) last = min(last, diag + c.wr);
    *lo = c.wl >= 0 ? max(diag - c.wl - j0, -1) : -1;
    *hi = max(last - j0, -1);
}

// Does any key of block [j0, j0 + bn) fall outside the visible range of some row in [r_lo, r_hi)?
// (Only such blocks pay for per-element masking.)
__device__ __forceinline__ bool block_needs_mask(const score_consts &c, int r_lo, int r_hi, int j0, int bn) {
    int j1 = j0 + bn - 1;
    if (j1 >= c.s_k) return true;
    if (c.wr >= 0 && j1 > r_lo + c.off + c.wr) return true;
    if (c.wl >= 0 && j0 < r_hi - 1 + c.off - c.wl) return true;
    return false;
}

// Turn a raw dot product of key j into its log2-domain score (-inf when masked).
template <bool MASK>
__device__ __forceinline__ float score_of(const score_consts &c, const row_scores &rs, float dot, int j) {
    float s = c.cap > 0.0f ? tanhf(dot * c.mul) * c.cap : dot * c.mul; // accurate tanh: see PERF.md before approximating
    if (rs.slope != 0.0f) s -= rs.slope * fabsf((float)(rs.r + c.off - j));
    if (MASK && !key_visible(c, rs.r, j)) s = -INFINITY;
    return s;
}
