// gpu_tile.cu — unit tests of the tile layer (src/cuda/tile/) on the GPU, each against a host computation.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudaTypedefs.h>

#include "cuda/tile/tile.cuh"
#include "testutil.h" /* FP8_MMA_REL_ERR */

static int n_pass, n_fail;

static void check(bool ok, const char *name, const char *detail) {
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name, detail[0] ? ": " : "", detail);
    ok ? n_pass++ : n_fail++;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            printf("FAIL %s: %s\n", #call, cudaGetErrorString(e_));                                \
            n_fail++;                                                                              \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static float frand(unsigned *s) { *s = *s * 1664525u + 1013904223u; return ((*s >> 8) & 0xffff) / 32768.0f - 1.0f; }

// ---------------------------------------------------------------------------------------------
// cp.async: 16-byte copies, zero-fill of invalid chunks, wait_group.

__global__ void k_cp_async(const int4 *src, int4 *dst, int n) {
    __shared__ int4 s[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) s[i] = make_int4(-1, -1, -1, -1); // poison
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x) cp_async_16(&s[i], src + (i < n ? i : 0), i < n);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x) dst[i] = s[i];
}

static void test_cp_async(void) {
    int4 h[256], out[256], *d_src, *d_dst;
    for (int i = 0; i < 256; i++) h[i] = make_int4(i, i * 3 + 1, -i, 7 * i);
    CK(cudaMalloc(&d_src, sizeof h));
    CK(cudaMalloc(&d_dst, sizeof h));
    CK(cudaMemcpy(d_src, h, sizeof h, cudaMemcpyHostToDevice));
    int n = 200;
    k_cp_async<<<1, 64>>>(d_src, d_dst, n);
    CK(cudaGetLastError());
    CK(cudaMemcpy(out, d_dst, sizeof out, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < 256; i++) {
        int4 want = i < n ? h[i] : make_int4(0, 0, 0, 0);
        bad += memcmp(&out[i], &want, sizeof want) != 0;
    }
    char msg[64];
    snprintf(msg, sizeof msg, "%d of 256 chunks wrong (200 copied, 56 zero-filled)", bad);
    check(bad == 0, "cp_async_16 + zero-fill", msg);
    cudaFree(d_src); cudaFree(d_dst);
}

// ---------------------------------------------------------------------------------------------
// Swizzle: a bijection within each row (rows of 8, 16, 24 chunks).

static void test_swizzle(void) {
    // Host mirror of swz_offset (the function is device-only).
    int bad = 0;
    for (int chunks = 8; chunks <= 32; chunks += 8)
        for (int row = 0; row < 16; row++) {
            int seen[32] = {0};
            for (int c = 0; c < chunks; c++) {
                int phys = (c ^ (row & 7));
                if (phys < 0 || phys >= chunks || seen[phys]++) bad++;
            }
        }
    check(bad == 0, "swizzle is a permutation of each row's chunks", "");
}

// Device: ldmatrix over a swizzled tile must read back the logical element it wrote.
// ldmatrix_x4 on a 16x16 bf16 tile (as for an A operand) and its transpose.
__global__ void k_ldmatrix(const unsigned short *src, unsigned *out, unsigned *out_t) {
    __shared__ __align__(128) char tile[16 * 8 * 16]; // 16 rows x 8 chunks (64 elements per row)
    int lane = threadIdx.x;
    for (int i = lane; i < 16 * 64; i += 32) {
        int r = i / 64, c = i % 64;
        *(unsigned short *)(tile + swz_offset_b16(r, c & ~7, 8) + (c & 7) * 2) = src[i];
    }
    __syncwarp();
    uint32_t a[4], t[4];
    // Matrices: (rows 0-7, cols 8-15), (rows 8-15, cols 8-15), (rows 0-7, cols 16-23), (rows 8-15, cols 16-23)
    ldmatrix_x4(a, tile + swz_offset(lane % 16, 1 + lane / 16, 8));
    ldmatrix_x4_trans(t, tile + swz_offset(lane % 16, 1 + lane / 16, 8));
    for (int i = 0; i < 4; i++) {
        out[lane * 4 + i] = a[i];
        out_t[lane * 4 + i] = t[i];
    }
}

static void test_ldmatrix(void) {
    unsigned short h[16 * 64];
    for (int i = 0; i < 16 * 64; i++) h[i] = (unsigned short)i;
    unsigned short *d_src;
    unsigned *d_out, *d_t, out[128], out_t[128];
    CK(cudaMalloc(&d_src, sizeof h));
    CK(cudaMalloc(&d_out, sizeof out));
    CK(cudaMalloc(&d_t, sizeof out_t));
    CK(cudaMemcpy(d_src, h, sizeof h, cudaMemcpyHostToDevice));
    k_ldmatrix<<<1, 32>>>(d_src, d_out, d_t);
    CK(cudaGetLastError());
    CK(cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(out_t, d_t, sizeof out_t, cudaMemcpyDeviceToHost));
    int bad = 0, bad_t = 0;
    for (int lane = 0; lane < 32; lane++)
        for (int m = 0; m < 4; m++) {
            int r0 = 8 * (m % 2), c0 = 8 + 8 * (m / 2); // matrix m's origin
            for (int e = 0; e < 2; e++) {
                // non-trans: thread holds (row lane/4, col 2*(lane%4)+e); trans: (row 2*(lane%4)+e, col lane/4)
                unsigned got = (out[lane * 4 + m] >> (16 * e)) & 0xffff, got_t = (out_t[lane * 4 + m] >> (16 * e)) & 0xffff;
                bad += got != h[(r0 + lane / 4) * 64 + c0 + 2 * (lane % 4) + e];
                bad_t += got_t != h[(r0 + 2 * (lane % 4) + e) * 64 + c0 + lane / 4];
            }
        }
    char msg[80];
    snprintf(msg, sizeof msg, "%d wrong", bad);
    check(bad == 0, "ldmatrix_x4 through the swizzle", msg);
    snprintf(msg, sizeof msg, "%d wrong", bad_t);
    check(bad_t == 0, "ldmatrix_x4_trans through the swizzle", msg);
    cudaFree(d_src); cudaFree(d_out); cudaFree(d_t);
}

// ---------------------------------------------------------------------------------------------
// mma.sync m16n8k16: C = A(16x16) B(16x8) with the documented fragment layouts, bf16 and fp16.

template <typename T>
__global__ void k_mma(const T *A, const T *B, float *C) {
    int lane = threadIdx.x, g = lane / 4, q = lane % 4;
    auto pk = [](T lo, T hi) {
        uint32_t u;
        unsigned short l = *(unsigned short *)&lo, h = *(unsigned short *)&hi;
        u = l | ((uint32_t)h << 16);
        return u;
    };
    // A row-major 16x16; B given as B[k][n] 16x8.
    uint32_t a[4] = {pk(A[g * 16 + 2 * q], A[g * 16 + 2 * q + 1]), pk(A[(g + 8) * 16 + 2 * q], A[(g + 8) * 16 + 2 * q + 1]),
                     pk(A[g * 16 + 2 * q + 8], A[g * 16 + 2 * q + 9]),
                     pk(A[(g + 8) * 16 + 2 * q + 8], A[(g + 8) * 16 + 2 * q + 9])};
    uint32_t b[2] = {pk(B[(2 * q) * 8 + g], B[(2 * q + 1) * 8 + g]), pk(B[(2 * q + 8) * 8 + g], B[(2 * q + 9) * 8 + g])};
    float c[4] = {1.0f, 1.0f, 1.0f, 1.0f}; // accumulate onto 1
    mma_16x8x16<T>(c, a, b);
    for (int i = 0; i < 4; i++) C[(g + 8 * (i / 2)) * 8 + 2 * q + i % 2] = c[i];
}

template <typename T>
static void test_mma(const char *name, T (*from_float)(float), float (*to_float)(T)) {
    T hA[256], hB[128];
    float C[128], ref[128];
    unsigned s = 7;
    for (int i = 0; i < 256; i++) hA[i] = from_float(frand(&s));
    for (int i = 0; i < 128; i++) hB[i] = from_float(frand(&s));
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            double acc = 1.0;
            for (int k = 0; k < 16; k++) acc += (double)to_float(hA[m * 16 + k]) * to_float(hB[k * 8 + n]);
            ref[m * 8 + n] = (float)acc;
        }
    T *dA, *dB;
    float *dC;
    CK(cudaMalloc(&dA, sizeof hA));
    CK(cudaMalloc(&dB, sizeof hB));
    CK(cudaMalloc(&dC, sizeof C));
    CK(cudaMemcpy(dA, hA, sizeof hA, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, hB, sizeof hB, cudaMemcpyHostToDevice));
    k_mma<T><<<1, 32>>>(dA, dB, dC);
    CK(cudaGetLastError());
    CK(cudaMemcpy(C, dC, sizeof C, cudaMemcpyDeviceToHost));
    double err = 0;
    for (int i = 0; i < 128; i++) err = fmax(err, fabs(C[i] - ref[i]));
    char msg[64];
    snprintf(msg, sizeof msg, "max |err| %.2e vs float64", err);
    check(err < 1e-4, name, msg);
    cudaFree(dA); cudaFree(dB); cudaFree(dC);
}

