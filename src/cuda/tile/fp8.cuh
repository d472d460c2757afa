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
__device__ __forceinline__ uint64_t wgmma_desc_k64(const char *tile, int kk) { return wgmma_desc(tile + kk * 32, 16, 512, 2); }

// V (BN keys x DV features, e4m3, as a TMA box lands: byte f of key k at sw128_offset(k, f / 16, BN) + f % 16)
// into Vt (DV rows of BN keys, K-major: key position p of feature f at sw128_offset(f, p / 16, DV) + p % 16
// for wgmma_desc_k; BN 64: sw64_offset(f, p / 16) + p % 16 for wgmma_desc_k64), a step's keys in P's fragment
// order; by 128 threads, this one t. Each takes 4 keys x 4 features at a time (four 4-byte reads, a byte
// transpose, four 4-byte writes): the same 4 keys (key quad lq) in every round and features f0 + FSTEP r.
// Lanes: lq % 4 = lane % 4, lq / 4 % 2 = lane / 16, feature quad lane / 4 % 4 (a warp's reads and writes each
// on 16 banks, two lanes a bank); the rest of lq and f0 from the warp. So a write's swizzle is the same in
// every round (rows f0 + j + FSTEP r, FSTEP a multiple of 8 rows) and a read's is an XOR with a constant:
// one instruction per address. (The generic index math, ~90 instructions a round on the producer's warps,
// held the FP8 prefill at 0.7x of bf16: PERF.md step 60.)
template <int BN, int DV>
__device__ __forceinline__ void transpose_v_e4m3(const char *v, char *vt, int t) {
    static_assert((BN == 64 || BN == 128) && DV % 64 == 0, "Vt rows: 64 bytes (64-byte swizzle) or one 128-byte atom");
    constexpr int WQ = BN / 32;                   // warps sharing a feature range (key quads 8 per lane pattern)
    constexpr int ROUNDS = (BN / 4) * (DV / 4) / 128, FSTEP = 64 / WQ, CS = FSTEP / 16; // CS: chunks a round
    int lane = t % 32, warp = t / 32;
    int lq = (lane & 3) | (lane >> 4 & 1) << 2 | warp % WQ << 3;     // logical key quad: positions 4 lq .. + 3
    int fq = lane >> 2 & 3, f0 = 4 * fq + 16 * (warp / WQ);           // first feature (round 0)
    int w = lq % 8, k0 = 32 * (lq / 8) + 16 * (w / 4) + 2 * (w % 4);  // its keys: k0, + 1, + 8, + 9
    const int keys[4] = {k0, k0 + 1, k0 + 8, k0 + 9};
    // read j of round r: chunk c = f0 / 16 + CS r (c / 8: the atom, after BN rows of 128 bytes), swizzled by
    // key % 8 into address bits 4-6, which the row's base leaves zero (the tile 1024-byte aligned): so the
    // swizzle of round r is an XOR of the base with 16 (CS r % 8)
    uint32_t rd[4], wr[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
        rd[j] = (smem_u32(v) + keys[j] * 128 + 4 * fq) | 16u * (uint32_t)((f0 / 16) ^ (keys[j] & 7));
    // write j of round r: row f0 + j + FSTEP r, the chunk of positions 4 lq .. (swizzled by the row, the same in every round)
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int row = f0 + j, c = lq / 4;
        wr[j] = smem_u32(vt) + (BN == 64 ? row * 64 + ((c ^ (row >> 1)) & 3) * 16 : row * 128 + ((c ^ row) & 7) * 16) +
                4 * (lq % 4);
    }
#pragma unroll
    for (int r = 0; r < ROUNDS; r++) {
        uint32_t x[4];
        const uint32_t atom = (uint32_t)(CS * r / 8) * BN * 128, cx = 16u * (uint32_t)(CS * r % 8);
#pragma unroll
        for (int j = 0; j < 4; j++) x[j] = lds_u32((rd[j] ^ cx) + atom);
        uint32_t t0 = __byte_perm(x[0], x[1], 0x5140), t1 = __byte_perm(x[2], x[3], 0x5140); // features 0, 1
        uint32_t t2 = __byte_perm(x[0], x[1], 0x7362), t3 = __byte_perm(x[2], x[3], 0x7362); // features 2, 3
        const uint32_t out[4] = {__byte_perm(t0, t1, 0x5410), __byte_perm(t0, t1, 0x7632), __byte_perm(t2, t3, 0x5410),
                                 __byte_perm(t2, t3, 0x7632)};
#pragma unroll
        for (int j = 0; j < 4; j++) sts_u32(wr[j] + FSTEP * r * (BN == 64 ? 64 : 128), out[j]);
    }
}
