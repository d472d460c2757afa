/* internal.h — what api.c hands the backends: a validated, normalized problem, plus shared helpers. */
#ifndef FLASHC_INTERNAL_H
#define FLASHC_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "flashc.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define FC_HD __host__ __device__ __forceinline__
#else
#define FC_HD static inline
#endif

/* ---------------------------------------------------------------------------------------------- */
/* The normalized attention problem. api.c fills it after validation; backends only read it. Some   */
/* fields are derived (page_div_*: fc_fast_div_init of page_size); a test that builds one by hand    */
/* must derive them as api.c does.                                                                   */

typedef enum { FC_KV_DENSE = 0, FC_KV_VARLEN = 1, FC_KV_PAGED = 2 } fc_kv_layout;

/* A strided (seq/page, row, head) view of a 4D-or-3D tensor whose last dim is contiguous.
 * Element (b, r, h, c) sits at data + b*sb + r*sr + h*sh + c. For varlen tensors sb = 0 and the row
 * index is the global row (cu_seqlens[b] + r). */
typedef struct fc_view {
    void *data;
    int64_t sb, sr, sh;
} fc_view;

typedef struct fc_problem {
    fc_device device;
    fc_dtype dtype;            /* of out, k_new, v_new, and of q, k, v unless they are fp8 */
    fc_dtype q_dtype;          /* of q: dtype, or FC_E4M3 / FC_E5M2 (FP8 attention: k and v then too) */
    fc_dtype kv_dtype;         /* of k and v: dtype, or FC_E4M3 / FC_E5M2 */
    const float *k_descale, *v_descale, *q_descale; /* fp8, optional: element (b, h_k) at [b*sb + h*sh] */
    int64_t k_descale_sb, k_descale_sh, v_descale_sb, v_descale_sh, q_descale_sb, q_descale_sh;
    int batch, h_q, h_k, d, d_v;

    /* Queries and outputs: dense when cu_seqlens_q == NULL. */
    fc_view q, out;
    int s_q;                   /* dense: rows per sequence; varlen: max rows of any sequence */
    const int32_t *cu_seqlens_q;
    const int32_t *seqused_q;  /* NULL: every row of a sequence; else its first seqused_q[b] rows */
    int64_t total_q;           /* dense: batch * s_q; varlen: q.shape[0] */

    /* LSE, optional (lse == NULL). Element (b, h, r): lse + b*lse_sb + h*lse_sh + r*lse_sr, with r the
     * global row and lse_sb = 0 for varlen queries. */
    float *lse;
    int64_t lse_sb, lse_sh, lse_sr;

    /* Keys and values. */
    fc_kv_layout kv_layout;
    fc_view k, v;              /* paged: sb is the page stride, sr the row-in-page stride */
    int s_k;                   /* dense: cache capacity (k.shape[1]); varlen: max keys; paged: max_pages*page_size
                                * (<= FC_MAX_SEQ) */
    int64_t total_k;           /* varlen: rows of k and v (k.shape[0]); else 0 */
    const int32_t *cu_seqlens_k;
    const int32_t *seqused_k;  /* NULL: every key of the layout counts */
    const int32_t *page_table; /* paged: entry (b, p) at page_table[b*page_table_sb + p] */
    const int32_t *kv_batch_idx; /* dense, optional: sequence b uses cache row kv_batch_idx[b] (< k_batch) */
    const int32_t *kv_leftpad;   /* dense, optional: sequence b's keys start at cache row kv_leftpad[b] */
    int k_batch;               /* dense: rows of the cache (k.shape[0]) */
    int64_t page_table_sb;
    int page_size, num_pages, max_pages;
    uint32_t page_div_mul;     /* j / page_size == fc_fast_div(j, page_div_mul, page_div_shift) */
    int page_div_shift;

    /* Append, optional (k_new.data == NULL). */
    fc_view k_new, v_new;
    int s_new;
    const void *rotary_cos, *rotary_sin; /* NULL: no rotary. Element (pos, m) at cos + pos*rotary_sr + m */
    fc_dtype rotary_dtype;
    int64_t rotary_sr;
    int rotary_dim, rotary_max_pos, rotary_interleaved;

    /* Scores. */
    float scale;               /* resolved: never 0 */
    float softcap;             /* 0: off */
    int window_left, window_right; /* resolved: causal folded in; -1 unbounded; < FC_MAX_SEQ */
    const float *alibi;        /* NULL: off. slope (b, h) = alibi[b*alibi_sb + h*alibi_sh] */
    int64_t alibi_sb, alibi_sh;
    const float *sinks;        /* NULL: off. sink h = sinks[h*sinks_sh] */
    int64_t sinks_sh;

    int num_splits;            /* as asked: 0 auto, n >= 1; backends resolve with fc_plan_num_splits */

    void *dev_err;             /* CUDA: the device's error record (src/cuda/seqlen.cuh), set by the backend */
} fc_problem;

