/* ref64.c — float64 naive attention reference, written from flashc.h alone (no code of src/). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "ref64.h"
#include "testutil.h"

enum { KV_DENSE, KV_VARLEN, KV_PAGED };

typedef struct ref_ctx {
    const fc_attn_args *a;
    int lowp, batch, h_q, h_k, d, d_v, s_q, s_new, kv, page_size, num_pages, rot_half;
    int64_t capacity, max_pos, max_cache, max_keys;
    double scale, softcap;
    int64_t wl, wr;
} ref_ctx;

/* One sequence: where its queries are and how many keys it has. */
typedef struct ref_seq {
    int64_t q_row0, s_q, s_cache, s_k;
    int64_t pad; /* kv_leftpad: the first key's cache row and rotary position */
} ref_seq;

static int64_t i32_1d(const fc_tensor *t, int64_t i) {
    return ((const int32_t *)t->data)[i * t->stride[0]];
}

static int64_t i32_2d(const fc_tensor *t, int64_t i, int64_t j) {
    return ((const int32_t *)t->data)[i * t->stride[0] + j * t->stride[1]];
}

/* Float element at a precomputed element offset of t. */
static double elem(const fc_tensor *t, int64_t off) { return tu_load(t->data, t->dtype, off); }

static int is_float_dtype(fc_dtype dt) {
    return dt == FC_BF16 || dt == FC_FP16 || dt == FC_FP32 || dt == FC_E4M3 || dt == FC_E5M2;
}

static int readable(const fc_tensor *t, int ndim) {
    return t->data && t->ndim == ndim && is_float_dtype(t->dtype) && t->stride[ndim - 1] == 1;
}

int64_t ref64_total_q(const fc_attn_args *a) {
    if (!a || !a->q.data) return -1;
    if (a->cu_seqlens_q.data) {
        if (a->cu_seqlens_q.ndim != 1 || a->cu_seqlens_q.shape[0] < 1) return -1;
        return i32_1d(&a->cu_seqlens_q, a->cu_seqlens_q.shape[0] - 1);
    }
    if (a->q.ndim != 4) return -1;
    return a->q.shape[0] * a->q.shape[1];
}

static ref_seq seq_of(const ref_ctx *c, int b) {
    const fc_attn_args *a = c->a;
    ref_seq s;
    if (a->cu_seqlens_q.data) {
        s.q_row0 = i32_1d(&a->cu_seqlens_q, b);
        s.s_q = i32_1d(&a->cu_seqlens_q, b + 1) - s.q_row0;
    } else {
        s.q_row0 = (int64_t)b * c->s_q;
        s.s_q = c->s_q;
    }
    s.pad = a->kv_leftpad.data ? i32_1d(&a->kv_leftpad, b) : 0;
    if (a->seqused_k.data) s.s_cache = i32_1d(&a->seqused_k, b) - s.pad;
    else if (c->kv == KV_VARLEN) s.s_cache = i32_1d(&a->cu_seqlens_k, b + 1) - i32_1d(&a->cu_seqlens_k, b);
    else s.s_cache = c->capacity - s.pad;
    s.s_k = s.s_cache + c->s_new;
    return s;
}

/* Element offset of key/value row j of sequence b, head h, feature 0, in the cache tensor t. */
static int64_t kv_offset(const ref_ctx *c, const fc_tensor *t, int b, int64_t j, int h) {
    const fc_attn_args *a = c->a;
    switch (c->kv) {
    case KV_VARLEN: return (i32_1d(&a->cu_seqlens_k, b) + j) * t->stride[0] + h * t->stride[1];
    case KV_PAGED: {
        int64_t page = i32_2d(&a->page_table, b, j / c->page_size);
        return page * t->stride[0] + (j % c->page_size) * t->stride[1] + h * t->stride[2];
    }
    default: { /* kv_batch_idx picks the cache row, kv_leftpad where its keys start */
        int64_t row = a->kv_batch_idx.data ? i32_1d(&a->kv_batch_idx, b) : b;
        int64_t pad = a->kv_leftpad.data ? i32_1d(&a->kv_leftpad, b) : 0;
        return row * t->stride[0] + (pad + j) * t->stride[1] + h * t->stride[2];
    }
    }
}

