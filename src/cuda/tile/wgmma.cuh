// wgmma.cuh — Hopper warpgroup MMA (sm_90a): 128-byte swizzled smem tiles, matrix descriptors, wgmma m64nNk16.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "copy.cuh"

// ---------------------------------------------------------------------------------------------
// Shared-memory tiles for wgmma: a tile of R rows x C 16-byte chunks (C a multiple of 8) is stored as
// C / 8 column atoms, each R rows x 128 bytes; chunk c of row r lives at atom c / 8, row r, chunk
// (c % 8) ^ (r % 8). Every 8 rows of an atom (1024 bytes, 1024-byte aligned) form one swizzle unit.
__host__ __device__ __forceinline__ uint32_t sw128_offset(int row, int chunk, int rows) {
    return (uint32_t)((chunk >> 3) * rows + row) * 128u + (uint32_t)((chunk & 7) ^ (row & 7)) * 16u;
}

// Matrix descriptor: start address, leading / stride byte offsets (16-byte units), swizzle mode (1: 128-byte,
// 2: 64-byte).
__device__ __forceinline__ uint64_t wgmma_desc(const void *smem, uint32_t lbo, uint32_t sbo, uint32_t swizzle = 1) {
    uint64_t addr = smem_u32(smem);
    return ((addr & 0x3ffff) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 | (uint64_t)swizzle << 62;
}

// A descriptor moved `bytes` further into its tile. The start address is the low 14 bits (16-byte units) and shared
// memory ends below 256 KB, so the add never carries past them: one 32-bit add a k-step on the tile's descriptor,
// where wgmma_desc of each step's address took four uniform instructions (its mask and shift again).
__device__ __forceinline__ uint64_t wgmma_desc_plus(uint64_t desc, uint32_t bytes) {
    return (desc & 0xffffffff00000000ull) | (uint32_t)((uint32_t)desc + (bytes >> 4));
}

// K-major operand (rows of the M or N dimension, k contiguous): k-step kk of 16 elements of a tile of
// `rows` rows starting at row 0 of `tile`: 32 bytes per step within an atom, the next atom every 4 steps.
__device__ __forceinline__ uint64_t wgmma_desc_k(const char *tile, int rows, int kk) {
    return wgmma_desc_plus(wgmma_desc(tile, 16, 1024), (uint32_t)((kk >> 2) * rows * 128 + (kk & 3) * 32));
}

// MN-major operand (a tile of k rows x N elements, N contiguous, e.g. V as [key][feature]); k-step kk
// covers rows 16 kk .. 16 kk + 15; the next 64 columns of N sit one atom (rows * 128 bytes) further.
__device__ __forceinline__ uint64_t wgmma_desc_mn(const char *tile, int rows, int kk) {
    return wgmma_desc_plus(wgmma_desc(tile, (uint32_t)rows * 128u, 1024), (uint32_t)(kk * 16 * 128));
}

// ---------------------------------------------------------------------------------------------
// Ordering. wgmma_fence before the first wgmma of a batch and after registers it reads were written;
// commit closes a group of issued wgmmas; wait<N> leaves at most N groups in flight.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keep the compiler from moving reads or writes of accumulator registers across an asynchronous wgmma.
template <int N> __device__ __forceinline__ void wgmma_hold(float *d) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N> __device__ __forceinline__ void wgmma_hold(uint32_t *a) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(a[i])::"memory");
}