/* Merge problem: n partial (rows, h) states into one. */
typedef struct fc_merge_problem {
    fc_device device;
    int n, rows, h, d_v;
    const void *out_partial; fc_dtype partial_dtype; int64_t op_sn, op_sr, op_sh;
    const float *lse_partial; int64_t lp_sn, lp_sr, lp_sh;
    void *out; fc_dtype out_dtype; int64_t o_sr, o_sh;
    float *lse; int64_t l_sr, l_sh; /* lse == NULL: not written */
} fc_merge_problem;

/* ---------------------------------------------------------------------------------------------- */
/* Errors: set the thread's message and return the status. The message reads "arg: why".           */

fc_status fc_fail(fc_status status, const char *arg, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void fc_clear_error(void);
/* The error of a sequence whose used + s_new keys exceed what its layout holds (cap keys; paged: pages of
 * page_size), in one wording for the CPU's check of seqused_k and the CUDA kernels' device record. */
fc_status fc_fail_capacity(fc_kv_layout layout, int b, int64_t used, int64_t s_new, int64_t cap, int page_size);

/* ---------------------------------------------------------------------------------------------- */
/* api.c's pieces that fc_plan (plan_run.c) reuses.                                                 */

#define FC_ATTN_TENSORS 21
extern const char *const fc_attn_tensor_names[FC_ATTN_TENSORS];
const fc_tensor *fc_attn_tensor(const fc_attn_args *a, int i); /* i-th tensor of a, in declaration order */
/* Validates args into p (on the CPU the contents of the index tensors too), as fc_attn_fwd does. */
fc_status fc_attn_problem(const fc_attn_args *args, fc_problem *p);
/* Runs a validated problem (checks the workspace on CUDA). */
fc_status fc_attn_run_problem(const fc_problem *p, void *workspace, size_t workspace_bytes, void *stream);

/* ---------------------------------------------------------------------------------------------- */
/* Backends (C linkage).                                                                           */

fc_status fc_cpu_attn_fwd(const fc_problem *p);
int fc_cpu_describe(const fc_problem *p, char *buf, size_t n); /* fc_attn_describe's text for the CPU */
fc_status fc_cpu_merge(const fc_merge_problem *m);
int fc_cpu_splits(const fc_problem *p); /* the split count fc_cpu_attn_fwd would choose */

int fc_cuda_built(void); /* 1 when the library was built with nvcc */
/* *bytes: the workspace of the fastest path; *least: what the call cannot run without (split-KV partials). The rest,
 * Stream-K's tail of a prefill (src/cuda/fwd_launch.cuh wg_tail_plan), is used where the workspace holds it. */
fc_status fc_cuda_attn_workspace_size(const fc_problem *p, size_t *bytes, size_t *least);
fc_status fc_cuda_attn_fwd(const fc_problem *p, void *workspace, size_t workspace_bytes, void *stream);
fc_status fc_cuda_describe(const fc_problem *p, char *buf, size_t n); /* fc_attn_describe's text for CUDA */
fc_status fc_cuda_merge(const fc_merge_problem *m, void *stream);
int fc_cuda_device_count(void);
int fc_cuda_splits(const fc_problem *p); /* the split count fc_cuda_attn_fwd would choose */
int fc_cuda_capability(void); /* the current device's compute capability, 10 major + minor; 0: none */
#define FC_CUDA_CAPABILITY 90 /* the one the kernels are built for (sm_90a: H100, H200) */

/* ---------------------------------------------------------------------------------------------- */
/* Host heuristics (plan.c).                                                                       */

#define FC_MAX_SPLITS 128

/* Sizes api.c accepts, so that the kernels index rows and keys in int: at most FC_MAX_SEQ packed query
 * rows per sequence (its queries times h_q / h_k) and FC_MAX_SEQ keys per sequence (cache capacity);
 * a resolved window side is below FC_MAX_SEQ (a wider one is unbounded, -1). A diagonal plus a window
 * side plus a tile thus stays below 2^31. */
#define FC_MAX_SEQ (1 << 30)

/* Number of KV splits for a problem of `work_items` independent (batch, head, query-tile) items over
 * `n_kv_blocks` key blocks, on a machine with `n_workers` parallel units (cores or SMs). `asked` is
 * num_splits from the arguments (0 = choose). Result in 1 .. max(1, n_kv_blocks), <= FC_MAX_SPLITS. */
int fc_plan_num_splits(int asked, int64_t work_items, int n_kv_blocks, int n_workers);
/* The same for the GPU's decode kernels, whose CTAs run in waves over n_slots CTA slots (plan.c). */
int fc_plan_splits_by_waves(int asked, int64_t work_items, int n_kv_blocks, int n_slots);

/* ---------------------------------------------------------------------------------------------- */
/* Sequence info (FlashAttention's SeqlenInfo): where sequence b's rows and keys are.              */

typedef struct fc_seqlen {
    int64_t q_row0;  /* global row of the sequence's first query (0 for dense: use q.sb) */
    int s_q;         /* queries of the sequence */
    int64_t k_row0;  /* row of its first key: varlen, global row; dense, kv_leftpad[b] (else 0) */
    int kv_b;        /* dense: the cache row it uses (kv_batch_idx[b], else b) */
    int pos0;        /* rotary position of its first key (kv_leftpad[b], else 0) */
    int s_cache;     /* keys present before the append */
    int s_k;         /* keys attended: s_cache + s_new */
} fc_seqlen;

FC_HD fc_seqlen fc_seqlen_of(const fc_problem *p, int b) {
    fc_seqlen s;
    if (p->cu_seqlens_q) {
        s.q_row0 = p->cu_seqlens_q[b];
        s.s_q = p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b];
    } else {
        s.q_row0 = 0;
        s.s_q = p->s_q;
    }
    if (p->seqused_q) s.s_q = p->seqused_q[b]; /* api.c: 0 <= seqused_q[b] <= the rows above */
    int pad = p->kv_leftpad ? p->kv_leftpad[b] : 0; /* api.c: 0 <= pad <= the keys counted from row 0 */
    s.k_row0 = p->cu_seqlens_k ? p->cu_seqlens_k[b] : pad;
    s.kv_b = p->kv_batch_idx ? p->kv_batch_idx[b] : b;
    s.pos0 = pad;
    if (p->seqused_k)
        s.s_cache = p->seqused_k[b] - pad;
    else if (p->cu_seqlens_k)
        s.s_cache = p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b];
    else
        s.s_cache = p->s_k - pad;
    s.s_k = s.s_cache + (p->k_new.data ? p->s_new : 0);
    return s;
}