/* Reads the shapes and options; -1 when a is not something this reference can read. */
static int setup(ref_ctx *c, const fc_attn_args *a, int lowp) {
    memset(c, 0, sizeof *c);
    c->a = a;
    c->lowp = lowp;
    int qv = a->cu_seqlens_q.data != NULL;
    if (!readable(&a->q, qv ? 3 : 4) || !a->out.data || !is_float_dtype(a->out.dtype)) return -1;
    if (qv) {
        if (a->cu_seqlens_q.ndim != 1 || a->cu_seqlens_q.shape[0] < 1) return -1;
        c->batch = (int)a->cu_seqlens_q.shape[0] - 1;
    } else {
        c->batch = (int)a->q.shape[0];
        c->s_q = (int)a->q.shape[1];
    }
    c->h_q = (int)a->q.shape[qv ? 1 : 2];
    c->d = (int)a->q.shape[qv ? 2 : 3];
    c->kv = a->page_table.data ? KV_PAGED : a->cu_seqlens_k.data ? KV_VARLEN : KV_DENSE;
    int kd = c->kv == KV_VARLEN ? 3 : 4;
    if (!readable(&a->k, kd) || !readable(&a->v, kd)) return -1;
    c->h_k = (int)a->k.shape[kd - 2];
    c->d_v = (int)a->v.shape[kd - 1];
    if (c->h_k <= 0 || c->h_q % c->h_k || a->k.shape[kd - 1] != c->d) return -1;
    if (c->kv == KV_PAGED) {
        if (!a->seqused_k.data || a->page_table.ndim != 2) return -1;
        c->page_size = (int)a->k.shape[1];
        c->num_pages = (int)a->k.shape[0];
        c->capacity = a->page_table.shape[1] * c->page_size;
    } else if (c->kv == KV_DENSE) {
        c->capacity = a->k.shape[1];
    }
    if (a->k_new.data) {
        if (!a->seqused_k.data || !readable(&a->k_new, 4) || !readable(&a->v_new, 4)) return -1;
        c->s_new = (int)a->k_new.shape[1];
    }
    if (a->rotary_cos.data) {
        if (!a->k_new.data || !a->rotary_sin.data || a->rotary_cos.ndim != 2) return -1;
        c->rot_half = (int)a->rotary_cos.shape[1];
        c->max_pos = a->rotary_cos.shape[0];
        if (2 * c->rot_half > c->d) return -1;
    }
    c->scale = a->softmax_scale != 0 ? (double)a->softmax_scale : 1.0 / sqrt((double)c->d);
    c->softcap = a->softcap;
    c->wl = a->window_left;
    c->wr = a->causal ? 0 : a->window_right;
    return 0;
}

/* Checks every sequence's contents (lengths, pages, rotary positions); finds the buffer sizes. */
static int check_sequences(ref_ctx *c) {
    const fc_attn_args *a = c->a;
    for (int b = 0; b < c->batch; b++) {
        ref_seq s = seq_of(c, b);
        if (s.s_q < 0 || s.s_cache < 0 || s.pad < 0) return -1;
        if (a->kv_batch_idx.data) {
            int64_t row = i32_1d(&a->kv_batch_idx, b);
            if (row < 0 || row >= a->k.shape[0]) return -1;
        }
        if (c->kv == KV_VARLEN) {
            int64_t len = i32_1d(&a->cu_seqlens_k, b + 1) - i32_1d(&a->cu_seqlens_k, b);
            if (s.s_cache > len) return -1;
        } else if (s.pad + s.s_k > c->capacity) {
            return -1;
        }
        if (c->kv == KV_PAGED)
            for (int64_t p = 0; p * c->page_size < s.s_cache; p++) {
                int64_t page = i32_2d(&a->page_table, b, p);
                if (page < 0 || page >= c->num_pages) return -1;
            }
        if (c->rot_half && (s.pad + s.s_k - s.s_q < 0 || s.pad + s.s_k > c->max_pos)) return -1;
        if (s.s_cache > c->max_cache) c->max_cache = s.s_cache;
        if (s.s_k > c->max_keys) c->max_keys = s.s_k;
    }
    return 0;
}

