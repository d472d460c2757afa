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

// The max / sum of a thread's n scores of a row as a tree of depth log2 n, not a chain of n: each FMNMX / FADD of a chain
// waits on the one before (ncu's "wait" stall at d 128 512 was 1.77 cycles an instruction against cuDNN's 0.91; PERF.md
// steps 190, 192). The sum's order is the tree's.
template <int N> __device__ __forceinline__ float tree_max(float *v) {
#pragma unroll
    for (int w = 1; w < N; w *= 2)
#pragma unroll
        for (int i = 0; i + w < N; i += 2 * w) v[i] = fmaxf(v[i], v[i + w]);
    return v[0];
}
template <int N> __device__ __forceinline__ float tree_sum(float *v) {
#pragma unroll
    for (int w = 1; w < N; w *= 2)
#pragma unroll
        for (int i = 0; i + w < N; i += 2 * w) v[i] += v[i + w];
    return v[0];
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
    float gm[NF / G]; // each group's max
#pragma unroll
    for (int q = 0; q < NF; q += G) {
        float a = -INFINITY;
        if (q < live) {
            float t[2 * G];
#pragma unroll
            for (int i = 0; i < G; i++) t[2 * i] = s[q + i][2 * half], t[2 * i + 1] = s[q + i][2 * half + 1];
            a = tree_max<2 * G>(t);
        }
        gm[q / G] = a;
    }
    float mx = fmaxf(st.m, quad_max(tree_max<NF / G>(gm)) * mul);
    if (LAZY && mx - st.m <= FC_RESCALE_LOG2) mx = st.m; // (-inf - -inf is NaN: the first block moves)
    return mx;
}

template <int NF, bool DEAD_ZERO = false>
__device__ __forceinline__ float softmax_exp(row_softmax &st, float (*s)[4], int half, float mx, float mul = 1.0f,
                                             int live = NF) {
    constexpr int G = softmax_group(NF);
    float base = mx == -INFINITY ? 0.0f : mx;   // all masked so far: keep exp2 away from -inf - -inf
    float rescale = fast_exp2(st.m - base);     // 0 when the old max was -inf
    float gs[NF / G]; // each group's sum
#pragma unroll
    for (int q = 0; q < NF; q += G) {
        float a = 0.0f;
        if (q < live) {
            float t[2 * G];
#pragma unroll
            for (int i = 0; i < G; i++) {
                int f = q + i;
                t[2 * i] = s[f][2 * half] = fast_exp2(fmaf(s[f][2 * half], mul, -base));
                t[2 * i + 1] = s[f][2 * half + 1] = fast_exp2(fmaf(s[f][2 * half + 1], mul, -base));
            }
            a = tree_sum<2 * G>(t);
        } else if (!DEAD_ZERO) {
#pragma unroll
            for (int f = q; f < q + G; f++) s[f][2 * half] = s[f][2 * half + 1] = 0.0f;
        }
        gs[q / G] = a;
    }
    st.l = st.l * rescale + tree_sum<NF / G>(gs);
    st.m = mx;
    return rescale;
}

template <int NF, bool LAZY = false, bool DEAD_ZERO = false>
__device__ __forceinline__ float softmax_update(row_softmax &st, float (*s)[4], int half, float mul = 1.0f, int live = NF) {
    return softmax_exp<NF, DEAD_ZERO>(st, s, half, softmax_max<NF, LAZY>(st, s, half, mul, live), mul, live);
}

// Final row sum and natural-log lse; 0 sum (nothing visible, no sink) gives lse = -inf. FAST: log2 by the SFU
// (MUFU.LG2, absolute error ~1e-7 here: sum >= 1, the max key's own term) instead of log2f's ~20 dependent
// instructions, where the sum is on a tile's critical path (the wgmma prefill's epilogue).
template <bool FAST = false>
__device__ __forceinline__ float softmax_finish(const row_softmax &st, float *sum_out) {
    float sum = quad_sum(st.l);
    *sum_out = sum;
    if (sum == 0.0f) return -INFINITY;
    return (st.m + (FAST ? __log2f(sum) : log2f(sum))) * 0.6931471805599453f;
}
