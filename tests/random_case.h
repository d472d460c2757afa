/* random_case.h — one random attention case per seed: the generator of gpu_random and test_random. */
/*
 * random_cfg(seed) draws every axis of a cfg (problem.h) from the seed alone, and rc_data_seed(seed) is
 * the seed of its values, so a seed names one case exactly: gpu_random (GPU vs CPU vs float64) and
 * test_random (CPU vs float64) build the same case from the same seed, with the same layouts (RC_OPTS,
 * the CUDA backend's). Neighbouring seeds give unrelated cases.
 *
 * What is drawn: dtype bf16/fp16; (d, d_v) every pair of {64, 96, 128, 192, 256}, d = d_v and
 * (192, 128) most often, and any multiples of 8 up to 256 one time in ten; h_k 1..8 and a group of 1..16 (MHA, GQA, MQA), h_q <= 32; batch 1..8;
 * lengths 0, 1, short, medium (most), tile edges, and long (301..2048, then one or two sequences);
 * masks none, causal, a window (wl, wr from -1 to past the key length), causal with
 * a left window; softcap; scale; ALiBi (h_q) and (b, h_q); sinks; lse or not; dense, varlen (empty
 * sequences) and paged KV (page sizes 1 to 256); varlen queries; seqused_k; append (s_new 1..8) with
 * or without rotary (interleaved or not, rotary_dim d, d/2 or any even value, fp32 or q-dtype tables);
 * dense caches indexed (kv_batch_idx) and padded (kv_leftpad) one time in five;
 * padded strides or q/k/v slices of one packed tensor; NaN in the unused cache rows (page-table entries
 * -1); num_splits 1, several, up to 128, 0 (the library's choice), and sometimes a second count to
 * compare with. The work (b s_q s_k h_q (d + d_v)) is then cut to RC_MAX_WORK: fewer sequences, then
 * fewer heads, then shorter lengths.
 */
#ifndef FLASHC_TESTS_RANDOM_CASE_H
#define FLASHC_TESTS_RANDOM_CASE_H

#include "problem.h"

/* The CUDA backend's layouts (as gpu_attn): 16-byte padding of q, k, v, out only; max_seqlen given. */
__attribute__((unused)) static const prob_opts RC_OPTS = {.pad = 8, .pad_all = 0, .max_seqlen = 1, .fast_fill = 1};

/* Multiply-adds of one case at most (b s_q s_k h_q (d + d_v)). */
#define RC_MAX_WORK 1.2e8

static inline int rc_chance(uint64_t *r, int percent) { return tu_randint(r, 0, 99) < percent; }

static inline int rc_pick(uint64_t *r, const int *v, int n) { return v[tu_randint(r, 0, n - 1)]; }

/* A sequence length: 0, 1, short, around a tile edge, medium (most often), long. */
static inline int rc_length(uint64_t *r) {
    static const int edges[] = {63, 64, 65, 127, 128, 129, 175, 176, 177, 191, 192, 193, 255, 256, 257};
    int k = tu_randint(r, 0, 99);
    if (k < 5) return 0;
    if (k < 14) return 1;
    if (k < 40) return tu_randint(r, 2, 32);
    if (k < 50) return rc_pick(r, edges, (int)(sizeof edges / sizeof edges[0]));
    if (k < 93) return tu_randint(r, 33, 300);
    return tu_randint(r, 301, 2048);
}

static inline void rc_dims(cfg *c, uint64_t *r) {
    static const int hd[5] = {64, 96, 128, 192, 256};
    int k = tu_randint(r, 0, 99);
    if (k < 50) {
        c->d = c->d_v = rc_pick(r, hd, 5);
    } else if (k < 65) {
        c->d = 192, c->d_v = 128;
    } else if (k < 75) { /* any multiple of 8 up to 256 (the next kernel up on CUDA) */
        c->d = 8 * tu_randint(r, 1, 32);
        c->d_v = k < 70 ? c->d : 8 * tu_randint(r, 1, 32);
    } else {
        c->d = rc_pick(r, hd, 5);
        c->d_v = rc_pick(r, hd, 5);
    }
}