/* Rotates the first 2*rot_half features of x to position pos (interleaved or half-split pairs). */
static void rotate(const ref_ctx *c, double *x, int64_t pos) {
    const fc_tensor *ct = &c->a->rotary_cos, *st = &c->a->rotary_sin;
    for (int m = 0; m < c->rot_half; m++) {
        int i0 = c->a->rotary_interleaved ? 2 * m : m;
        int i1 = c->a->rotary_interleaved ? 2 * m + 1 : m + c->rot_half;
        double cs = elem(ct, pos * ct->stride[0] + m * ct->stride[1]);
        double sn = elem(st, pos * st->stride[0] + m * st->stride[1]);
        double x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * cs - x1 * sn;
        x[i1] = x0 * sn + x1 * cs;
    }
}

/* The keys and values one (sequence, kv head) attends over: cache rows as stored (exact in float),
 * appended rows as doubles (rotated, and rounded when lowp). */
typedef struct kv_rows {
    float *kc, *vc;
    double *kn, *vn;
    int64_t s_cache;
} kv_rows;

static void load_row_f(const fc_tensor *t, int64_t off, int n, float *dst) {
    for (int i = 0; i < n; i++) dst[i] = (float)elem(t, off + i);
}

/* An fp8 cache's dequantisation scale of (b, h): k_descale / v_descale, 1 when absent (flashc.h, "FP8"). */
static double descale_of(const fc_tensor *t, int b, int h) {
    return t->data ? ((const float *)t->data)[b * t->stride[0] + h * t->stride[1]] : 1.0;
}

static int is_fp8(fc_dtype dt) { return dt == FC_E4M3 || dt == FC_E5M2; }

/* An appended element as the fp8 cache holds it, dequantised: x / descale stored as fp8 (saturating),
 * times descale (lowp: the division in float, as the library divides). */
static double quantised(const ref_ctx *c, fc_dtype dt, double x, double ds) {
    double y = c->lowp ? (double)((float)x / (float)ds) : x / ds;
    return tu_round(dt, y) * ds;
}

static void load_kv(const ref_ctx *c, int b, int hk, const ref_seq *s, kv_rows *r) {
    const fc_attn_args *a = c->a;
    double kds = descale_of(&a->k_descale, b, hk), vds = descale_of(&a->v_descale, b, hk);
    int fp8 = is_fp8(a->k.dtype);
    r->s_cache = s->s_cache;
    for (int64_t j = 0; j < s->s_cache; j++) {
        load_row_f(&a->k, kv_offset(c, &a->k, b, j, hk), c->d, r->kc + j * c->d);
        load_row_f(&a->v, kv_offset(c, &a->v, b, j, hk), c->d_v, r->vc + j * c->d_v);
        for (int i = 0; fp8 && i < c->d; i++) r->kc[j * c->d + i] = (float)(r->kc[j * c->d + i] * kds);
        for (int i = 0; fp8 && i < c->d_v; i++) r->vc[j * c->d_v + i] = (float)(r->vc[j * c->d_v + i] * vds);
    }
    for (int t = 0; t < c->s_new; t++) {
        const fc_tensor *kn = &a->k_new, *vn = &a->v_new;
        double *kd = r->kn + (int64_t)t * c->d, *vd = r->vn + (int64_t)t * c->d_v;
        int64_t ko = b * kn->stride[0] + t * kn->stride[1] + hk * kn->stride[2];
        int64_t vo = b * vn->stride[0] + t * vn->stride[1] + hk * vn->stride[2];
        for (int i = 0; i < c->d; i++) kd[i] = elem(kn, ko + i);
        for (int i = 0; i < c->d_v; i++) vd[i] = elem(vn, vo + i);
        if (c->rot_half) {
            rotate(c, kd, s->pad + s->s_cache + t);
            if (c->lowp && !fp8)
                for (int i = 0; i < 2 * c->rot_half; i++) kd[i] = tu_round(a->k.dtype, kd[i]);
        }
        for (int i = 0; fp8 && i < c->d; i++) kd[i] = quantised(c, a->k.dtype, kd[i], kds);
        for (int i = 0; fp8 && i < c->d_v; i++) vd[i] = quantised(c, a->v.dtype, vd[i], vds);
    }
}

