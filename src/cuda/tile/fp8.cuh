// fp8.cuh — the FP8 prefill's P·V operands: P rounded to e4m3 as wgmma's k32 A fragments, V transposed to K-major.
#pragma once
#include <stdint.h>

#include "wgmma.cuh"

// An 8-bit wgmma wants both operands K-major, and its register A fragment (a k-step of 32 keys) gives a
// thread keys 4(l%4) .. + 3 and 16 + 4(l%4) .. + 3 of its rows, where the S accumulator it holds has keys
// 8i + 2(l%4), + 1 (i = 0 .. 3). P·V sums over keys, so any order of a step's keys serves if P and V use
// the same: logical position 4w + j of a step (w = 0 .. 7) is physical key 16(w / 4) + 2(w % 4) + {0, 1, 8, 9}[j],
// the keys the thread already holds. pack_p_e4m3 fills the fragments from the accumulator in place;
// transpose_v_e4m3 writes V's keys in that order.

// Four floats rounded to nearest (saturating) e4m3, a in the lowest byte.
__device__ __forceinline__ uint32_t pack4_e4m3(float a, float b, float c, float d) {
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(b), "f"(a));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(d), "f"(c));
    return (uint32_t)lo | (uint32_t)hi << 16;
}

// P (this thread's scores after softmax, S's accumulator layout: s[i][e] is row l/4 + 8(e/2), key
// 8i + 2(l%4) + e%2 of its warp's 16 rows) as the A fragments of BN / 32 k-steps of 32 keys.
template <int BN>
__device__ __forceinline__ void pack_p_e4m3(const float (*s)[4], uint32_t (*pa)[4]) {
#pragma unroll
    for (int kk = 0; kk < BN / 32; kk++) {
        const float(*x)[4] = s + 4 * kk;
        pa[kk][0] = pack4_e4m3(x[0][0], x[0][1], x[1][0], x[1][1]);
        pa[kk][1] = pack4_e4m3(x[0][2], x[0][3], x[1][2], x[1][3]);
        pa[kk][2] = pack4_e4m3(x[2][0], x[2][1], x[3][0], x[3][1]);
        pa[kk][3] = pack4_e4m3(x[2][2], x[2][3], x[3][2], x[3][3]);
    }
}

// A K-major operand of 64-byte rows (64 keys of e4m3): the 64-byte swizzle, chunk c (0 .. 3) of row r at
// r * 64 + (c ^ (r / 2 % 4)) * 16, 8 rows a 512-byte unit (the tile 512-byte aligned). k-step kk (32 bytes).
__device__ __forceinline__ uint32_t sw64_offset(int row, int chunk) {
    return (uint32_t)row * 64u + (uint32_t)((chunk ^ (row >> 1)) & 3) * 16u;
}
__device__ __forceinline__ uint64_t wgmma_desc_k64(const char *tile, int kk) {
    return wgmma_desc_plus(wgmma_desc(tile, 16, 512, 2), (uint32_t)(kk * 32));
}

// V (BN keys x DV features, e4m3, as a TMA box lands: byte f of key k at sw128_offset(k, f / 16, BN) + f % 16)
// into Vt (DV rows of BN keys, K-major: key position p of feature f at sw128_offset(f, p / 16, DV) + p % 16
// for wgmma_desc_k; BN 64: sw64_offset(f, p / 16) + p % 16 for wgmma_desc_k64), a step's keys in P's fragment
// order (positions 4q .. 4q + 3 of a 16-key chunk: its keys 2q, 2q + 1, 2q + 8, 2q + 9); by 128 threads, this
// one t. A warp moves 16 keys x 32 features a round: ldmatrix.trans on 16-bit units (matrices 0, 1: keys
// 0-7, 8-15 of features 16U .. 16U + 15; 2, 3: the next 16 features) gives lane l (u = l / 4, q = l % 4) keys
// 2q, 2q + 1 of features 2u, 2u + 1 in r0 and keys 2q + 8, 2q + 9 in r1; two byte permutes make the words of
// features 2u and 2u + 1 in P's order, and stmatrix writes them as 8 rows (features) of 16 bytes. The rows
// of a stored matrix are features 2u + (u >= 4) (and 2u + (u < 4)), so their swizzled chunks differ: no bank
// conflicts (reads: 8 consecutive keys, likewise). A warp keeps its features and steps its keys: the read
// address moves by 16 rows, the write's swizzle by an XOR (past 128 keys, to the next atom of DV rows). 16 shared
// accesses a thread a 16 KB block where 4-byte loads and stores took 64 (PERF.md step 62).
template <int BN, int DV>
__device__ __forceinline__ void transpose_v_e4m3(const char *v, char *vt, int t) {
    static_assert((BN == 64 || BN == 128 || ((BN == 192 || BN == 256) && DV >= 128)) && DV % 64 == 0,
                  "Vt rows: 64 bytes (64-byte swizzle) or 128-byte atoms (past 128 keys: d_v >= 128, a warp's keys all)");
    constexpr int NU = DV / 32, NC = BN / 16;                      // 32-feature groups, 16-key chunks
    constexpr int GROUPS = NU >= 4 ? NU / 4 : 1, CHUNKS = NU >= 4 ? NC : NC / 2; // a warp's share
    constexpr uint32_t ROW = BN == 64 ? 64 : 128;                  // Vt's row bytes
    int lane = t % 32, warp = t / 32, i = lane / 8, j = lane % 8;
    int u0 = NU >= 4 ? warp : warp % 2, c0 = NU >= 4 ? 0 : warp / 2 * CHUNKS; // first group, first key chunk
    int chunk = 2 * u0 + i / 2, key = 16 * c0 + 8 * (i % 2) + j;  // this lane's row of matrix i (read)
    uint32_t rd = smem_u32(v) + (uint32_t)((chunk >> 3) * BN + key) * 128u + (uint32_t)((chunk & 7) ^ j) * 16u;
    int f = 16 * chunk + 2 * j + ((i % 2) ^ (j >= 4));             // this lane's row of matrix i (write)
    uint32_t wr = smem_u32(vt) + (uint32_t)f * ROW +
                  (BN == 64 ? (uint32_t)((c0 ^ (f >> 1)) & 3) * 16u : (uint32_t)((c0 ^ f) & 7) * 16u);
    const uint32_t lo = lane < 16 ? 0x6420u : 0x7531u, hi = lane < 16 ? 0x7531u : 0x6420u; // even / odd feature
    static_assert(CHUNKS % 2 == 0, "two rounds at a time");
#pragma unroll
    for (int g = 0; g < GROUPS; g++)
#pragma unroll
        for (int c = 0; c < CHUNKS; c += 2) { // two loads in flight before the permutes (the loads' latency)
            uint32_t r[2][4], w[4];
#pragma unroll
            for (int h = 0; h < 2; h++) ldsm_x4_trans(rd + (uint32_t)(g * BN * 128 + (c + h) * 16 * 128), r[h]);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                w[0] = __byte_perm(r[h][0], r[h][1], lo), w[1] = __byte_perm(r[h][0], r[h][1], hi);
                w[2] = __byte_perm(r[h][2], r[h][3], lo), w[3] = __byte_perm(r[h][2], r[h][3], hi);
                uint32_t atom = (uint32_t)((c + h) >> 3) * (uint32_t)DV * 128u; // keys 128 .. : the next atom
                stsm_x4(((wr + (uint32_t)g * 128u * ROW) ^ (16u * (uint32_t)((c + h) & 7))) + atom, w);
            }
        }
}
