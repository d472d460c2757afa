/* cpu.h — the CPU backend's internals: tile sizes, the run context, fp32 math helpers, threads. */
#ifndef FLASHC_CPU_H
#define FLASHC_CPU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

/* Tile shape: BM packed query rows (query row r of head-in-group hh is packed row r*group + hh: all
 * query heads that share a KV head go through one item, so each converted K/V block serves them all)
 * against blocks of BK keys (a multiple of 16). Register tiles of RT rows x 16 columns. Measured on
 * Zen 3 (d = 128): RT 6 beats 4 by ~40%; BM 128 beats 64 by ~20% (fewer K/V conversions per flop). */
#define FC_CPU_BM 128
#define FC_CPU_BK 64
#define FC_CPU_RT 6
#define FC_CPU_PREFETCH_ROWS 16 /* K/V rows requested ahead of use */

#if defined(__GNUC__)
#define FC_CPU_INLINE static inline __attribute__((always_inline))
#else
#define FC_CPU_INLINE static inline
#endif

/* a*b + c, fused where the machine has FMA (-std=c11 turns off contraction, so ask for it). */
FC_CPU_INLINE float fc_madd(float a, float b, float c) {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
    return fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

/* The running sum o + c (c: the rounding error o has lost) becomes alpha (o + c) + b: t = alpha o +
 * (alpha c + b) rounded, and c its error by Fast2Sum, exact while |alpha o| >= |alpha c + b| (the case
 * where it matters: o holding many blocks, b one more). alpha o itself is not compensated (alpha < 1
 * only when the running max grows). */
FC_CPU_INLINE void fc_comp_add(float *o, float *c, float alpha, float b) {
    float s = alpha * *o, y = fc_madd(alpha, *c, b), t = s + y;
    *c = (s - t) + y;
    *o = t;
}

FC_CPU_INLINE float fc_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
FC_CPU_INLINE uint32_t fc_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* exp(x) in fp32 within about 1 ulp, branch-free so loops over it vectorize. Below -88 (and for -inf)
 * it returns 0; NaN also gives 0 (inputs here are scores minus their running max, never NaN: a row
 * with a NaN or +inf score is set aside before, see softmax_row in tile.c). */
FC_CPU_INLINE float fc_cpu_exp(float x) {
    x = x >= -88.0f ? x : -88.0f;
    x = x <= 88.0f ? x : 88.0f;
    float n = fc_madd(x, 1.44269504088896341f, 12582912.0f) - 12582912.0f; /* round(x / ln 2) */
    float r = fc_madd(n, -0.693359375f, x);                              /* x - n ln 2, Cody-Waite */
    r = fc_madd(n, 2.12194440e-4f, r);
    float e = 1.9875691500e-4f;                                           /* exp(r), |r| <= ln2/2 */
    e = fc_madd(e, r, 1.3981999507e-3f);
    e = fc_madd(e, r, 8.3334519073e-3f);
    e = fc_madd(e, r, 4.1665795894e-2f);
    e = fc_madd(e, r, 1.6666665459e-1f);
    e = fc_madd(e, r, 5.0000001201e-1f);
    e = fc_madd(e, r * r, r) + 1.0f;
    int32_t k = (int32_t)n + 127; /* 0 for x near -88: 2^n flushes to 0 */
    return e * fc_bits_to_f32((uint32_t)k << 23);
}

/* fp16 bits to float, branch-free (vectorizes); equal to fc_f16_to_f32. */
FC_CPU_INLINE float fc_cpu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t u = fc_f32_to_bits(fc_bits_to_f32(em) * 0x1p112f); /* rebias; subnormals come out exact */
    u = (h & 0x7c00u) == 0x7c00u ? (em | 0x7f800000u) : u;     /* inf, NaN */
    return fc_bits_to_f32(u | sign);
}

/* dst[0..n) = elements off .. off+n-1 of a bf16/fp16/fp32 array, as float. */
void fc_cpu_load_row(const void *base, fc_dtype dt, int64_t off, int n, float *restrict dst);
/* An fp8 cache's dequantisation scale of (sequence b, KV head h): s[b*sb + h*sh], or 1 (s NULL). */
float fc_cpu_descale(const float *s, int64_t sb, int64_t sh, int b, int h);

/* ---------------------------------------------------------------------------------------------- */
/* Threads (threads.c).                                                                            */

/* fn(ctx, item, worker) for every item in [0, n_items), spread over up to n_workers threads (the
 * caller's thread is worker 0; worker < n_workers). Runs inline when n_workers <= 1 or n_items <= 1. */