static double dot_f(const double *q, const float *k, int n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += q[i] * k[i];
        s1 += q[i + 1] * k[i + 1];
        s2 += q[i + 2] * k[i + 2];
        s3 += q[i + 3] * k[i + 3];
    }
    for (; i < n; i++) s0 += q[i] * k[i];
    return (s0 + s1) + (s2 + s3);
}

static double dot_d(const double *q, const double *k, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += q[i] * k[i];
    return s;
}

/* The dot product as the kernels form it: float products summed in float (lowp). The operands are
 * values stored in bf16/fp16/fp32 (or rounded to them), so converting them to float is exact. */
static double dot32_f(const double *q, const float *k, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += (float)q[i] * k[i];
    return s;
}

static double dot32_d(const double *q, const double *k, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += (float)q[i] * (float)k[i];
    return s;
}

/* ALiBi slope of (sequence b, query head h); 0 when absent. */
static double alibi_slope(const ref_ctx *c, int b, int h) {
    const fc_tensor *t = &c->a->alibi_slopes;
    if (!t->data) return 0;
    if (t->ndim == 1) return ((const float *)t->data)[h * t->stride[0]];
    return ((const float *)t->data)[b * t->stride[0] + h * t->stride[1]];
}

/* Visible key range [*lo, *hi) of query row r of sequence s. */
static void key_range(const ref_ctx *c, const ref_seq *s, int64_t r, int64_t *lo, int64_t *hi) {
    int64_t pos = r + s->s_k - s->s_q;
    *lo = 0;
    *hi = s->s_k;
    if (c->wl >= 0 && pos - c->wl > *lo) *lo = pos - c->wl;
    if (c->wr >= 0 && pos + c->wr + 1 < *hi) *hi = pos + c->wr + 1;
}

/* sum |q_i k_i|: the scale of the FP8 MMA's accumulation error in q.k. */
static double dot_abs(const double *q, const float *kc, const double *kn, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += fabs(q[i] * (kc ? (double)kc[i] : kn[i]));
    return s;
}

/* FP8 attention's slack: bounds on what the kernel's FP8 steps may move out and lse, whichever way it
 * tracks the row max (its lazy rescale, its blocks), with p_j = exp(s_j - lse) exact:
 * - q.k summed by the FP8 MMA at reduced precision: each score off by up to dl[j] = FP8_MMA_REL_ERR
 *   sum |q_i k_i| times the scale (the softcap's tanh only shrinks it). To first order out moves by
 *   sum_j p_j e_j (v_j - out) and lse by sum_j p_j e_j (a sink's score has no error); 1.25 covers exp's
 *   higher terms (e^x - 1 <= 1.25 x for x <= 0.4).
 * - P rounded to e4m3 before P.V (the row sum is not): out moves by sum_j (p'_j - p_j) v_j. The kernel
 *   rounds p_j relative to its running max (at most the row's max m, sink included; p_max = exp(m - lse)):
 *   by at most 2^-4 p_j where that is normal, else by half of e4m3's subnormal step, 2^-10 of that max,
 *   and never by more than p_j itself (flushed to 0). lowp rounds relative to m itself, one of the
 *   roundings the kernel may make, so the kernel's out need not be as close as lowp's.
 * - P.V summed by the FP8 MMA at reduced precision: up to FP8_MMA_REL_ERR of sum |p'_j v_j| a key block
 *   (the accumulator carried from block to block), counted for every 64 keys.
 * Writes d_v bounds on out, then the bound on lse, to slack; ex: d_v of scratch. */
