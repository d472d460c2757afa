/* testutil.h — shared helpers of the C tests: RNG, bf16/fp16/fp32 rounding and storage, counters. */
#ifndef FLASHC_TESTUTIL_H
#define FLASHC_TESTUTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashc.h"

/* ---------------------------------------------------------------------------------------------- */
/* Random numbers (splitmix64): reproducible, never exactly zero for the value fills.               */

static inline uint64_t tu_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static inline double tu_uniform(uint64_t *s) {
    return ((double)(tu_rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [lo, hi]. */
static inline int tu_randint(uint64_t *s, int lo, int hi) {
    return lo + (int)(tu_rng_next(s) % (uint64_t)(hi - lo + 1));
}

/* Approximately standard normal (Irwin–Hall of 4, scaled to unit variance); zero has probability 0. */
static inline double tu_normal(uint64_t *s) {
    double x = tu_uniform(s) + tu_uniform(s) + tu_uniform(s) + tu_uniform(s) - 2.0;
    return x * 1.7320508075688772;
}

/* ---------------------------------------------------------------------------------------------- */
/* Rounding to a storage format (round to nearest even; overflow to inf) and bit encodings.         */

static inline double tu_round_prec(double x, int prec, int emin, double maxv) {
    if (x == 0 || !isfinite(x)) return x;
    int e;
    frexp(x, &e);
    int lead = e - 1 < emin ? emin : e - 1; /* exponent of the leading bit (clamped: subnormals) */
    double quantum = ldexp(1.0, lead - (prec - 1));
    double r = nearbyint(x / quantum) * quantum; /* default rounding mode: to nearest even */
    return fabs(r) > maxv ? copysign(INFINITY, x) : r;
}

/* FP8 (OCP): e4m3 (4 significant bits, normals down to 2^-6, largest 448, no infinities) and e5m2 (3 bits,
 * 2^-14, largest 57344). Stores saturate at the largest finite value; NaN stays NaN. */
static inline int tu_is_fp8(fc_dtype dt) { return dt == FC_E4M3 || dt == FC_E5M2; }

static inline double tu_round_fp8(fc_dtype dt, double x) {
    double maxv = dt == FC_E4M3 ? 448.0 : 57344.0;
    if (isnan(x)) return x;
    if (fabs(x) >= maxv) return copysign(maxv, x);
    double r = dt == FC_E4M3 ? tu_round_prec(x, 4, -6, INFINITY) : tu_round_prec(x, 3, -14, INFINITY);
    return fabs(r) > maxv ? copysign(maxv, x) : r;
}

/* The value x takes once stored as dt (FC_BF16, FC_FP16, FC_FP32, FC_E4M3, FC_E5M2). */
static inline double tu_round(fc_dtype dt, double x) {
    switch (dt) {
    case FC_BF16: return tu_round_prec(x, 8, -126, 0x1.fep127);
    case FC_FP16: return tu_round_prec(x, 11, -14, 65504.0);
    case FC_E4M3: case FC_E5M2: return tu_round_fp8(dt, x);
    default: return tu_round_prec(x, 24, -126, 0x1.fffffep127);
    }
}

/* Bits of an fp8 value (x representable in dt, or NaN). */
static inline uint8_t tu_fp8_bits(fc_dtype dt, double x) {
    int mb = dt == FC_E4M3 ? 3 : 2, bias = dt == FC_E4M3 ? 7 : 15;
    if (isnan(x)) return 0x7f;
    uint8_t sign = signbit(x) ? 0x80 : 0;
    double a = fabs(x);
    if (a == 0) return sign;
    if (a < ldexp(1.0, 1 - bias)) return sign | (uint8_t)ldexp(a, bias - 1 + mb); /* subnormal */
    int e;
    double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    return sign | (uint8_t)((e - 1 + bias) << mb) | (uint8_t)(ldexp(m, mb + 1) - (1 << mb));
}

static inline double tu_fp8_to_double(fc_dtype dt, uint8_t u) {
    int mb = dt == FC_E4M3 ? 3 : 2, bias = dt == FC_E4M3 ? 7 : 15, emax = dt == FC_E4M3 ? 15 : 31;
    int e = (u & 0x7f) >> mb, m = u & ((1 << mb) - 1);
    double v;
    if (dt == FC_E4M3 && e == emax && m == 7) v = NAN;
    else if (dt == FC_E5M2 && e == emax) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, 1 - bias - mb);
    else v = ldexp((double)((1 << mb) | m), e - bias - mb);
    return (u & 0x80) ? -v : v;
}

/* The FP8 MMA (QGMMA) adds its products at reduced precision: measured on the H100 up to 2^-13 of
 * sum |a b| (DeepSeek-V3's report says ~14 bits of Hopper's FP8 GEMM); the tests allow 2^-11 of it. */
#define FP8_MMA_REL_ERR 0x1p-11

/* Relative spacing of dt: 2^-(significant bits - 1). */
static inline double tu_eps(fc_dtype dt) {
    return dt == FC_BF16 ? 0x1p-7 : dt == FC_FP16 ? 0x1p-10 : dt == FC_E4M3 ? 0x1p-3 : dt == FC_E5M2 ? 0x1p-2 : 0x1p-23;
}

/* Half the spacing of dt at |x| (normal range): what rounding a value near x to dt may move it. */
static inline double tu_half_step(fc_dtype dt, double x) {
    if (x == 0 || !isfinite(x)) return 0;
    int e;
    frexp(x, &e);
    return ldexp(tu_eps(dt), e - 2); /* eps 2^(e-1) / 2 */
}

/* An output element's error against ref64 beyond its final rounding to dt: FlashAttention's rule bounds
 * what the kernel computed before it stored the value; storing it may round either way by half a step
 * (a fp32 value near a midpoint lands on either side, whichever order the sums ran in). The larger
 * magnitude picks the step, so a value rounded up into the next binade is not charged for it. NaN stays. */
static inline double tu_err_beyond_rounding(fc_dtype dt, double got, double ref) {
    double e = fabs(got - ref) - tu_half_step(dt, fmax(fabs(got), fabs(ref)));
    return e > 0 || isnan(e) ? e : 0;
}

static inline double tu_bf16_to_double(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* x must be representable in bf16 (or NaN/inf). */
static inline uint16_t tu_bf16_bits(double x) {
    if (isnan(x)) return 0x7fc0;
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static inline double tu_fp16_to_double(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp((double)(m | 1024), e - 25);
    return sign ? -v : v;
}

/* x must be representable in fp16 (or NaN/inf). */
static inline uint16_t tu_fp16_bits(double x) {
    if (isnan(x)) return 0x7e00;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (isinf(a)) return sign | 0x7c00;
    if (a == 0) return sign;
    if (a < 0x1p-14) return sign | (uint16_t)ldexp(a, 24); /* subnormal */
    int e;
    double m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(ldexp(m, 11) - 1024);
}

/* Element i of a bf16/fp16/fp32/int32 array as a double. */
static inline double tu_load(const void *p, fc_dtype dt, int64_t i) {
    switch (dt) {
    case FC_BF16: return tu_bf16_to_double(((const uint16_t *)p)[i]);
    case FC_FP16: return tu_fp16_to_double(((const uint16_t *)p)[i]);
    case FC_FP32: return ((const float *)p)[i];
    case FC_E4M3: case FC_E5M2: return tu_fp8_to_double(dt, ((const uint8_t *)p)[i]);
    default: return ((const int32_t *)p)[i];
    }
}

/* Stores x (rounded to nearest even) as element i of a bf16/fp16/fp32/int32 array. */
static inline void tu_store(void *p, fc_dtype dt, int64_t i, double x) {
    switch (dt) {
    case FC_BF16: ((uint16_t *)p)[i] = tu_bf16_bits(tu_round(dt, x)); break;
    case FC_FP16: ((uint16_t *)p)[i] = tu_fp16_bits(tu_round(dt, x)); break;
    case FC_FP32: ((float *)p)[i] = (float)x; break;
    case FC_E4M3: case FC_E5M2: ((uint8_t *)p)[i] = tu_fp8_bits(dt, tu_round(dt, x)); break;
    default: ((int32_t *)p)[i] = (int32_t)x; break;
    }
}

static inline size_t tu_esize(fc_dtype dt) { return dt == FC_BF16 || dt == FC_FP16 ? 2 : tu_is_fp8(dt) ? 1 : 4; }

static inline const char *tu_dtype_name(fc_dtype dt) {
    return dt == FC_BF16 ? "bf16" : dt == FC_FP16 ? "fp16" : dt == FC_FP32 ? "fp32" : dt == FC_E4M3 ? "e4m3"
         : dt == FC_E5M2 ? "e5m2" : "int32";
}

/* Element offset of index idx in a strided tensor. */
static inline int64_t tu_offset(const fc_tensor *t, const int64_t *idx) {
    int64_t o = 0;
    for (int k = 0; k < t->ndim; k++) o += idx[k] * t->stride[k];
    return o;
}

/* Fills n elements of dtype dt at p with NaN (the poison of outputs). */
static inline void tu_poison(void *p, fc_dtype dt, int64_t n) {
    for (int64_t i = 0; i < n; i++) tu_store(p, dt, i, NAN);
}

/* ---------------------------------------------------------------------------------------------- */
/* Counting checks: each test file ends with exactly one line "N passed, M failed".                */

static int tu_passed, tu_failed;

/* Records one check; on failure prints "FAIL: <message>". Returns ok. */
static inline int tu_check(int ok, const char *fmt, ...) {
    if (ok) {
        tu_passed++;
        return 1;
    }
    tu_failed++;
    va_list ap;
    va_start(ap, fmt);
    printf("  FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    return 0;
}

static inline int tu_finish(void) {
    printf("%d passed, %d failed\n", tu_passed, tu_failed);
    return tu_failed > 0;
}

#endif /* FLASHC_TESTUTIL_H */