// D (64 x N, as a wgmma test wrote it) against the float64 product sum_k a(m, k) b(k, n) over K (128 unless said):
// passes when every difference is under 1e-3 + rel sum_k |a(m, k) b(k, n)| (a NaN left by an unwritten element
// fails). rel 0 for bf16 / fp16; the FP8 MMA adds its products at reduced precision (measured on the H100:
// errors up to 2^-13 of sum |a b|, as DeepSeek-V3's report says of Hopper's FP8 GEMM, ~14 bits), so its
// tests pass rel = FP8_MMA_REL_ERR (2^-11): a fragment in the wrong place is off by the size of the result,
// 100 times that.
template <class FA, class FB>
static void check_product(const char *name, const float *D, int N, FA a, FB b, int K = 128, double rel = 0) {
    double err = 0, worst = 0; // worst: the largest err / (1e-3 + rel sum |a b|)
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < N; n++) {
            double acc = 0, mag = 0;
            for (int k = 0; k < K; k++) acc += (double)a(m, k) * b(k, n), mag += fabs((double)a(m, k) * b(k, n));
            double e = fabs(D[m * N + n] - acc);
            err = e == e ? fmax(err, e) : INFINITY;
            worst = e == e ? fmax(worst, e / (1e-3 + rel * mag)) : INFINITY;
        }
    char msg[96];
    snprintf(msg, sizeof msg, "max |err| %.2e vs float64 (%.2f of the bound)", err, worst);
    check(worst < 1, name, msg);
}