/* h_k and the group h_q / h_k: MHA, GQA and MQA (h_k 1), h_q <= 32. */
static inline void rc_heads(cfg *c, uint64_t *r) {
    static const int hk[] = {1, 1, 1, 2, 2, 3, 4, 8}, group[] = {1, 1, 1, 2, 3, 4, 5, 6, 8, 16};
    c->h_k = rc_pick(r, hk, (int)(sizeof hk / sizeof hk[0]));
    int g = rc_pick(r, group, (int)(sizeof group / sizeof group[0]));
    while (c->h_k * g > 32) g /= 2;
    c->h_q = c->h_k * g;
}

/* A window bound: unbounded, 0, or anywhere up to a little past the key length. */
static inline int rc_bound(cfg *c, uint64_t *r) {
    int k = tu_randint(r, 0, 99);
    return k < 25 ? -1 : k < 35 ? 0 : tu_randint(r, 1, c->s_k + 8);
}

static inline void rc_mask(cfg *c, uint64_t *r) {
    int k = tu_randint(r, 0, 99);
    c->causal = 0;
    c->wl = c->wr = -1;
    if (k < 35) return;
    if (k < 65) {
        c->causal = 1;
    } else if (k < 85) {
        c->wl = rc_bound(c, r);
        c->wr = rc_bound(c, r);
    } else {
        c->causal = 1;
        c->wl = tu_randint(r, 0, c->s_k + 8);
    }
}

/* Dense, varlen or paged KV; varlen queries; seqused_k; append with or without rotary. */
static inline void rc_layout(cfg *c, uint64_t *r) {
    static const int pages[] = {1, 3, 5, 16, 16, 32, 64, 64, 100, 128, 200, 256};
    int k = tu_randint(r, 0, 99);
    c->kv = k < 40 ? KV_DENSE : k < 65 ? KV_VARLEN : KV_PAGED;
    c->page_size = rc_pick(r, pages, (int)(sizeof pages / sizeof pages[0]));
    c->q_varlen = rc_chance(r, 40);
    k = tu_randint(r, 0, 99);
    c->seqused = k < 40 ? 0 : k < 80 ? 1 : 2;
    if (c->kv != KV_VARLEN && !c->q_varlen && rc_chance(r, 30)) {
        c->s_new = tu_randint(r, 1, 8);
        if (c->s_k < c->s_new) c->s_k = c->s_new;
        if (rc_chance(r, 50)) {
            c->s_q = tu_randint(r, 1, c->s_new); /* rotary positions of the queries stay >= 0 */
            k = tu_randint(r, 0, 99);
            c->rot_dim = k < 40 ? c->d : k < 70 ? c->d / 2 : 2 * tu_randint(r, 1, c->d / 2);
            c->rot_inter = rc_chance(r, 50);
            c->rot_f32 = rc_chance(r, 50);
        }
    }
    int packable = c->kv == KV_DENSE && !c->q_varlen && !c->s_new && c->d == c->d_v;
    if (packable && rc_chance(r, 15)) {
        c->layout = LAYOUT_PACKED;
        c->s_k = c->s_q;
    } else {
        c->layout = rc_chance(r, 20) ? LAYOUT_PADDED : LAYOUT_CONTIG;
    }
    c->nan_unused = rc_chance(r, 15);
    if (c->kv == KV_DENSE && c->layout != LAYOUT_PACKED && rc_chance(r, 20))
        c->kv_index = tu_randint(r, 1, 3); /* kv_batch_idx, kv_leftpad or both */
}

static inline void rc_splits(cfg *c, uint64_t *r) {
    static const int splits[] = {1, 1, 1, 2, 3, 4, 5, 8, 0, 0, 0, 0, 16, 64, 128};
    int n = (int)(sizeof splits / sizeof splits[0]);
    c->nsplits = rc_chance(r, 15) ? 2 : 1;
    c->splits[0] = rc_pick(r, splits, n);
    if (c->nsplits == 2)
        do c->splits[1] = rc_pick(r, splits, n);
        while (c->splits[1] == c->splits[0]);
}