/* Division by an invariant divisor d >= 1 of a non-negative int < 2^31 (Granlund and Montgomery):
 * q = (umulhi(n, mul) + n) >> shift with shift = ceil(log2 d), mul = 2^32 (2^shift - d) / d + 1. */
static inline void fc_fast_div_init(uint32_t d, uint32_t *mul, int *shift) {
    int s = 0;
    while ((1ull << s) < d) s++;
    *shift = s;
    *mul = (uint32_t)(((1ull << 32) * ((1ull << s) - d)) / d + 1);
}
FC_HD int fc_fast_div(int n, uint32_t mul, int shift) {
    uint32_t hi = (uint32_t)(((uint64_t)(uint32_t)n * mul) >> 32);
    return (int)((hi + (uint32_t)n) >> shift);
}

/* Where key j of sequence b lives: element offset outer*kv.sb + row*kv.sr in either view (p->k, p->v).
 * Dense: (kv_b, k_row0 + j); varlen: (0, k_row0 + j); paged: (page_table[b][j / page_size], j % page_size). */
typedef struct fc_kv_loc {
    int64_t outer, row;
} fc_kv_loc;

FC_HD fc_kv_loc fc_kv_locate(const fc_problem *p, const fc_seqlen *s, int b, int j) {
    fc_kv_loc l;
    switch (p->kv_layout) {
    case FC_KV_PAGED: {
        int page = fc_fast_div(j, p->page_div_mul, p->page_div_shift);
        l.outer = p->page_table[b * p->page_table_sb + page];
        l.row = j - page * p->page_size;
        break;
    }
    case FC_KV_VARLEN: l.outer = 0; l.row = s->k_row0 + j; break;
    default: l.outer = s->kv_b; l.row = s->k_row0 + j; break;
    }
    return l;
}