static void fp8_slack(const ref_ctx *c, int64_t lo, int64_t hi, const kv_rows *kv, const double *sc,
                      const double *dl, double mx, double lse, double *ex, double *slack) {
    double ls = 0, p_max = exp(mx - lse), blocks = (double)((hi - lo + 63) / 64 + 1);
    for (int i = 0; i < c->d_v; i++) ex[i] = slack[i] = 0;
    for (int pass = 0; pass < 2; pass++) /* the exact out into ex, then the bounds */
        for (int64_t j = lo; j < hi; j++) {
            const float *vc = j < kv->s_cache ? kv->vc + j * c->d_v : NULL;
            const double *vn = vc ? NULL : kv->vn + (j - kv->s_cache) * c->d_v;
            double p = exp(sc[j] - lse), p_err = fmax(0x1p-4 * p, fmin(p, 0x1p-10 * p_max));
            for (int i = 0; i < c->d_v; i++) {
                double v = vc ? vc[i] : vn[i];
                if (!pass) ex[i] += p * v;
                else slack[i] += 1.25 * p * dl[j] * fabs(v - ex[i]) + p_err * fabs(v) +
                                 FP8_MMA_REL_ERR * blocks * (p + p_err) * fabs(v);
            }
            if (pass) ls += p * dl[j];
        }
    slack[c->d_v] = 1.25 * ls;
}

/* One query row of one head: writes d_v outputs and its lse (and with FP8 attention in lowp, where
 * slack is given, fp8_slack's bounds; dl: scratch of max_keys). */
static void attend_row(const ref_ctx *c, int b, int h, const ref_seq *s, int64_t r, const kv_rows *kv,
                       double *qv, double *sc, double *dl, double *o, double *lse, double *slack) {
    const fc_attn_args *a = c->a;
    const fc_tensor *q = &a->q;
    int64_t qo = a->cu_seqlens_q.data ? (s->q_row0 + r) * q->stride[0] + h * q->stride[1]
                                      : b * q->stride[0] + r * q->stride[1] + h * q->stride[2];
    double qds = descale_of(&a->q_descale, b, h / (c->h_q / c->h_k)); /* fp8 q: dequantised */
    for (int i = 0; i < c->d; i++) qv[i] = elem(q, qo + i) * qds;
    int64_t off = s->s_k - s->s_q;
    int fp8_p = is_fp8(q->dtype) && c->lowp; /* FP8 attention: P quantised to e4m3 for P·V */
    if (c->rot_half) {
        rotate(c, qv, s->pad + off + r);
        if (c->lowp)
            for (int i = 0; i < 2 * c->rot_half; i++) qv[i] = tu_round(q->dtype, qv[i]);
    }
    int64_t lo, hi;
    key_range(c, s, r, &lo, &hi);
    double slope = alibi_slope(c, b, h);
    int has_sink = a->sinks.data != NULL;
    double sink = has_sink ? ((const float *)a->sinks.data)[h * a->sinks.stride[0]] : -INFINITY;
    double mx = sink;
    for (int64_t j = lo; j < hi; j++) {
        double x;
        if (c->lowp) x = j < kv->s_cache ? dot32_f(qv, kv->kc + j * c->d, c->d)
                                         : dot32_d(qv, kv->kn + (j - kv->s_cache) * c->d, c->d);
        else x = j < kv->s_cache ? dot_f(qv, kv->kc + j * c->d, c->d)
                                 : dot_d(qv, kv->kn + (j - kv->s_cache) * c->d, c->d);
        if (fp8_p && slack) {
            const float *kc = j < kv->s_cache ? kv->kc + j * c->d : NULL;
            dl[j] = FP8_MMA_REL_ERR * c->scale * dot_abs(qv, kc, kc ? NULL : kv->kn + (j - kv->s_cache) * c->d, c->d);
        }
        x *= c->scale;
        if (c->softcap > 0) x = c->softcap * tanh(x / c->softcap);
        x -= slope * fabs((double)(r + off - j));
        sc[j] = x;
        if (x > mx) mx = x;
    }
    for (int i = 0; i < c->d_v; i++) o[i] = 0;
    for (int i = 0; slack && i <= c->d_v; i++) slack[i] = 0;
    if (mx == -INFINITY) { /* no visible key and no (finite) sink */
        *lse = -INFINITY;
        return;
    }
    double sum = has_sink ? exp(sink - mx) : 0;
    for (int64_t j = lo; j < hi; j++) sum += exp(sc[j] - mx);
    *lse = mx + log(sum);
    if (fp8_p && slack) { /* o as scratch for the exact out, cleared again */
        fp8_slack(c, lo, hi, kv, sc, dl, mx, *lse, o, slack);
        for (int i = 0; i < c->d_v; i++) o[i] = 0;
    }
    for (int64_t j = lo; j < hi; j++) {
        double p = exp(sc[j] - *lse);
        if (fp8_p) p = tu_round(FC_E4M3, exp(sc[j] - mx)) / sum; /* as the kernels: p relative to the max */
        else if (c->lowp) p = tu_round(q->dtype, p);
        if (j < kv->s_cache) {
            const float *v = kv->vc + j * c->d_v;
            for (int i = 0; i < c->d_v; i++) o[i] += p * v[i];
        } else {
            const double *v = kv->vn + (j - kv->s_cache) * c->d_v;
            for (int i = 0; i < c->d_v; i++) o[i] += p * v[i];
        }
    }
    if (c->lowp)
        for (int i = 0; i < c->d_v; i++) o[i] = tu_round(a->out.dtype, o[i]);
}

