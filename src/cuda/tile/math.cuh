// math.cuh — fast exp2, tanh, division by a divisor known on the host, and reductions across the 4 lanes that
// share an mma accumulator row.
#pragma once

// 2^x on the SFU (ex2.approx, flush-to-zero): 2^-inf = 0, about 2 ulp.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// log2 and 1 / x on the SFU alone (lg2 / rcp .approx.ftz): none of __log2f's and __fdividef's range fix-ups around
// them (a compare, a scale by 2^24 and its undoing: ~6 instructions each), for x in the normal range (a softmax
// row's sum: 0 is handled before, else at least 1, its largest key's own term). About 2 ulp.
__device__ __forceinline__ float fast_log2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float fast_rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// tanh on the SFU (tanh.approx, sm_75+), max relative error about 2^-11.
__device__ __forceinline__ float fast_tanh(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// max(a, b) that returns NaN when either is NaN (fmaxf drops a NaN): for the reductions that must carry one.
__device__ __forceinline__ float fmax_nan(float a, float b) {
    float y;
    asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
    return y;
}

// In an m16n8 accumulator, the 4 lanes of a quad (lane / 4 equal) hold one row: reduce across them.
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Whole-warp reductions.
__device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// x / d for 0 <= x < 2^31 and 1 <= d < 2^31 as a multiply, its constants made once on the host (fastdiv_of):
// with l = ceil(log2 d), m = ceil(2^(31 + l) / d) < 2^32, x / d = umulhi(x, m) >> (l - 1), the error of m
// (< 1) adding less than x / 2^(31 + l) < 1 / d to x / d; d = 1 has m = 0 (x itself). A runtime 32-bit
// division is ~20 dependent instructions; the tile walk took several per tile (PERF.md step 71).
struct fastdiv {
    unsigned d, m, s;
};
static inline __host__ fastdiv fastdiv_of(unsigned d) {
    fastdiv f = {d, 0, 0};
    if (d > 1) {
        unsigned l = 0;
        while ((1ull << l) < d) l++;
        f.m = (unsigned)(((1ull << (31 + l)) + d - 1) / d);
        f.s = l - 1;
    }
    return f;
}
__device__ __forceinline__ unsigned div_of(unsigned x, const fastdiv &f) { return f.m ? __umulhi(x, f.m) >> f.s : x; }
__device__ __forceinline__ unsigned mod_of(unsigned x, const fastdiv &f) { return x - div_of(x, f) * f.d; }