FC_HD int64_t fc_kv_offset(const fc_view *kv, fc_kv_loc l) { return l.outer * kv->sb + l.row * kv->sr; }

/* Element offset of query/output row r of sequence b (head 0) in view x (p->q or p->out). */
FC_HD int64_t fc_q_row_offset(const fc_view *x, const fc_seqlen *s, int b, int r) {
    return (int64_t)b * x->sb + (s->q_row0 + r) * x->sr;
}

/* ---------------------------------------------------------------------------------------------- */
/* Block info (FlashAttention's BlockInfo): the keys a range of query rows can see.                 */

/* Visible keys of query rows [r0, r1) (0 <= r0 < r1 <= s_q) of a sequence with s_q queries and s_k keys:
 * [*j0, *j1), empty when *j0 >= *j1. Uses the resolved window (causal folded in). A window at least as wide
 * as the keys (left) or the queries (right) bounds nothing and counts as none, so every sum stays within
 * (-s_q, s_k) in 32 bits (api.c keeps both under 2^30): a window near 2^31 cannot wrap. *j1 may be negative
 * (an empty range). */
FC_HD void fc_key_range(const fc_problem *p, int s_q, int s_k, int r0, int r1, int *j0, int *j1) {
    int wl = p->window_left, wr = p->window_right;
    int lo = wl >= 0 && wl < s_k ? (r0 - s_q) + (s_k - wl) : 0; /* first key of row r0: r0 + s_k - s_q - wl */
    int past = wr >= 0 && wr < s_q ? (r1 - s_q) + wr : 0;      /* (last key of row r1 - 1) + 1 - s_k, if < 0 */
    *j0 = lo > 0 ? lo : 0;
    *j1 = s_k + (past < 0 ? past : 0);
}

/* ---------------------------------------------------------------------------------------------- */
/* Scalar conversions (round to nearest even; NaN stays NaN).                                      */