// One CTA of 128 threads of kernel(A, B, D) with `smem` bytes of dynamic shared memory, on device copies
// of hA (na elements) and hB (nb); D (nd floats) is poisoned with NaN first, so an element the kernel does
// not write fails check_product.
template <class TA, class TB>
static void run_gemm_kernel(void (*kernel)(const TA *, const TB *, float *), int smem, const TA *hA, size_t na,
                            const TB *hB, size_t nb, float *D, size_t nd) {
    memset(D, 0xff, nd * sizeof *D);
    TA *dA;
    TB *dB;
    float *dD;
    CK(cudaMalloc(&dA, na * sizeof *hA));
    CK(cudaMalloc(&dB, nb * sizeof *hB));
    CK(cudaMalloc(&dD, nd * sizeof *D));
    CK(cudaMemcpy(dA, hA, na * sizeof *hA, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, hB, nb * sizeof *hB, cudaMemcpyHostToDevice));
    CK(cudaMemset(dD, 0xff, nd * sizeof *D));
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<1, 128, smem>>>(dA, dB, dD);
    CK(cudaGetLastError());
    CK(cudaMemcpy(D, dD, nd * sizeof *D, cudaMemcpyDeviceToHost));
    cudaFree(dA); cudaFree(dB); cudaFree(dD);
}

static __nv_bfloat16 f2bf(float x) { return __float2bfloat16(x); }
static float bf2f(__nv_bfloat16 x) { return __bfloat162float(x); }
static __half f2h(float x) { return __float2half(x); }
static float h2f(__half x) { return __half2float(x); }

// ---------------------------------------------------------------------------------------------
// wgmma m64nNk16 over K = 128 (8 k-steps across two 64-column atoms) against a float64 product.
// Modes: 0 A and B from shared memory (B K-major: given as Bt[n][k]); 1 A from registers, B K-major;
// 2 A from registers, B MN-major (given as B[k][n], as V is [key][feature]).