typedef void (*fc_cpu_task)(void *ctx, int64_t item, int worker);
void fc_cpu_parallel_for(int64_t n_items, int n_workers, fc_cpu_task fn, void *ctx);

/* ---------------------------------------------------------------------------------------------- */
/* Merge (merge.c): the one routine behind fc_merge_states and the split-KV combine.               */

/* Merge n partial states of one (row, head): out_s at element op_off + s*op_sn of op (op_dt), lse_s at
 * lp[s*lp_sn]. Writes d_v elements of out (out_dt) from element out_off, and *lse unless lse is NULL. */
void fc_cpu_merge_row(int n, int d_v, const void *op, fc_dtype op_dt, int64_t op_off, int64_t op_sn,
                      const float *lp, int64_t lp_sn, void *out, fc_dtype out_dt, int64_t out_off, float *lse);

/* ---------------------------------------------------------------------------------------------- */
/* Append and rotary (append.c).                                                                   */

/* Rotate x[0 .. rotary_dim) in place to absolute position pos (fp32). */
void fc_cpu_rotate(const fc_problem *p, float *x, int pos);

/* Write k_new/v_new into the cache (k_new rotated first when rotary is set). row: d floats of scratch. */
void fc_cpu_append(const fc_problem *p, float *row);

/* ---------------------------------------------------------------------------------------------- */
/* Attention work items (attn.c schedules them, tile.c computes them).                             */

/* A tile: packed query rows [m0, m0 + rows) of sequence b, KV head hk. */
typedef struct fc_cpu_tile {
    int b, hk, m0, rows;
} fc_cpu_tile;

typedef struct fc_cpu_attn {
    const fc_problem *p;
    int group;                 /* query heads per KV head */
    int splits;                /* key splits per tile; items = tiles * splits */
    float qscale;              /* folded into Q: scale, or 1 with a softcap */
    void (*run)(const struct fc_cpu_attn *, const struct fc_cpu_tile *, int, float *); /* fc_cpu_isa_chosen's */
    const fc_cpu_tile *tiles;
    int64_t n_tiles;
    float *scratch;            /* per worker: scratch_floats floats */
    size_t scratch_floats;
    float *part_out, *part_lse; /* splits > 1: fp32 partials (split, global row, h_q[, d_v]) */
    int64_t part_rows;         /* global query rows: dense batch*s_q, varlen total_q */
} fc_cpu_attn;

/* Floats of per-worker scratch that fc_cpu_run_item needs. */
size_t fc_cpu_scratch_floats(const fc_problem *p);

/* Compute split `split` of tile `t`: straight into out/lse when a->splits == 1, else into the partials. */
void fc_cpu_run_item(const fc_cpu_attn *a, const fc_cpu_tile *t, int split, float *scratch);
/* The same, built for x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512) where the Makefile's CPU_ISAS has them. */
void fc_cpu_run_item_v3(const fc_cpu_attn *a, const fc_cpu_tile *t, int split, float *scratch);
void fc_cpu_run_item_v4(const fc_cpu_attn *a, const fc_cpu_tile *t, int split, float *scratch);
#ifdef FC_CPU_ISA
#define FC_CPU_ISA_PASTE(f, isa) f##_##isa
#define FC_CPU_ISA_NAME2(f, isa) FC_CPU_ISA_PASTE(f, isa)
#define FC_CPU_ISA_NAME(f) FC_CPU_ISA_NAME2(f, FC_CPU_ISA)
#else
#define FC_CPU_ISA_NAME(f) f
#endif

/* The instruction set fc_cpu_run_item runs in: the best of the built variants this CPU has, or the one
 * the environment variable FLASHC_CPU_ISA names (baseline, v3, v4; read once; one the CPU lacks or the
 * build has not is ignored). */
typedef void (*fc_cpu_run_fn)(const fc_cpu_attn *a, const fc_cpu_tile *t, int split, float *scratch);
typedef struct fc_cpu_isa {
    const char *name; /* "x86-64", "x86-64-v3", "x86-64-v4", or "generic" off x86-64 */
    fc_cpu_run_fn run;
} fc_cpu_isa;
const fc_cpu_isa *fc_cpu_isa_chosen(void);

/* Merge the partials of tile t into out/lse (a->splits > 1). */
void fc_cpu_merge_tile(const fc_cpu_attn *a, const fc_cpu_tile *t);

#endif /* FLASHC_CPU_H */
