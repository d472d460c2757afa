/* kernels.h — the CPU backend's inner loops per instruction set: the two matrix products of a key
 * block in register tiles of R query rows x 16 columns, and the 8 x 8 transpose of key rows.
 * AVX2+FMA intrinsics on x86, GNU C 128-bit vectors elsewhere (SSE, NEON), plain C otherwise.
 * With BK = FC_CPU_BK: q [R][d], kt [d][BK] (keys transposed), s and pr [R][BK], v [BK][d_v],
 * o [R][d_v]. Each call covers 16 columns of s or o; kt, v, s, o come already offset to them.
 * P V sums the block's keys from zero in registers and adds that sum to alpha o once: o takes one
 * rounding per key block, not one per key (tile.c folds o into a compensated sum every few blocks). */
#ifndef FLASHC_CPU_KERNELS_H
#define FLASHC_CPU_KERNELS_H

#include "cpu/cpu.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define FC_CPU_AVX2 1
#endif

/* dst[c][jj] = src[jj][c] for an 8 x 8 block (src row stride lds, dst row stride ldd). */
static inline void transpose8(const float *restrict src, int lds, float *restrict dst, int ldd) {
#ifdef FC_CPU_AVX2
    __m256 r[8], t[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
#else
    for (int jj = 0; jj < 8; jj++)
        for (int c = 0; c < 8; c++) dst[c * ldd + jj] = src[jj * lds + c];
#endif
}

#ifdef FC_CPU_AVX2

/* s[R][0..16) = q[R][d] . kt[d][0..16)   (kt, s: row stride BK) */
FC_CPU_INLINE void qk_rows(int R, const float *restrict q, int d, const float *restrict kt, float *restrict s) {
    __m256 acc[FC_CPU_RT][2];
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int c = 0; c < d; c++) {
        __m256 k0 = _mm256_loadu_ps(kt + c * FC_CPU_BK), k1 = _mm256_loadu_ps(kt + c * FC_CPU_BK + 8);
        for (int i = 0; i < R; i++) {
            __m256 x = _mm256_broadcast_ss(q + i * d + c);
            acc[i][0] = _mm256_fmadd_ps(x, k0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(x, k1, acc[i][1]);
        }
    }
    for (int i = 0; i < R; i++) {
        _mm256_storeu_ps(s + i * FC_CPU_BK, acc[i][0]);
        _mm256_storeu_ps(s + i * FC_CPU_BK + 8, acc[i][1]);
    }
}

/* o[R][0..16) = alpha[R] * o + pr[R][FC_CPU_BK] . v[FC_CPU_BK][0..16)   (v, o: row stride d_v) */
FC_CPU_INLINE void pv_rows(int R, const float *restrict pr, const float *restrict v, int dv, const float *restrict alpha,
                           float *restrict o) {
    __m256 acc[FC_CPU_RT][2];
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int j = 0; j < FC_CPU_BK; j++) {
        __m256 v0 = _mm256_loadu_ps(v + j * dv), v1 = _mm256_loadu_ps(v + j * dv + 8);
        for (int i = 0; i < R; i++) {
            __m256 x = _mm256_broadcast_ss(pr + i * FC_CPU_BK + j);
            acc[i][0] = _mm256_fmadd_ps(x, v0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(x, v1, acc[i][1]);
        }
    }
    for (int i = 0; i < R; i++) {
        __m256 a = _mm256_broadcast_ss(alpha + i);
        _mm256_storeu_ps(o + i * dv, _mm256_fmadd_ps(a, _mm256_loadu_ps(o + i * dv), acc[i][0]));
        _mm256_storeu_ps(o + i * dv + 8, _mm256_fmadd_ps(a, _mm256_loadu_ps(o + i * dv + 8), acc[i][1]));
    }
}

#elif defined(__GNUC__) /* GNU C vectors: 128-bit (SSE, NEON) or whatever the target has */

typedef float fc_v4 __attribute__((vector_size(16)));

FC_CPU_INLINE fc_v4 v4_load(const float *p) { fc_v4 x; memcpy(&x, p, sizeof x); return x; }
FC_CPU_INLINE void v4_store(float *p, fc_v4 x) { memcpy(p, &x, sizeof x); }

/* s[R][0..16) = q[R][d] . kt[d][0..16)   (kt, s: row stride BK) */
FC_CPU_INLINE void qk_rows(int R, const float *restrict q, int d, const float *restrict kt, float *restrict s) {
    fc_v4 acc[FC_CPU_RT][4];
    for (int i = 0; i < R; i++)
        for (int u = 0; u < 4; u++) acc[i][u] = (fc_v4){0, 0, 0, 0};
    for (int c = 0; c < d; c++) {
        fc_v4 k[4];
        for (int u = 0; u < 4; u++) k[u] = v4_load(kt + c * FC_CPU_BK + 4 * u);
        for (int i = 0; i < R; i++) {
            float x = q[i * d + c];
            for (int u = 0; u < 4; u++) acc[i][u] += x * k[u];
        }
    }
    for (int i = 0; i < R; i++)
        for (int u = 0; u < 4; u++) v4_store(s + i * FC_CPU_BK + 4 * u, acc[i][u]);
}

/* o[R][0..16) = alpha[R] * o + pr[R][FC_CPU_BK] . v[FC_CPU_BK][0..16)   (v, o: row stride d_v) */
FC_CPU_INLINE void pv_rows(int R, const float *restrict pr, const float *restrict v, int dv, const float *restrict alpha,
                           float *restrict o) {
    fc_v4 acc[FC_CPU_RT][4];
    for (int i = 0; i < R; i++)
        for (int u = 0; u < 4; u++) acc[i][u] = (fc_v4){0, 0, 0, 0};
    for (int j = 0; j < FC_CPU_BK; j++) {
        fc_v4 vj[4];
        for (int u = 0; u < 4; u++) vj[u] = v4_load(v + j * dv + 4 * u);
        for (int i = 0; i < R; i++) {
            float x = pr[i * FC_CPU_BK + j];
            for (int u = 0; u < 4; u++) acc[i][u] += x * vj[u];
        }
    }
    for (int i = 0; i < R; i++)
        for (int u = 0; u < 4; u++) v4_store(o + i * dv + 4 * u, alpha[i] * v4_load(o + i * dv + 4 * u) + acc[i][u]);
}

#else /* portable C: the same loops, left to the compiler */

/* s[R][0..16) = q[R][d] . kt[d][0..16)   (kt, s: row stride BK) */
FC_CPU_INLINE void qk_rows(int R, const float *restrict q, int d, const float *restrict kt, float *restrict s) {
    float acc[FC_CPU_RT][16] = {{0}};
    for (int c = 0; c < d; c++) {
        const float *restrict k = kt + c * FC_CPU_BK;
        for (int i = 0; i < R; i++) {
            float x = q[i * d + c];
            for (int j = 0; j < 16; j++) acc[i][j] = fc_madd(x, k[j], acc[i][j]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 16; j++) s[i * FC_CPU_BK + j] = acc[i][j];
}

/* o[R][0..16) = alpha[R] * o + pr[R][FC_CPU_BK] . v[FC_CPU_BK][0..16)   (v, o: row stride d_v) */
FC_CPU_INLINE void pv_rows(int R, const float *restrict pr, const float *restrict v, int dv, const float *restrict alpha,
                           float *restrict o) {
    float acc[FC_CPU_RT][16] = {{0}};
    for (int j = 0; j < FC_CPU_BK; j++) {
        const float *restrict vj = v + j * dv;
        for (int i = 0; i < R; i++) {
            float x = pr[i * FC_CPU_BK + j];
            for (int c = 0; c < 16; c++) acc[i][c] = fc_madd(x, vj[c], acc[i][c]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int c = 0; c < 16; c++) o[i * dv + c] = fc_madd(alpha[i], o[i * dv + c], acc[i][c]);
}
#endif


#endif /* FLASHC_CPU_KERNELS_H */