static int attend_all(const fc_attn_args *a, int row_step, int lowp, double *out, double *lse, double *slack) {
    ref_ctx c;
    if (!a || row_step < 1 || setup(&c, a, lowp) || check_sequences(&c)) return -1;
    kv_rows kv;
    size_t nc = (size_t)(c.max_cache > 0 ? c.max_cache : 1), nn = (size_t)(c.s_new > 0 ? c.s_new : 1);
    kv.kc = malloc(nc * c.d * sizeof(float));
    kv.vc = malloc(nc * c.d_v * sizeof(float));
    kv.kn = malloc(nn * c.d * sizeof(double));
    kv.vn = malloc(nn * c.d_v * sizeof(double));
    double *qv = malloc((size_t)c.d * sizeof(double));
    double *sc = malloc((size_t)(c.max_keys > 0 ? c.max_keys : 1) * sizeof(double));
    double *dl = malloc((size_t)(c.max_keys > 0 ? c.max_keys : 1) * sizeof(double));
    int ok = kv.kc && kv.vc && kv.kn && kv.vn && qv && sc && dl;
    int group = c.h_q / c.h_k;
    for (int b = 0; ok && b < c.batch; b++) {
        ref_seq s = seq_of(&c, b);
        for (int hk = 0; hk < c.h_k; hk++) {
            load_kv(&c, b, hk, &s, &kv);
            for (int h = hk * group; h < (hk + 1) * group; h++)
                for (int64_t r = 0; r < s.s_q; r++) {
                    int64_t row = s.q_row0 + r;
                    if (!ref64_sampled(row, r, s.s_q, row_step)) continue;
                    attend_row(&c, b, h, &s, r, &kv, qv, sc, dl, out + (row * c.h_q + h) * c.d_v,
                               lse + row * c.h_q + h, slack ? slack + (row * c.h_q + h) * (c.d_v + 1) : NULL);
                }
        }
    }
    free(kv.kc); free(kv.vc); free(kv.kn); free(kv.vn); free(qv); free(sc); free(dl);
    return ok ? 0 : -1;
}

int ref64_attn(const fc_attn_args *a, int row_step, int lowp, double *out, double *lse) {
    return attend_all(a, row_step, lowp, out, lse, NULL);
}

/* ---------------------------------------------------------------------------------------------- */
/* Both references on two threads                                                                  */

typedef struct ref_job {
    const fc_attn_args *a;
    int row_step, lowp, rc;
    double *out, *lse, *slack;
} ref_job;

static void *ref_thread(void *arg) {
    ref_job *j = arg;
    j->rc = attend_all(j->a, j->row_step, j->lowp, j->out, j->lse, j->slack);
    return NULL;
}

int ref64_pair(const fc_attn_args *a, int row_step, double *out, double *lse, double *low, double *lse_low,
               double *slack) {
    ref_job j[2] = {{a, row_step, 0, 0, out, lse, NULL}, {a, row_step, 1, 0, low, lse_low, slack}};
    pthread_t t;
    int threaded = pthread_create(&t, NULL, ref_thread, &j[1]) == 0;
    ref_thread(&j[0]);
    if (threaded) pthread_join(t, NULL);
    else ref_thread(&j[1]);
    return j[0].rc || j[1].rc ? -1 : 0;
}