static inline double rc_work(const cfg *c) {
    return (double)c->b * c->s_q * (c->s_k + c->s_new) * c->h_q * (c->d + c->d_v);
}

/* Cuts the work to RC_MAX_WORK: sequences, then heads, then the longer length (keeping s_k >= s_new,
 * the rotary rule s_q <= s_new, and s_q = s_k of a packed layout). */
static inline void rc_fit(cfg *c) {
    while (rc_work(c) > RC_MAX_WORK) {
        if (c->b > 1) {
            c->b /= 2;
        } else if (c->h_q > c->h_k) {
            c->h_q = c->h_k * (c->h_q / c->h_k / 2);
        } else if (c->h_k > 1) {
            c->h_q = c->h_k = c->h_k / 2;
        } else if (c->layout == LAYOUT_PACKED) {
            c->s_q = c->s_k = c->s_q / 2;
        } else if (c->s_k >= c->s_q && c->s_k / 2 >= c->s_new) {
            c->s_k /= 2;
        } else {
            c->s_q /= 2;
        }
    }
}

/* fp8, drawn last (the other axes of a seed stay as they were), on cases with whole 16-byte chunks of fp8 per
 * row: decode shapes (s_q x h_q / h_k <= 16 packed rows) get fp8 caches (e4m3 or e5m2, as the CUDA decode kernel
 * runs them), the others FP8 attention (q, k, v e4m3: the CUDA prefill on e4m3 tiles) where nothing is appended
 * or rotated. */
static inline void rc_fp8(cfg *c, uint64_t *r) {
    int decode = (int64_t)c->s_q * (c->h_q / c->h_k) <= 16;
    if (c->d % 16 || c->d_v % 16 || c->layout == LAYOUT_PACKED) return;
    if (!decode) {
        if (c->s_new || c->rot_dim || !rc_chance(r, 20)) return;
        c->fp8 = 1, c->fp8_q = 1;
        c->descale = tu_randint(r, 0, 2);
        return;
    }
    if (!rc_chance(r, 30)) return;
    c->fp8 = rc_chance(r, 50) ? 1 : 2;
    c->descale = tu_randint(r, 0, 2);
}

/* The case of a seed. */
static inline void random_cfg(cfg *c, uint64_t seed) {
    uint64_t r = seed ^ 0x52414e444f4dull; /* its own stream: the values use rc_data_seed */
    *c = cfg_base();
    c->dt = rc_chance(&r, 50) ? FC_BF16 : FC_FP16;
    rc_dims(c, &r);
    rc_heads(c, &r);
    c->b = rc_chance(&r, 30) ? 1 : tu_randint(&r, 2, MAX_BATCH);
    c->s_q = rc_length(&r);
    c->s_k = rc_chance(&r, 10) ? c->s_q : rc_length(&r);
    if (c->s_q > 300 || c->s_k > 300) c->b = tu_randint(&r, 1, 2); /* long: one or two sequences */
    rc_mask(c, &r);
    c->softcap = rc_chance(&r, 25) ? (float)(1 + 49 * tu_uniform(&r)) : 0;
    c->scale = rc_chance(&r, 20) ? (float)(0.02 + 0.48 * tu_uniform(&r)) : 0;
    int k = tu_randint(&r, 0, 99);
    c->alibi = k < 70 ? 0 : k < 85 ? 1 : 2;
    c->sinks = rc_chance(&r, 20);
    c->lse = rc_chance(&r, 80);
    rc_layout(c, &r);
    rc_splits(c, &r);
    rc_fit(c);
    rc_fp8(c, &r);
}

static inline uint64_t rc_data_seed(uint64_t seed) { return seed * 0x9e3779b97f4a7c15ull + 0x1f0e3d2c; }

/* "seed S: <describe>" */
static inline void rc_describe(uint64_t seed, const cfg *c, char *s, size_t n) {
    int k = snprintf(s, n, "seed %llu: ", (unsigned long long)seed);
    describe(c, s + k, n - (size_t)k);
}

#endif /* FLASHC_TESTS_RANDOM_CASE_H */