// Warpgroup register reallocation (all warps of the warpgroup execute it) and named barriers.
template <int R> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R)); }
template <int R> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R)); }
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// named_bar_sync once a and b are computed: the barrier's id is a select on a predicate that reads them (a, b <= +inf
// or unordered: true for every float, NaN included) between the id and lane 0's copy of it, which ptxas cannot tell
// apart, so it cannot hoist the barrier above the instructions that make a and b (it did, into half a row max, and
// the turns' waits grew 4x: PERF.md step 193). A predicated barrier cost a branch and an R2UR a block.
__device__ __forceinline__ void named_bar_sync_after(int id, int threads, float a, float b) {
    asm volatile("{\n .reg .pred p;\n .reg .b32 alt, r;\n shfl.sync.idx.b32 alt, %0, 0, 0x1f, 0xffffffff;\n"
                 " setp.leu.f32 p, %2, 0f7F800000;\n setp.leu.and.f32 p, %3, 0f7F800000, p;\n selp.b32 r, %0, alt, p;\n"
                 " bar.sync r, %1;\n}\n" ::"r"(id), "r"(threads), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---------------------------------------------------------------------------------------------
// D(64 x N, fp32) = A(64 x 16) * B(16 x N) + (acc ? D : 0), one warpgroup. Accumulator layout (per
// warp w of the warpgroup, lane l): d[4i + e] is row 16w + l/4 + 8(e/2), column 8i + 2(l%4) + e%2 —
// mma.sync's m16n8 C fragment repeated over N/8 column groups. A from shared memory (descriptor, K-major)
// or from registers (mma.sync's m16n8k16 A fragment of the warp's 16 rows); B from shared memory,
// K-major (TB = 0) or MN-major (TB = 1).

#define FC_R4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define FC_R32 FC_R4(0), FC_R4(4), FC_R4(8), FC_R4(12), FC_R4(16), FC_R4(20), FC_R4(24), FC_R4(28)
#define FC_R40 FC_R4(0), FC_R4(4), FC_R4(8), FC_R4(12), FC_R4(16), FC_R4(20), FC_R4(24), FC_R4(28), FC_R4(32), FC_R4(36)
#define FC_R48 FC_R4(0), FC_R4(4), FC_R4(8), FC_R4(12), FC_R4(16), FC_R4(20), FC_R4(24), FC_R4(28), \
    FC_R4(32), FC_R4(36), FC_R4(40), FC_R4(44)
#define FC_R56 FC_R4(0), FC_R4(4), FC_R4(8), FC_R4(12), FC_R4(16), FC_R4(20), FC_R4(24), FC_R4(28), \
    FC_R4(32), FC_R4(36), FC_R4(40), FC_R4(44), FC_R4(48), FC_R4(52)
#define FC_R64 FC_R4(0), FC_R4(4), FC_R4(8), FC_R4(12), FC_R4(16), FC_R4(20), FC_R4(24), FC_R4(28), \
    FC_R4(32), FC_R4(36), FC_R4(40), FC_R4(44), FC_R4(48), FC_R4(52), FC_R4(56), FC_R4(60)
#define FC_R88 FC_R4(0), FC_R4(4), FC_R4(8), FC_R4(12), FC_R4(16), FC_R4(20), FC_R4(24), FC_R4(28), \
    FC_R4(32), FC_R4(36), FC_R4(40), FC_R4(44), FC_R4(48), FC_R4(52), FC_R4(56), FC_R4(60), FC_R4(64), \
    FC_R4(68), FC_R4(72), FC_R4(76), FC_R4(80), FC_R4(84)
#define FC_R96 FC_R4(0), FC_R4(4), FC_R4(8), FC_R4(12), FC_R4(16), FC_R4(20), FC_R4(24), FC_R4(28), \
    FC_R4(32), FC_R4(36), FC_R4(40), FC_R4(44), FC_R4(48), FC_R4(52), FC_R4(56), FC_R4(60), FC_R4(64), \
    FC_R4(68), FC_R4(72), FC_R4(76), FC_R4(80), FC_R4(84), FC_R4(88), FC_R4(92)
#define FC_R128 FC_R4(0), FC_R4(4), FC_R4(8), FC_R4(12), FC_R4(16), FC_R4(20), FC_R4(24), FC_R4(28), \
    FC_R4(32), FC_R4(36), FC_R4(40), FC_R4(44), FC_R4(48), FC_R4(52), FC_R4(56), FC_R4(60), FC_R4(64), \
    FC_R4(68), FC_R4(72), FC_R4(76), FC_R4(80), FC_R4(84), FC_R4(88), FC_R4(92), FC_R4(96), FC_R4(100), \
    FC_R4(104), FC_R4(108), FC_R4(112), FC_R4(116), FC_R4(120), FC_R4(124)
#define FC_D32 "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" "}"
#define FC_D40 "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39" "}"
#define FC_D48 "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47" "}"
#define FC_D56 "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " "%48, %49, %50, %51, %52, %53, %54, %55" "}"
#define FC_D64 "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" "}"
#define FC_D88 "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87" "}"
#define FC_D96 "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95" "}"
#define FC_D128 "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" "}"
// The instruction text: N, type, accumulator list, then the operand numbers of what follows them.
#define FC_WGMMA_SS(N, TY, D, A, B, SC, TB)                                                            \
    "{\n.reg .pred p;\nsetp.ne.b32 p, " SC ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY \
    "." TY " " D ", " A ", " B ", p, 1, 1, 0, " TB ";\n}\n"
#define FC_WGMMA_RS(N, TY, D, A0, A1, A2, A3, B, SC, TB)                                               \
    "{\n.reg .pred p;\nsetp.ne.b32 p, " SC ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY \
    "." TY " " D ", {" A0 ", " A1 ", " A2 ", " A3 "}, " B ", p, 1, 1, " TB ";\n}\n"
// One N: R accumulator registers (N / 2); the operands after them are %R, %R+1, ... (O0 .. O6).
#define FC_WGMMA_OP(T, TY, N, R, O0, O1, O2, O3, O4, O5, O6)                                             \
    template <> struct wgmma_op<T, N> {                                                                  \
        template <int TB> static __device__ __forceinline__ void ss(float *d, uint64_t a, uint64_t b, int acc) { \
            asm volatile(FC_WGMMA_SS(N, TY, FC_D##R, O0, O1, O2, O3) : FC_R##R : "l"(a), "l"(b), "r"(acc), "n"(TB)); \
        }                                                                                                \
        template <int TB> static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t b, int acc) { \
            asm volatile(FC_WGMMA_RS(N, TY, FC_D##R, O0, O1, O2, O3, O4, O5, O6)                         \
                         : FC_R##R : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc), "n"(TB)); \
        }                                                                                                \
    };

template <typename T, int N> struct wgmma_op;
#define FC_WGMMA_OPS(T, TY)  \
    FC_WGMMA_OP(T, TY, 64, 32, "%32", "%33", "%34", "%35", "%36", "%37", "%38") \
    FC_WGMMA_OP(T, TY, 80, 40, "%40", "%41", "%42", "%43", "%44", "%45", "%46") \
    FC_WGMMA_OP(T, TY, 96, 48, "%48", "%49", "%50", "%51", "%52", "%53", "%54") \
    FC_WGMMA_OP(T, TY, 112, 56, "%56", "%57", "%58", "%59", "%60", "%61", "%62") \
    FC_WGMMA_OP(T, TY, 128, 64, "%64", "%65", "%66", "%67", "%68", "%69", "%70") \
    FC_WGMMA_OP(T, TY, 176, 88, "%88", "%89", "%90", "%91", "%92", "%93", "%94") \
    FC_WGMMA_OP(T, TY, 192, 96, "%96", "%97", "%98", "%99", "%100", "%101", "%102") \
    FC_WGMMA_OP(T, TY, 256, 128, "%128", "%129", "%130", "%131", "%132", "%133", "%134")
FC_WGMMA_OPS(__nv_bfloat16, "bf16")
FC_WGMMA_OPS(__half, "f16")
#undef FC_WGMMA_OPS

// e4m3 x e4m3 (FP8 prefill, issue 13): m64nNk32, both operands K-major (the instruction has no transpose for
// 8-bit types), so a k-step is 32 elements = 32 bytes of a 128-byte row, as k16 is for 16-bit types:
// wgmma_desc_k serves both. A from registers: per warp, mma.sync m16n8k32's A fragment, a[0] = row
// 16w + l/4, k 4(l%4) .. + 3 (lowest k in the lowest byte), a[1] the row + 8, a[2] and a[3] the same at k + 16.
#define FC_WGMMA8_SS(N, D, A, B, SC)                                                                   \
    "{\n.reg .pred p;\nsetp.ne.b32 p, " SC ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N               \
    "k32.f32.e4m3.e4m3 " D ", " A ", " B ", p, 1, 1;\n}\n"
#define FC_WGMMA8_RS(N, D, A0, A1, A2, A3, B, SC)                                                      \
    "{\n.reg .pred p;\nsetp.ne.b32 p, " SC ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N               \
    "k32.f32.e4m3.e4m3 " D ", {" A0 ", " A1 ", " A2 ", " A3 "}, " B ", p, 1, 1;\n}\n"
#define FC_WGMMA8_OP(N, R, O0, O1, O2, O3, O4, O5)                                                     \
    template <> struct wgmma_op<__nv_fp8_e4m3, N> {                                                    \
        template <int TB> static __device__ __forceinline__ void ss(float *d, uint64_t a, uint64_t b, int acc) { \
            static_assert(TB == 0, "8-bit wgmma: B K-major only");                                     \
            asm volatile(FC_WGMMA8_SS(N, FC_D##R, O0, O1, O2) : FC_R##R : "l"(a), "l"(b), "r"(acc));  \
        }                                                                                              \
        template <int TB> static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t b, int acc) { \
            static_assert(TB == 0, "8-bit wgmma: B K-major only");                                     \
            asm volatile(FC_WGMMA8_RS(N, FC_D##R, O0, O1, O2, O3, O4, O5)                             \
                         : FC_R##R : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc));   \
        }                                                                                              \
    };
FC_WGMMA8_OP(64, 32, "%32", "%33", "%34", "%35", "%36", "%37")
FC_WGMMA8_OP(96, 48, "%48", "%49", "%50", "%51", "%52", "%53")
FC_WGMMA8_OP(128, 64, "%64", "%65", "%66", "%67", "%68", "%69")
FC_WGMMA8_OP(192, 96, "%96", "%97", "%98", "%99", "%100", "%101")
FC_WGMMA8_OP(256, 128, "%128", "%129", "%130", "%131", "%132", "%133")
#undef FC_WGMMA8_OP
#undef FC_WGMMA8_SS
#undef FC_WGMMA8_RS
#undef FC_WGMMA_OP
#undef FC_WGMMA_SS
#undef FC_WGMMA_RS
#undef FC_D32
#undef FC_D40
#undef FC_D48
#undef FC_D56
#undef FC_D64
#undef FC_D88
#undef FC_D96
#undef FC_D128
#undef FC_R4
#undef FC_R32
#undef FC_R40
#undef FC_R48
#undef FC_R56
#undef FC_R64
#undef FC_R88
#undef FC_R96
#undef FC_R128

// d (N/2 floats) (+)= A(smem descriptor) * B(smem descriptor); TB = 1: B is MN-major.
template <typename T, int N, int TB>
__device__ __forceinline__ void wgmma_ss(float *d, uint64_t a, uint64_t b, int acc) {
    wgmma_op<T, N>::template ss<TB>(d, a, b, acc);
}
// d (N/2 floats) (+)= A(4 registers: pairs of T) * B(smem descriptor); TB = 1: B is MN-major.
template <typename T, int N, int TB>
__device__ __forceinline__ void wgmma_rs(float *d, const uint32_t a[4], uint64_t b, int acc) {
    wgmma_op<T, N>::template rs<TB>(d, a, b, acc);
}