template <typename T, int N, int MODE>
__global__ void k_wgmma(const T *A, const T *B, float *D) {
    extern __shared__ __align__(1024) char k_wgmma_smem[]; // A: 16 KB, then B: N x 128 or 128 x N elements
    char *sa = k_wgmma_smem, *sb = k_wgmma_smem + 64 * 256;
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    for (int i = tid; i < 64 * 128; i += 128) // A: 64 rows x 16 chunks
        *(T *)(sa + sw128_offset(i / 128, i % 128 / 8, 64) + i % 8 * 2) = A[i];
    for (int i = tid; i < N * 128; i += 128) {
        if (MODE < 2) // Bt: N rows x 16 chunks
            *(T *)(sb + sw128_offset(i / 128, i % 128 / 8, N) + i % 8 * 2) = B[i];
        else // B: 128 rows (k) x N / 8 chunks
            *(T *)(sb + sw128_offset(i / N, i % N / 8, 128) + i % 8 * 2) = B[i];
    }
    fence_proxy_async(); // generic-proxy stores, read by wgmma through the async proxy
    __syncthreads();
    uint32_t a[8][4];
    auto pk = [](T lo, T hi) { return (uint32_t)*(unsigned short *)&lo | (uint32_t)*(unsigned short *)&hi << 16; };
    int r = 16 * warp + lane / 4, c = 2 * (lane % 4);
    for (int kk = 0; kk < 8; kk++) {
        const T *x = A + kk * 16;
        a[kk][0] = pk(x[r * 128 + c], x[r * 128 + c + 1]);
        a[kk][1] = pk(x[(r + 8) * 128 + c], x[(r + 8) * 128 + c + 1]);
        a[kk][2] = pk(x[r * 128 + c + 8], x[r * 128 + c + 9]);
        a[kk][3] = pk(x[(r + 8) * 128 + c + 8], x[(r + 8) * 128 + c + 9]);
    }
    float d[N / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        if (MODE == 0) wgmma_ss<T, N, 0>(d, wgmma_desc_k(sa, 64, kk), wgmma_desc_k(sb, N, kk), kk > 0);
        if (MODE == 1) wgmma_rs<T, N, 0>(d, a[kk], wgmma_desc_k(sb, N, kk), kk > 0);
        if (MODE == 2) wgmma_rs<T, N, 1>(d, a[kk], wgmma_desc_mn(sb, 128, kk), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold<N / 2>(d);
    for (int i = 0; i < N / 8; i++)
        for (int e = 0; e < 4; e++) D[(r + 8 * (e / 2)) * N + 8 * i + c + e % 2] = d[4 * i + e];
}

template <typename T, int N, int MODE>
static void test_wgmma(const char *name, T (*from_float)(float), float (*to_float)(T)) {
    static T hA[64 * 128], hB[128 * N];
    static float D[64 * N];
    unsigned s = 11 + MODE + N;
    for (int i = 0; i < 64 * 128; i++) hA[i] = from_float(frand(&s));
    for (int i = 0; i < 128 * N; i++) hB[i] = from_float(frand(&s));
    int smem = 64 * 256 + 128 * ((N + 63) / 64 * 64) * 2; // MN-major B: whole 64-column atoms
    run_gemm_kernel(k_wgmma<T, N, MODE>, smem, hA, 64 * 128, hB, 128 * N, D, 64 * N);
    check_product(name, D, N, [&](int m, int k) { return to_float(hA[m * 128 + k]); },
                  [&](int k, int n) { return to_float(MODE < 2 ? hB[n * 128 + k] : hB[k * N + n]); });
}

// ---------------------------------------------------------------------------------------------
// wgmma m64nNk32 e4m3 x e4m3 over K = 128 (4 k-steps within one 128-byte atom) against a float64 product
// of the same e4m3 values. Modes: 0 A and B from shared memory, 1 A from registers; B K-major (Bt[n][k]).

static float e4m3_to_float(unsigned char x) {
    __nv_fp8_e4m3 v;
    v.__x = x;
    return (float)v;
}
static unsigned char e4m3_of(float f) { return __nv_fp8_e4m3(f).__x; }

template <int N, int MODE>
__global__ void k_wgmma8(const unsigned char *A, const unsigned char *B, float *D) {
    extern __shared__ __align__(1024) char k_wgmma8_smem[]; // A: 8 KB (64 rows x 128 bytes), then Bt: N x 128 bytes
    char *sa = k_wgmma8_smem, *sb = k_wgmma8_smem + 64 * 128;
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    for (int i = tid; i < 64 * 128; i += 128) sa[sw128_offset(i / 128, i % 128 / 16, 64) + i % 16] = (char)A[i];
    for (int i = tid; i < N * 128; i += 128) sb[sw128_offset(i / 128, i % 128 / 16, N) + i % 16] = (char)B[i];
    fence_proxy_async();
    __syncthreads();
    uint32_t a[4][4];
    int r = 16 * warp + lane / 4, c = 4 * (lane % 4);
    auto pk = [&](int row, int k) {
        const unsigned char *x = A + row * 128 + k;
        return (uint32_t)x[0] | (uint32_t)x[1] << 8 | (uint32_t)x[2] << 16 | (uint32_t)x[3] << 24;
    };
    for (int kk = 0; kk < 4; kk++) {
        a[kk][0] = pk(r, 32 * kk + c);
        a[kk][1] = pk(r + 8, 32 * kk + c);
        a[kk][2] = pk(r, 32 * kk + 16 + c);
        a[kk][3] = pk(r + 8, 32 * kk + 16 + c);
    }
    float d[N / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        if (MODE == 0) wgmma_ss<__nv_fp8_e4m3, N, 0>(d, wgmma_desc_k(sa, 64, kk), wgmma_desc_k(sb, N, kk), kk > 0);
        if (MODE == 1) wgmma_rs<__nv_fp8_e4m3, N, 0>(d, a[kk], wgmma_desc_k(sb, N, kk), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold<N / 2>(d);
    int cc = 2 * (lane % 4);
    for (int i = 0; i < N / 8; i++)
        for (int e = 0; e < 4; e++) D[(r + 8 * (e / 2)) * N + 8 * i + cc + e % 2] = d[4 * i + e];
}

template <int N, int MODE>
static void test_wgmma8(const char *name) {
    static unsigned char hA[64 * 128], hB[128 * N];
    static float D[64 * N];
    unsigned s = 23 + MODE + N;
    for (int i = 0; i < 64 * 128; i++) hA[i] = e4m3_of(4.0f * frand(&s));
    for (int i = 0; i < 128 * N; i++) hB[i] = e4m3_of(4.0f * frand(&s));
    run_gemm_kernel(k_wgmma8<N, MODE>, 64 * 128 + N * 128, hA, 64 * 128, hB, 128 * N, D, 64 * N);
    check_product(name, D, N, [&](int m, int k) { return e4m3_to_float(hA[m * 128 + k]); },
                  [&](int k, int n) { return e4m3_to_float(hB[n * 128 + k]); }, 128, FP8_MMA_REL_ERR);
}

// P·V in FP8 as the prefill runs it: P (64 rows x BN keys, in S's accumulator layout) rounded to e4m3 by
// pack_p_e4m3, V (BN keys x N features of e4m3, as a TMA box lands) transposed by transpose_v_e4m3, one
// wgmma m64nNk32 per 32 keys (past 128 keys, in Vt's next atom); against float64 of the same e4m3 values.
template <int N, int BN>
constexpr int pv8_vt_bytes() { return BN <= 128 ? BN * N : (BN + 127) / 128 * 128 * N; } // Vt: N rows a key atom

template <int N, int BN>
__global__ void k_pv8(const float *P, const unsigned char *V, float *D) {
    // V: BN rows of whole 128-byte atoms (N < 128 leaves the swizzle's other chunks unused), then Vt
    extern __shared__ __align__(1024) char k_pv8_smem[];
    constexpr int VB = BN * (N < 128 ? 128 : N);
    char *sv = k_pv8_smem, *svt = k_pv8_smem + VB;
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    for (int i = tid; i < BN * N; i += 128) sv[sw128_offset(i / N, i % N / 16, BN) + i % 16] = (char)V[i];
    __syncthreads();
    transpose_v_e4m3<BN, N>(sv, svt, tid);
    fence_proxy_async();
    __syncthreads();
    int r = 16 * warp + lane / 4, c = 2 * (lane % 4);
    float s[BN / 8][4];
    for (int i = 0; i < BN / 8; i++)
        for (int e = 0; e < 4; e++) s[i][e] = P[(r + 8 * (e / 2)) * BN + 8 * i + c + e % 2];
    uint32_t pa[BN / 32][4];
    pack_p_e4m3<BN>(s, pa);
    float d[N / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 32; kk++)
        wgmma_rs<__nv_fp8_e4m3, N, 0>(d, pa[kk], BN == 64 ? wgmma_desc_k64(svt, kk) : wgmma_desc_k(svt, N, kk), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold<N / 2>(d);
    for (int i = 0; i < N / 8; i++)
        for (int e = 0; e < 4; e++) D[(r + 8 * (e / 2)) * N + 8 * i + c + e % 2] = d[4 * i + e];
}

template <int N, int BN = 128>
static void test_pv8(const char *name) {
    static float hP[64 * BN], D[64 * N];
    static unsigned char hV[BN * N];
    unsigned s = 31 + N + BN;
    for (int i = 0; i < 64 * BN; i++) hP[i] = fabsf(frand(&s));
    for (int i = 0; i < BN * N; i++) hV[i] = e4m3_of(8.0f * frand(&s));
    run_gemm_kernel(k_pv8<N, BN>, BN * (N < 128 ? 128 : N) + pv8_vt_bytes<N, BN>(), hP, 64 * BN, hV, BN * N, D, 64 * N);
    check_product(name, D, N, [&](int m, int k) { return e4m3_to_float(e4m3_of(hP[m * BN + k])); },
                  [&](int k, int n) { return e4m3_to_float(hV[k * N + n]); }, BN, FP8_MMA_REL_ERR);
}

// pack2: two floats rounded to nearest into one 32-bit pair (low half first).
__global__ void k_pack2(float a, float b, uint32_t *out) {
    out[0] = pack2<__nv_bfloat16>(a, b);
    out[1] = pack2<__half>(a, b);
}

static void test_pack2(void) {
    uint32_t *d, h[2];
    CK(cudaMalloc(&d, sizeof h));
    float a = 1.00390625f /* 1 + 2^-8: a bf16 tie */, b = -3.14159f;
    k_pack2<<<1, 1>>>(a, b, d);
    CK(cudaGetLastError());
    CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    __nv_bfloat16 bl = __float2bfloat16_rn(a), bh = __float2bfloat16_rn(b);
    __half hl = __float2half_rn(a), hh = __float2half_rn(b);
    uint32_t want_bf = *(unsigned short *)&bl | ((uint32_t) * (unsigned short *)&bh << 16);
    uint32_t want_h = *(unsigned short *)&hl | ((uint32_t) * (unsigned short *)&hh << 16);
    check(h[0] == want_bf && h[1] == want_h, "pack2 bf16/fp16 round to nearest, low half first", "");
    cudaFree(d);
}

// ---------------------------------------------------------------------------------------------
// mbarrier: cp.async completion tracked through a barrier; a second phase with plain arrivals.

__global__ void k_mbarrier(const int4 *src, int4 *dst, int *phases_ok) {
    __shared__ __align__(8) uint64_t bar;
    __shared__ int4 s[64];
    if (threadIdx.x == 0) mbar_init(&bar, blockDim.x);
    __syncthreads();
    // Phase 0: each thread copies 2 chunks and arrives when its copies land.
    for (int i = threadIdx.x; i < 64; i += blockDim.x) cp_async_16(&s[i], &src[i], true);
    mbar_cp_async_arrive(&bar);
    mbar_wait(&bar, 0);
    for (int i = threadIdx.x; i < 64; i += blockDim.x) dst[i] = s[(i + 1) % 64]; // reads others' chunks
    // Phase 1: plain arrivals; the phase must not complete before all have arrived (probed by thread 0
    // after every thread has seen phase 0 complete, before any arrives for phase 1).
    __syncthreads();
    bool early = threadIdx.x == 0 && mbar_test_parity(&bar, 1);
    __syncthreads();
    mbar_arrive(&bar);
    mbar_wait(&bar, 1);
    if (threadIdx.x == 0) *phases_ok = !early;
}

static void test_mbarrier(void) {
    int4 h[64], out[64], *ds, *dd;
    int ok = 0, *dok;
    for (int i = 0; i < 64; i++) h[i] = make_int4(i, 2 * i, 3 * i, 4 * i);
    CK(cudaMalloc(&ds, sizeof h));
    CK(cudaMalloc(&dd, sizeof h));
    CK(cudaMalloc(&dok, sizeof ok));
    CK(cudaMemcpy(ds, h, sizeof h, cudaMemcpyHostToDevice));
    k_mbarrier<<<1, 32>>>(ds, dd, dok);
    CK(cudaGetLastError());
    CK(cudaMemcpy(out, dd, sizeof out, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&ok, dok, sizeof ok, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < 64; i++) bad += memcmp(&out[i], &h[(i + 1) % 64], sizeof h[0]) != 0;
    char msg[80];
    snprintf(msg, sizeof msg, "%d chunks wrong after the barrier; phase 1 completed early: %s", bad, ok ? "no" : "yes");
    check(bad == 0 && ok, "mbarrier: cp.async arrivals, parity waits", msg);
    cudaFree(ds); cudaFree(dd); cudaFree(dok);
}

// Bulk copies: 32 rows of 256 bytes into rows padded to 272 bytes, completion counted on an mbarrier.
__global__ void k_bulk(const char *src, char *dst) {
    __shared__ __align__(128) char s[32 * 272];
    __shared__ __align__(8) uint64_t bar;
    int lane = threadIdx.x;
    for (int i = lane; i < 32 * 272; i += 32) s[i] = (char)0xAB; // poison, padding included
    if (lane == 0) mbar_init(&bar, 1);
    mbar_fence_init();
    __syncwarp();
    fence_proxy_async();
    if (lane == 0) mbar_arrive_expect_tx(&bar, 32 * 256);
    __syncwarp();
    bulk_copy_g2s(s + lane * 272, src + lane * 256 * 3, 256, &bar); // every third source row
    mbar_wait(&bar, 0);
    for (int i = lane; i < 32 * 272; i += 32) dst[i] = s[i];
}

static void test_bulk_copy(void) {
    static char h[96 * 256], out[32 * 272];
    for (int i = 0; i < (int)sizeof h; i++) h[i] = (char)(i * 7 + i / 256);
    char *ds, *dd;
    CK(cudaMalloc(&ds, sizeof h));
    CK(cudaMalloc(&dd, sizeof out));
    CK(cudaMemcpy(ds, h, sizeof h, cudaMemcpyHostToDevice));
    k_bulk<<<1, 32>>>(ds, dd);
    CK(cudaGetLastError());
    CK(cudaMemcpy(out, dd, sizeof out, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int r = 0; r < 32; r++)
        for (int c = 0; c < 272; c++) bad += out[r * 272 + c] != (c < 256 ? h[r * 3 * 256 + c] : (char)0xAB);
    char msg[80];
    snprintf(msg, sizeof msg, "%d bytes wrong (rows copied, padding untouched)", bad);
    check(bad == 0, "bulk_copy_g2s into padded rows, mbarrier tx count", msg);
    cudaFree(ds); cudaFree(dd);
}

// ---------------------------------------------------------------------------------------------
// TMA: a box of a 4-D tensor (d, h, rows, b) into shared memory with the 128-byte swizzle, rows past the
// tensor's end as zeros; read back through sw128_offset (the wgmma tile layout).

enum { TD = 128, TH = 3, TR = 200, TB = 2 };

__global__ void k_tma(const __grid_constant__ CUtensorMap map, int c0, int c1, int c2, int c3, unsigned short *out) {
    __shared__ __align__(1024) char s[128 * 128];
    __shared__ __align__(8) uint64_t bar;
    int tid = threadIdx.x; // 128 threads: thread r reads row r of the box
    for (int i = tid; i < 128 * 128; i += 128) s[i] = (char)0x5A; // poison
    if (tid == 0) mbar_init(&bar, 1);
    mbar_fence_init();
    __syncthreads();
    if (tid == 0) {
        fence_proxy_async();
        mbar_arrive_expect_tx(&bar, 128 * 128);
        tma_load_4d(s, &map, c0, c1, c2, c3, &bar);
    }
    mbar_wait(&bar, 0);
    for (int c = 0; c < 8; c++)
        for (int e = 0; e < 8; e++) out[tid * 64 + c * 8 + e] = ((const unsigned short *)(s + sw128_offset(tid, c, 128)))[e];
}

static void test_tma(void) {
    static unsigned short h[TB * TR * TH * TD], out[128 * 64];
    for (int i = 0; i < TB * TR * TH * TD; i++) h[i] = (unsigned short)(i * 13 + 1);
    void *f = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
        check(false, "tma_load_4d", "no cuTensorMapEncodeTiled in the driver");
        return;
    }
    unsigned short *d, *dout;
    CK(cudaMalloc(&d, sizeof h));
    CK(cudaMalloc(&dout, sizeof out));
    CK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    CUtensorMap map;
    cuuint64_t dims[4] = {TD, TH, TR, TB}, strides[3] = {TD * 2, TH * TD * 2, (cuuint64_t)TR * TH * TD * 2};
    cuuint32_t box[4] = {64, 1, 128, 1}, step[4] = {1, 1, 1, 1};
    CUresult r = ((PFN_cuTensorMapEncodeTiled_v12000)f)(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, d, dims, strides, box, step,
                                                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        check(false, "tma_load_4d", "cuTensorMapEncodeTiled failed");
        return;
    }
    static const int at[2][4] = {{0, 0, 0, 0}, {64, 2, 100, 1}}; // the second box runs 28 rows past the end
    for (int k = 0; k < 2; k++) {
        k_tma<<<1, 128>>>(map, at[k][0], at[k][1], at[k][2], at[k][3], dout);
        CK(cudaGetLastError());
        CK(cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int row = 0; row < 128; row++)
            for (int col = 0; col < 64; col++) {
                int rr = at[k][2] + row;
                unsigned short want = rr < TR ? h[(((size_t)at[k][3] * TR + rr) * TH + at[k][1]) * TD + at[k][0] + col] : 0;
                bad += out[row * 64 + col] != want;
            }
        char msg[96];
        snprintf(msg, sizeof msg, "box at (%d, %d, %d, %d): %d elements wrong", at[k][0], at[k][1], at[k][2], at[k][3], bad);
        check(bad == 0, "tma_load_4d, 128-byte swizzle, zeros past the end", msg);
    }
    cudaFree(d); cudaFree(dout);
}

// ---------------------------------------------------------------------------------------------
// Math: fast_exp2 accuracy (incl. -inf -> 0), fast_tanh, quad and warp reductions.

__global__ void k_math(const float *x, float *e2, float *th, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        e2[i] = fast_exp2(x[i]);
        th[i] = fast_tanh(x[i]);
    }
}

static void test_math(void) {
    enum { N = 4096 };
    static float x[N], e2[N], th[N];
    unsigned s = 3;
    for (int i = 0; i < N; i++) x[i] = 30.0f * frand(&s);
    x[0] = -INFINITY;
    x[1] = 0.0f;
    float *dx, *de, *dt;
    CK(cudaMalloc(&dx, sizeof x));
    CK(cudaMalloc(&de, sizeof e2));
    CK(cudaMalloc(&dt, sizeof th));
    CK(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
    k_math<<<N / 256, 256>>>(dx, de, dt, N);
    CK(cudaGetLastError());
    CK(cudaMemcpy(e2, de, sizeof e2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(th, dt, sizeof th, cudaMemcpyDeviceToHost));
    double rel = 0, th_err = 0;
    for (int i = 1; i < N; i++) {
        double ref = exp2((double)x[i]);
        if (ref > 1e-30) rel = fmax(rel, fabs(e2[i] - ref) / ref);
        th_err = fmax(th_err, fabs(th[i] - tanh((double)x[i])));
    }
    char msg[96];
    snprintf(msg, sizeof msg, "max rel err %.2e (bound 2^-21), exp2(-inf) = %g, exp2(0) = %g", rel, e2[0], e2[1]);
    check(rel < 4.8e-7 && e2[0] == 0.0f && e2[1] == 1.0f, "fast_exp2", msg);
    snprintf(msg, sizeof msg, "max abs err %.2e (bound 1e-3)", th_err);
    check(th_err < 1e-3, "fast_tanh", msg);
    cudaFree(dx); cudaFree(de); cudaFree(dt);
}

__global__ void k_reduce(const float *x, float *out) {
    int lane = threadIdx.x;
    float v = x[lane];
    out[lane] = quad_max(v);
    out[32 + lane] = quad_sum(v);
    out[64 + lane] = warp_max(v);
    out[96 + lane] = warp_sum(v);
}

static void test_reductions(void) {
    float x[32], out[128], *dx, *dout;
    unsigned s = 11;
    for (int i = 0; i < 32; i++) x[i] = (float)(int)(100 * frand(&s)); // integers: exact sums
    CK(cudaMalloc(&dx, sizeof x));
    CK(cudaMalloc(&dout, sizeof out));
    CK(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
    k_reduce<<<1, 32>>>(dx, dout);
    CK(cudaGetLastError());
    CK(cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost));
    int bad = 0;
    float wmax = -INFINITY, wsum = 0;
    for (int i = 0; i < 32; i++) { wmax = fmaxf(wmax, x[i]); wsum += x[i]; }
    for (int lane = 0; lane < 32; lane++) {
        int q0 = lane & ~3;
        float qmax = fmaxf(fmaxf(x[q0], x[q0 + 1]), fmaxf(x[q0 + 2], x[q0 + 3]));
        float qsum = x[q0] + x[q0 + 1] + x[q0 + 2] + x[q0 + 3];
        bad += out[lane] != qmax || out[32 + lane] != qsum || out[64 + lane] != wmax || out[96 + lane] != wsum;
    }
    char msg[48];
    snprintf(msg, sizeof msg, "%d lanes wrong", bad);
    check(bad == 0, "quad_max/quad_sum/warp_max/warp_sum", msg);
    cudaFree(dx); cudaFree(dout);
}

// div_of / mod_of (tile/math.cuh) against the division they replace: divisors 1 .. 4096, powers of two, and
// large and random ones up to 2^31 - 1, each with dividends at 0, around multiples of it, random ones and 2^31 - 1.
__global__ void k_fastdiv(const fastdiv *f, const unsigned *x, unsigned *q, unsigned *r, int nx) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (i < nx) q[k * nx + i] = div_of(x[k * nx + i], f[k]), r[k * nx + i] = mod_of(x[k * nx + i], f[k]);
}
static void test_fastdiv(void) {
    const int nd = 4096 + 31 + 64, nx = 256;
    static fastdiv f[nd];
    static unsigned x[nd * nx], q[nd * nx], r[nd * nx];
    unsigned seed = 7;
    for (int k = 0; k < nd; k++) {
        unsigned d = k < 4096 ? k + 1 : k < 4096 + 31 ? 1u << (k - 4096) : 0x7fffffffu - (unsigned)(k - 4127) * 0x1000193u;
        if (k >= 4096 + 31 + 32) d = (seed = seed * 1664525u + 1013904223u) % 0x7fffffffu + 1;
        f[k] = fastdiv_of(d);
        for (int i = 0; i < nx; i++) {
            unsigned v;
            if (i == 0) v = 0;
            else if (i == 1) v = 0x7fffffffu;
            else if (i < 64) v = (unsigned)(((unsigned long long)d * (i / 2) + (i % 2 ? d - 1 : 0)) & 0x7fffffffu);
            else v = (seed = seed * 1664525u + 1013904223u) & 0x7fffffffu;
            x[k * nx + i] = v;
        }
    }
    fastdiv *df;
    unsigned *dx, *dq, *dr;
    CK(cudaMalloc(&df, sizeof f));
    CK(cudaMalloc(&dx, sizeof x));
    CK(cudaMalloc(&dq, sizeof q));
    CK(cudaMalloc(&dr, sizeof r));
    CK(cudaMemcpy(df, f, sizeof f, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
    CK(cudaMemset(dq, 0xff, sizeof q));
    k_fastdiv<<<dim3(nx / 128, nd), 128>>>(df, dx, dq, dr, nx);
    CK(cudaGetLastError());
    CK(cudaMemcpy(q, dq, sizeof q, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r, dr, sizeof r, cudaMemcpyDeviceToHost));
    int bad = 0;
    char msg[160] = "";
    for (int k = 0; k < nd; k++)
        for (int i = 0; i < nx; i++) {
            unsigned v = x[k * nx + i], d = f[k].d;
            if (q[k * nx + i] != v / d || r[k * nx + i] != v % d) {
                if (!bad++) snprintf(msg, sizeof msg, "%u / %u: got %u rem %u", v, d, q[k * nx + i], r[k * nx + i]);
            }
        }
    check(bad == 0, "div_of / mod_of equal / and % (divisors 1 .. 2^31 - 1, dividends < 2^31)", msg);
    cudaFree(df), cudaFree(dx), cudaFree(dq), cudaFree(dr);
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("gpu_tile: no CUDA device; nothing run\n");
        return 2;
    }
    test_cp_async();
    test_swizzle();
    test_ldmatrix();
    test_mma<__nv_bfloat16>("mma m16n8k16 bf16 (fragment layout, fp32 accumulate)", f2bf, bf2f);
    test_mma<__half>("mma m16n8k16 fp16 (fragment layout, fp32 accumulate)", f2h, h2f);
    test_pack2();
    test_fastdiv();
    test_wgmma<__nv_bfloat16, 128, 0>("wgmma m64n128k16 bf16, A and B from smem (K-major)", f2bf, bf2f);
    test_wgmma<__nv_bfloat16, 128, 1>("wgmma m64n128k16 bf16, A from registers, B K-major", f2bf, bf2f);
    test_wgmma<__nv_bfloat16, 128, 2>("wgmma m64n128k16 bf16, A from registers, B MN-major (transposed)", f2bf, bf2f);
    test_wgmma<__nv_bfloat16, 64, 0>("wgmma m64n64k16 bf16, A and B from smem (K-major)", f2bf, bf2f);
    test_wgmma<__nv_bfloat16, 64, 2>("wgmma m64n64k16 bf16, A from registers, B MN-major (transposed)", f2bf, bf2f);
    test_wgmma<__half, 128, 0>("wgmma m64n128k16 fp16, A and B from smem (K-major)", f2h, h2f);
    test_wgmma<__half, 128, 2>("wgmma m64n128k16 fp16, A from registers, B MN-major (transposed)", f2h, h2f);
    // The N of the prefill kernel's S (key blocks of 64 .. 176) and P·V (d_v 64 .. 256) wgmmas.
    test_wgmma<__nv_bfloat16, 96, 0>("wgmma m64n96k16 bf16, A and B from smem (K-major)", f2bf, bf2f);
    test_wgmma<__nv_bfloat16, 96, 2>("wgmma m64n96k16 bf16, A from registers, B MN-major (transposed)", f2bf, bf2f);
    test_wgmma<__nv_bfloat16, 80, 0>("wgmma m64n80k16 bf16, A and B from smem (K-major)", f2bf, bf2f);
    test_wgmma<__half, 80, 0>("wgmma m64n80k16 fp16, A and B from smem (K-major)", f2h, h2f);
    test_wgmma<__nv_bfloat16, 112, 0>("wgmma m64n112k16 bf16, A and B from smem (K-major)", f2bf, bf2f);
    test_wgmma<__half, 112, 0>("wgmma m64n112k16 fp16, A and B from smem (K-major)", f2h, h2f);
    test_wgmma<__nv_bfloat16, 176, 0>("wgmma m64n176k16 bf16, A and B from smem (K-major)", f2bf, bf2f);
    test_wgmma<__half, 176, 0>("wgmma m64n176k16 fp16, A and B from smem (K-major)", f2h, h2f);
    test_wgmma<__nv_bfloat16, 192, 0>("wgmma m64n192k16 bf16, A and B from smem (K-major)", f2bf, bf2f);
    test_wgmma<__nv_bfloat16, 192, 2>("wgmma m64n192k16 bf16, A from registers, B MN-major (transposed)", f2bf, bf2f);
    test_wgmma<__nv_bfloat16, 256, 0>("wgmma m64n256k16 bf16, A and B from smem (K-major)", f2bf, bf2f);
    test_wgmma<__nv_bfloat16, 256, 2>("wgmma m64n256k16 bf16, A from registers, B MN-major (transposed)", f2bf, bf2f);
    test_wgmma<__half, 256, 2>("wgmma m64n256k16 fp16, A from registers, B MN-major (transposed)", f2h, h2f);
    // FP8 (issue 13's prefill): e4m3 x e4m3, K-major operands, the N of S (key blocks) and of P·V (d_v).
    test_wgmma8<128, 0>("wgmma m64n128k32 e4m3, A and B from smem (K-major)");
    test_wgmma8<128, 1>("wgmma m64n128k32 e4m3, A from registers, B K-major");
    test_wgmma8<64, 0>("wgmma m64n64k32 e4m3, A and B from smem (K-major)");
    test_wgmma8<64, 1>("wgmma m64n64k32 e4m3, A from registers, B K-major");
    test_wgmma8<256, 1>("wgmma m64n256k32 e4m3, A from registers, B K-major");
    // N 96 and 192: S of 96- and 192-key blocks (FP8 tiles between FlashAttention-3's 128 and 224)
    test_wgmma8<192, 0>("wgmma m64n192k32 e4m3, A and B from smem (K-major)");
    test_wgmma8<192, 1>("wgmma m64n192k32 e4m3, A from registers, B K-major");
    test_wgmma8<96, 1>("wgmma m64n96k32 e4m3, A from registers, B K-major");
    test_pv8<128>("P.V in e4m3: pack_p_e4m3 (S's accumulator layout) x transpose_v_e4m3, d_v 128");
    test_pv8<64>("P.V in e4m3: pack_p_e4m3 (S's accumulator layout) x transpose_v_e4m3, d_v 64");
    test_pv8<256>("P.V in e4m3: pack_p_e4m3 (S's accumulator layout) x transpose_v_e4m3, d_v 256");
    test_pv8<256, 64>("P.V in e4m3 over 64 keys: Vt in 64-byte rows (64-byte swizzle, wgmma_desc_k64), d_v 256");
    // Key blocks past 128 (FlashAttention-3's FP8 tiles are 128 x 224 at d 128, 128 x 128 at d 256): Vt in atoms
    test_pv8<128, 192>("P.V in e4m3 over 192 keys: Vt in two 128-byte atoms (the second half-full), d_v 128");
    test_pv8<128, 256>("P.V in e4m3 over 256 keys: Vt in two 128-byte atoms, d_v 128");
    test_pv8<256, 192>("P.V in e4m3 over 192 keys: Vt in two 128-byte atoms, d_v 256");
    test_mbarrier();
    test_bulk_copy();
    test_tma();
    test_math();
    test_reductions();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