FC_HD float fc_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
FC_HD uint16_t fc_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
FC_HD float fc_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}
FC_HD uint16_t fc_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);          /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);         /* overflow -> inf */
    if (a < 0x38800000u) {                                           /* subnormal or zero */
        if (a < 0x33000000u) return (uint16_t)sign;                  /* < half the smallest subnormal */
        uint32_t man = (a & 0x7fffffu) | 0x800000u;                  /* 24-bit significand */
        int shift = 126 - (int)(a >> 23);                            /* 14 .. 24: units of 2^-24 */
        uint32_t q = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t v = a - 0x38000000u;                                    /* rebias exponent 127 -> 15 */
    uint32_t q = v >> 13, rem = v & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

/* FP8 (OCP): e4m3 (bias 7, no infinities, 0x7f/0xff NaN, largest 448) and e5m2 (bias 15, IEEE-like,
 * largest finite 57344). Stores saturate: a finite value or an infinity beyond the largest becomes the
 * largest of its sign (what quantising a KV cache wants); NaN stays NaN; rounding to nearest, ties even. */
FC_HD float fc_fp8_to_f32(uint8_t u, int e5m2) {
    int s = u >> 7, mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    int e = (u & 0x7f) >> mbits, m = u & ((1 << mbits) - 1), emax = e5m2 ? 31 : 15;
    float x;
    if (e5m2 && e == emax) x = m ? NAN : INFINITY;
    else if (!e5m2 && e == emax && m == (1 << mbits) - 1) x = NAN;
    else if (e == 0) x = ldexpf((float)m, 1 - bias - mbits);
    else x = ldexpf((float)((1 << mbits) + m), e - bias - mbits);
    return s ? -x : x;
}
FC_HD uint8_t fc_f32_to_fp8(float x, int e5m2) {
    int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    if (x != x) return 0x7f;
    uint8_t sign = x < 0.0f ? 0x80 : 0;
    float a = fabsf(x), big = e5m2 ? 57344.0f : 448.0f;
    if (a >= big) return (uint8_t)(sign | (e5m2 ? 0x7b : 0x7e)); /* saturate (infinities too) */
    int e;
    float f = frexpf(a, &e); /* a = f 2^e, f in [0.5, 1): the leading bit is 2^(e-1) */
    int lead = e - 1;
    if (a == 0.0f || lead < 1 - bias) { /* subnormal (or zero): units of 2^(1 - bias - mbits) */
        int q = (int)rintf(ldexpf(a, bias - 1 + mbits));
        return (uint8_t)(sign | q); /* q = 2^mbits is the smallest normal: its code is the same */
    }
    int q = (int)rintf(ldexpf(f * 2.0f - 1.0f, mbits)); /* mantissa rounded */
    if (q == 1 << mbits) q = 0, lead++;
    (void)f;
    return (uint8_t)(sign | ((lead + bias) << mbits) | q);
}

/* Load element i of a bf16/fp16/fp32/fp8 array as float; store float as such an element. */
FC_HD float fc_load(const void *base, fc_dtype dt, int64_t i) {
    if (dt == FC_FP32) return ((const float *)base)[i];
    if (dt == FC_E4M3 || dt == FC_E5M2) return fc_fp8_to_f32(((const uint8_t *)base)[i], dt == FC_E5M2);
    uint16_t h = ((const uint16_t *)base)[i];
    return dt == FC_BF16 ? fc_bf16_to_f32(h) : fc_f16_to_f32(h);
}
FC_HD void fc_store(void *base, fc_dtype dt, int64_t i, float x) {
    if (dt == FC_FP32) ((float *)base)[i] = x;
    else if (dt == FC_E4M3 || dt == FC_E5M2) ((uint8_t *)base)[i] = fc_f32_to_fp8(x, dt == FC_E5M2);
    else ((uint16_t *)base)[i] = dt == FC_BF16 ? fc_f32_to_bf16(x) : fc_f32_to_f16(x);
}
/* Round a float through dtype and back (the precision a value has once stored as dtype). */
FC_HD float fc_round_to(fc_dtype dt, float x) {
    if (dt == FC_FP32) return x;
    if (dt == FC_E4M3 || dt == FC_E5M2) return fc_fp8_to_f32(fc_f32_to_fp8(x, dt == FC_E5M2), dt == FC_E5M2);
    return dt == FC_BF16 ? fc_bf16_to_f32(fc_f32_to_bf16(x)) : fc_f16_to_f32(fc_f32_to_f16(x));
}

#ifdef __cplusplus
}
#endif
#endif /* FLASHC_INTERNAL_H */
