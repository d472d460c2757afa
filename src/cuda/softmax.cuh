// softmax.cuh — online softmax over mma accumulators: each thread owns 2 rows (lane/4 and lane/4 + 8).
#pragma once
#include <math.h>

#include "tile/math.cuh"

// Running state of one row, in the log2 domain: scores s are x * log2(e), so p = 2^(s - m).
struct row_softmax {
    float m;   // running max (-inf: nothing seen yet)
    float l;   // this thread's share of the running sum of 2^(s - m)
};

__device__ __forceinline__ row_softmax softmax_init(bool has_sink, float sink_log2) {
    // A sink is a key with score sink and a zero value: it starts the sum at 2^(sink - sink) = 1,
    // counted by one lane of the quad so the quad sum at the end sees it once.
    row_softmax r;
    r.m = has_sink ? sink_log2 : -INFINITY;
    r.l = has_sink && (threadIdx.x % 4 == 0) ? 1.0f : 0.0f;
    return r;
}

// Fold a block of NF accumulator fragments (this thread's 2*NF scores of the row, half = 0 or 1) into
// the state: new max, rescale of the old sum (returned, to rescale the output too), p = 2^(s - m).
// The scores are s * mul (mul > 0): raw dot products with mul = scale * log2(e) cost one FFMA each
// (FlashAttention's fold of the scale into exp2); mul = 1 for scores already scaled and masked.
// LAZY (FlashAttention-4): the running max moves only when a block's max passes it by more than
// FC_RESCALE_LOG2 (log2 units); below that the old max stays, p = 2^(s - m) is at most 2^FC_RESCALE_LOG2
// (fine in fp32 and in P's bf16), and the rescale is exactly 1, which lets the caller skip O's.
#define FC_RESCALE_LOG2 8.0f
// live: fragments live and up are hidden from every lane of the warp (a masked block's end, warp-uniform): their
// p is 0 without an exp2, in groups of softmax_group(NF) fragments (a group counts as live if its first fragment is).
// DEAD_ZERO: the caller has put 0 in those groups' scores already (wg_mask_raw); else they are written here, by
// moves that ptxas issues for every group before its branch (~110 instructions a block at d 64, PERF.md step 108).
// (In groups of four fragments: a uniform branch around each group that ptxas keeps as a branch; a test per
// fragment became predicates on every instruction, which issue all the same.)
__host__ __device__ constexpr int softmax_group(int nf) { return nf % 4 == 0 ? 4 : nf % 2 == 0 ? 2 : 1; }

// softmax_update in two halves, for a caller that runs something between them (the serial wgmma loop's turn,
// fwd_wgmma.cuh): softmax_max, the block's new running max (its live fragments' scores, the quad's, the old max;
// LAZY's threshold); softmax_exp, the rescale of the old sum and p = 2^(s - m) against that max.
template <int NF, bool LAZY = false>
__device__ __forceinline__ float softmax_max(const row_softmax &st, float (*s)[4], int half, float mul = 1.0f, int live = NF) {
    constexpr int G = softmax_group(NF);
    float mx = -INFINITY;
#pragma unroll
    for (int q = 0; q < NF; q += G)
        if (q < live)
#pragma unroll
            for (int f = q; f < q + G; f++) mx = fmaxf(mx, fmaxf(s[f][2 * half], s[f][2 * half + 1]));
    mx = fmaxf(st.m, quad_max(mx) * mul);
    if (LAZY && mx - st.m <= FC_RESCALE_LOG2) mx = st.m; // (-inf - -inf is NaN: the first block moves)
    return mx;
}

template <int NF, bool DEAD_ZERO = false>
__device__ __forceinline__ float softmax_exp(row_softmax &st, float (*s)[4], int half, float mx, float mul = 1.0f,
                                             int live = NF) {
    constexpr int G = softmax_group(NF);
    float base = mx == -INFINITY ? 0.0f : mx;   // all masked so far: keep exp2 away from -inf - -inf
    float rescale = fast_exp2(st.m - base);     // 0 when the old max was -inf
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < NF; q += G) {
        if (q < live) {
#pragma unroll
            for (int f = q; f < q + G; f++) {
                s[f][2 * half] = fast_exp2(fmaf(s[f][2 * half], mul, -base));
                s[f][2 * half + 1] = fast_exp2(fmaf(s[f][2 * half + 1], mul, -base));
                sum += s[f][2 * half] + s[f][2 * half + 1];
            }
        } else if (!DEAD_ZERO) {
#pragma unroll
            for (int f = q; f < q + G; f++) s[f][2 * half] = s[f][2 * half + 1] = 0.0f;
        }
    }
    st.l = st.l * rescale + sum;
    st.m = mx;
    return rescale;
}

template <int NF, bool LAZY = false, bool DEAD_ZERO = false>
__device__ __forceinline__ float softmax_update(row_softmax &st, float (*s)[4], int half, float mul = 1.0f, int live = NF) {
    return softmax_exp<NF, DEAD_ZERO>(st, s, half, softmax_max<NF, LAZY>(st, s, half, mul, live), mul, live);
}

// A row's natural-log lse from its final sum; 0 sum (nothing visible, no sink) gives -inf. FAST: log2 by the SFU
// alone (fast_log2: absolute error ~1e-7 here, sum >= 1, the max key's own term) instead of log2f's ~20 dependent
// instructions, where the sum is on a tile's critical path (the wgmma prefill's epilogue).
template <bool FAST = false>
__device__ __forceinline__ float softmax_lse(const row_softmax &st, float sum) {
    if (sum == 0.0f) return -INFINITY;
    return (st.m + (FAST ? fast_log2(sum) : log2f(sum))) * 0.6931471805599453f;
}

// Final row sum (across the row's four lanes) and its lse.
__device__ __forceinline__ float softmax_finish(const row_softmax &st, float *sum_out) {
    float sum = quad_sum(st.l);
    *sum_out = sum;
    return softmax_lse(st, sum);
}
