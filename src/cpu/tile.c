/* tile.c — one work item of CPU attention: a tile of query rows against one split of its key blocks,
 * by tiled online softmax in fp32 (the structure the GPU kernels use).
 * Built once for the baseline instruction set, and once more per variant of the Makefile's CPU_ISAS
 * (-DFC_CPU_ISA=v3 -march=x86-64-v3, ...), which defines only fc_cpu_run_item_v3 (isa.c chooses). */
#include <math.h>

#include "cpu/cpu.h"
#include "cpu/kernels.h"

#define BM FC_CPU_BM
#define BK FC_CPU_BK
#define FOLD 8 /* key blocks summed in o before it is folded into the compensated (oh, oc) */

/* Per-worker scratch, carved from one block of floats. */
typedef struct tile_buf {
    float *q;   /* [BM][d]    queries: rotated, rounded, times qscale */
    float *kt;  /* [d][BK]    key block, transposed */
    float *v;   /* [BK][d_v]  value block */
    float *s;   /* [BM][BK]   scores, then probabilities */
    float *o;   /* [BM][d_v]  running (unnormalized) output of the last blocks, up to FOLD of them */
    float *oh;  /* [BM][d_v]  running output of the blocks before, a compensated sum oh + oc */
    float *oc;  /* [BM][d_v]  (fc_comp_add); the output is behind * (oh + oc) + o */
    float *row; /* [8][d]      8 converted key rows */
} tile_buf;

/* Per packed row of the tile: query position, head, visible keys [lo, hi), ALiBi slope, softmax state
 * (running max m, running sum l + lc compensated, l = NaN once the row has met a NaN or +inf score),
 * and the factor (oh, oc) still owe since the last fold (the alphas of the blocks in o). */
typedef struct tile_rows {
    int n;
    int r[BM], hq[BM], lo[BM], hi[BM];
    float slope[BM], m[BM], l[BM], lc[BM], alpha[BM], behind[BM];
} tile_rows;

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

#ifndef FC_CPU_ISA
size_t fc_cpu_scratch_floats(const fc_problem *p) {
    size_t d = (size_t)p->d, dv = (size_t)p->d_v;
    return round16(BM * d) + round16(d * BK) + round16(BK * dv) + round16(BM * BK) + 3 * round16(BM * dv) +
           round16(8 * d);
}
#endif

static tile_buf carve(const fc_problem *p, float *scratch) {
    size_t d = (size_t)p->d, dv = (size_t)p->d_v;
    tile_buf t;
    t.q = scratch;
    t.kt = t.q + round16(BM * d);
    t.v = t.kt + round16(d * BK);
    t.s = t.v + round16(BK * dv);
    t.o = t.s + round16(BM * BK);
    t.oh = t.o + round16(BM * dv);
    t.oc = t.oh + round16(BM * dv);
    t.row = t.oc + round16(BM * dv);
    return t;
}

/* Row of query position r of sequence b in the global (split partial) numbering. */
static int64_t global_row(const fc_problem *p, const fc_seqlen *s, int b, int r) {
    return (p->cu_seqlens_q ? 0 : (int64_t)b * p->s_q) + s->q_row0 + r;
}

/* ---------------------------------------------------------------------------------------------- */
/* Setup: rows, queries, the key blocks this item covers.                                          */

/* Packed row m0+i is query position (m0+i) / group of head hk*group + (m0+i) % group. Split 0 carries
 * the sink (running max = sink, running sum = 1; a NaN or +inf sink makes the row NaN, as a score would);
 * the other splits start empty. */
static void init_rows(const fc_cpu_attn *a, const fc_cpu_tile *t, const fc_seqlen *s, int split, tile_rows *rw) {
    const fc_problem *p = a->p;
    rw->n = t->rows;
    for (int i = 0; i < t->rows; i++) {
        int pm = t->m0 + i;
        int r = pm / a->group, hq = t->hk * a->group + pm % a->group;
        rw->r[i] = r;
        rw->hq[i] = hq;
        fc_key_range(p, s->s_q, s->s_k, r, r + 1, &rw->lo[i], &rw->hi[i]);
        rw->slope[i] = p->alibi ? p->alibi[t->b * p->alibi_sb + hq * p->alibi_sh] : 0.0f;
        float sink = p->sinks && split == 0 ? p->sinks[hq * p->sinks_sh] : -INFINITY;
        rw->m[i] = sink;
        rw->l[i] = p->sinks && split == 0 ? (sink < INFINITY ? 1.0f : NAN) : 0.0f;
        rw->lc[i] = 0.0f;
        rw->behind[i] = 1.0f;
    }
}

/* q[i][0..d) = qscale * round(rotate(q row)) for each row of the tile (qscale is 1 with a softcap:
 * scale / softcap may be near FLT_MAX, and q times it would overflow where the dot product times it
 * only saturates the tanh). */
static void load_queries(const fc_cpu_attn *a, const fc_cpu_tile *t, const fc_seqlen *s, const tile_rows *rw,
                         float *restrict q) {
    const fc_problem *p = a->p;
    int d = p->d;
    for (int i = 0; i < rw->n; i++) {
        float *restrict x = q + (int64_t)i * d;
        int64_t off = fc_q_row_offset(&p->q, s, t->b, rw->r[i]) + rw->hq[i] * p->q.sh;
        fc_cpu_load_row(p->q.data, p->q_dtype, off, d, x);
        if (p->q_descale) {
            float qs = fc_cpu_descale(p->q_descale, p->q_descale_sb, p->q_descale_sh, t->b, t->hk);
            for (int c = 0; c < d; c++) x[c] *= qs;
        }
        if (p->rotary_cos) {
            fc_cpu_rotate(p, x, s->pos0 + s->s_k - s->s_q + rw->r[i]);
            for (int c = 0; c < p->rotary_dim; c++) x[c] = fc_round_to(p->dtype, x[c]);
        }
        for (int c = 0; c < d; c++) x[c] *= a->qscale;
    }
}

/* Key blocks [*kb0, *kb1) of this item: the tile's visible blocks within split `split`'s share (the
 * sequence's blocks cut into a->splits nearly equal contiguous chunks). */
static void item_blocks(const fc_cpu_attn *a, const fc_seqlen *s, const tile_rows *rw, int split, int *kb0, int *kb1) {
    int j0, j1;
    fc_key_range(a->p, s->s_q, s->s_k, rw->r[0], rw->r[rw->n - 1] + 1, &j0, &j1);
    int64_t nb = ((int64_t)s->s_k + BK - 1) / BK;
    int lo = (int)(split * nb / a->splits), hi = (int)((split + 1) * nb / a->splits);
    if (j0 >= j1) { *kb0 = *kb1 = 0; return; }
    int v0 = j0 / BK, v1 = (j1 + BK - 1) / BK;
    *kb0 = v0 > lo ? v0 : lo;
    *kb1 = v1 < hi ? v1 : hi;
}

/* Ask for key/value row j to come into cache: rows of one head sit a whole row of heads apart, too
 * far for the hardware prefetcher, and decode does too little math per row to hide the latency. */
static void prefetch_kv_row(const fc_problem *p, const fc_seqlen *s, int b, int hk, int j) {
#if defined(__GNUC__)
    if (j >= s->s_k) return;
    size_t es = fc_dtype_size(p->kv_dtype);
    fc_kv_loc loc = fc_kv_locate(p, s, b, j);
    const char *k = (const char *)p->k.data + (size_t)(fc_kv_offset(&p->k, loc) + hk * p->k.sh) * es;
    const char *v = (const char *)p->v.data + (size_t)(fc_kv_offset(&p->v, loc) + hk * p->v.sh) * es;
    for (size_t x = 0; x < (size_t)p->d * es; x += 64) __builtin_prefetch(k + x);
    for (size_t x = 0; x < (size_t)p->d_v * es; x += 64) __builtin_prefetch(v + x);
#endif
}

/* kt[c][jj] = key jb+jj, v[jj][c] = value jb+jj; keys past the sequence's end are zero. Keys go
 * through rows8 (8 rows of d floats) 8 at a time and are transposed in 8 x 8 blocks. */
static void load_kv_block(const fc_problem *p, const fc_seqlen *s, int b, int hk, int jb, tile_buf *buf) {
    int d = p->d, dv = p->d_v;
    float *restrict rows8 = buf->row;
    float ks = fc_cpu_descale(p->k_descale, p->k_descale_sb, p->k_descale_sh, b, hk);
    float vs = fc_cpu_descale(p->v_descale, p->v_descale_sb, p->v_descale_sh, b, hk);
    for (int j8 = 0; j8 < BK; j8 += 8) {
        for (int jj = j8; jj < j8 + 8; jj++) {
            float *restrict kr = rows8 + (jj - j8) * d, *restrict vr = buf->v + (int64_t)jj * dv;
            if (jb + jj >= s->s_k) {
                memset(kr, 0, sizeof(float) * (size_t)d);
                memset(vr, 0, sizeof(float) * (size_t)dv);
                continue;
            }
            prefetch_kv_row(p, s, b, hk, jb + jj + FC_CPU_PREFETCH_ROWS);
            fc_kv_loc loc = fc_kv_locate(p, s, b, jb + jj);
            int64_t k_off = fc_kv_offset(&p->k, loc) + hk * p->k.sh, v_off = fc_kv_offset(&p->v, loc) + hk * p->v.sh;
            fc_cpu_load_row(p->k.data, p->kv_dtype, k_off, d, kr);
            fc_cpu_load_row(p->v.data, p->kv_dtype, v_off, dv, vr);
            if (p->k_descale)
                for (int c = 0; c < d; c++) kr[c] *= ks;
            if (p->v_descale)
                for (int c = 0; c < dv; c++) vr[c] *= vs;
        }
        for (int c = 0; c < d; c += 8) transpose8(rows8 + c, d, buf->kt + c * BK + j8, BK);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* The two matrix products over a block: register tiles of FC_CPU_RT rows, then single rows.        */

/* S[rows][BK] = Q K^T, 16 keys (a panel of kt that stays in L1) at a time over all rows. */
static void qk_block(const float *q, int d, const float *kt, float *s, int rows) {
    for (int j0 = 0; j0 < BK; j0 += 16) {
        int i = 0;
        for (; i + FC_CPU_RT <= rows; i += FC_CPU_RT) qk_rows(FC_CPU_RT, q + i * d, d, kt + j0, s + i * BK + j0);
        for (; i < rows; i++) qk_rows(1, q + i * d, d, kt + j0, s + i * BK + j0);
    }
}

/* O[rows][d_v] = alpha O + P V, 16 features (a panel of v that stays in L1) at a time over all rows; the
 * last 8 of a d_v that is not a multiple of 16 one row at a time. */
static void pv_block(const float *pr, const float *v, int dv, const float *alpha, float *o, int rows) {
    int c0 = 0;
    for (; c0 + 16 <= dv; c0 += 16) {
        int i = 0;
        for (; i + FC_CPU_RT <= rows; i += FC_CPU_RT) pv_rows(FC_CPU_RT, pr + i * BK, v + c0, dv, alpha + i, o + i * dv + c0);
        for (; i < rows; i++) pv_rows(1, pr + i * BK, v + c0, dv, alpha + i, o + i * dv + c0);
    }
    for (int i = 0; i < rows && c0 < dv; i++) {
        float acc[16] = {0};
        for (int j = 0; j < BK; j++)
            for (int c = c0; c < dv; c++) acc[c - c0] = fc_madd(pr[i * BK + j], v[j * dv + c], acc[c - c0]);
        for (int c = c0; c < dv; c++) o[i * dv + c] = fc_madd(alpha[i], o[i * dv + c], acc[c - c0]);
    }
}

/* 1 when every value of the block is finite (an inf or NaN times 0 is NaN). */
static int block_finite(const float *restrict v, int n) {
    float z8[8] = {0};
    for (int i = 0; i < n; i += 8)
        for (int k = 0; k < 8; k++) z8[k] += v[i + k] * 0.0f;
    float z = ((z8[0] + z8[1]) + (z8[2] + z8[3])) + ((z8[4] + z8[5]) + (z8[6] + z8[7]));
    return z == 0.0f;
}

/* pv_block for a block with keys some rows must not see and values that are not all finite: each row
 * sums only its visible keys [lo, hi) (p = 0 times an inf or NaN of a hidden key would be NaN). */
static void pv_block_visible(const float *pr, const float *v, int dv, const tile_rows *rw, int jb, float *o) {
    float acc[256];
    for (int i = 0; i < rw->n; i++) {
        int j0 = rw->lo[i] - jb, j1 = rw->hi[i] - jb;
        j0 = j0 > 0 ? j0 : 0;
        j1 = j1 < BK ? j1 : BK;
        for (int c = 0; c < dv; c++) acc[c] = 0.0f;
        for (int j = j0; j < j1; j++) {
            float x = pr[i * BK + j];
            const float *restrict vj = v + j * dv;
            for (int c = 0; c < dv; c++) acc[c] = fc_madd(x, vj[c], acc[c]);
        }
        for (int c = 0; c < dv; c++) o[i * dv + c] = fc_madd(rw->alpha[i], o[i * dv + c], acc[c]);
    }
}

/* (oh, oc) = behind * (oh + oc) + o, compensated; then o = 0, behind = 1. Every FOLD blocks and at
 * the end: o sums at most FOLD block sums, so the rounding error of the output does not grow with
 * the number of keys, at the cost of one compensated add per FOLD blocks. */
static void fold_rows(tile_rows *rw, int dv, float *restrict o, float *restrict oh, float *restrict oc) {
    for (int i = 0; i < rw->n; i++) {
        float a = rw->behind[i];
        for (int c = 0; c < dv; c++) {
            int64_t e = (int64_t)i * dv + c;
            fc_comp_add(oh + e, oc + e, a, o[e]);
            o[e] = 0.0f;
        }
        rw->behind[i] = 1.0f;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Online softmax of one row over one key block.                                                   */

/* Steps 2-4 of the semantics on scores x[0..BK) of keys jb..: softcap, ALiBi, and (only on blocks
 * that are not fully visible to the tile) the mask lo <= j < hi. pos = r + s_k - s_q. */
static void modify_scores(const fc_problem *p, float *restrict x, int jb, int pos, int lo, int hi, float slope,
                          int masked) {
    if (p->softcap > 0.0f) {
        float mul = p->scale / p->softcap; /* a normal float (fc_attn_fwd checks) */
        for (int j = 0; j < BK; j++) x[j] = p->softcap * tanhf(x[j] * mul);
    }
    if (p->alibi)
        for (int j = 0; j < BK; j++) {
            int dist = pos - (jb + j);
            x[j] -= slope * (float)(dist < 0 ? -dist : dist);
        }
    if (masked)
        for (int j = 0; j < BK; j++) x[j] = (jb + j < lo || jb + j >= hi) ? -INFINITY : x[j];
}

/* The largest score (NaN scores are passed over). */
static float row_max(const float *restrict x) {
    float m8[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int j = 0; j < BK; j += 8)
        for (int k = 0; k < 8; k++) m8[k] = x[j + k] > m8[k] ? x[j + k] : m8[k];
    float m = m8[0];
    for (int k = 1; k < 8; k++) m = m8[k] > m ? m8[k] : m;
    return m;
}

static int has_nan(const float *restrict x) {
    int n = 0;
    for (int j = 0; j < BK; j++) n += x[j] != x[j];
    return n > 0;
}

/* x[j] = exp(x[j] - m) for a finite m at least every score; returns the sum. *nan is NaN iff a score
 * was NaN: it sums the x[j] - m, which are <= 0 or -inf otherwise. */
static float exp_and_sum(float *restrict x, float m, float *nan) {
    float s8[8] = {0}, d8[8] = {0};
    for (int j = 0; j < BK; j += 8)
        for (int k = 0; k < 8; k++) {
            float dx = x[j + k] - m, e = fc_cpu_exp(dx);
            x[j + k] = e;
            s8[k] += e;
            d8[k] += dx;
        }
    *nan = ((d8[0] + d8[1]) + (d8[2] + d8[3])) + ((d8[4] + d8[5]) + (d8[6] + d8[7]));
    return ((s8[0] + s8[1]) + (s8[2] + s8[3])) + ((s8[4] + s8[5]) + (s8[6] + s8[7]));
}

/* Turns scores x into probabilities against the new running max, updates (m, l + lc); returns the
 * factor alpha = exp(m_old - m_new) for the row's output. A row that has seen no visible key stays at
 * m = -inf, l = 0, with p = 0. A NaN or +inf score (masked keys are -inf by now) makes l NaN for good:
 * the row's out and lse will be NaN, and its p are 0 from then on. */
static float softmax_row(float *restrict x, float *m, float *l, float *lc) {
    float mx = row_max(x);
    float m_new = mx > *m ? mx : *m, nan = 0.0f;
    if (*l != *l || mx == INFINITY || (m_new == -INFINITY && has_nan(x))) {
        *l = NAN;
        memset(x, 0, sizeof(float) * BK);
        return 1.0f;
    }
    if (m_new == -INFINITY) {
        memset(x, 0, sizeof(float) * BK);
        return 1.0f;
    }
    float alpha = fc_cpu_exp(*m - m_new);
    float sum = exp_and_sum(x, m_new, &nan);
    if (nan != nan) {
        *l = NAN;
        memset(x, 0, sizeof(float) * BK);
        return 1.0f;
    }
    fc_comp_add(l, lc, alpha, sum);
    *m = m_new;
    return alpha;
}

/* ---------------------------------------------------------------------------------------------- */
/* Results.                                                                                        */

/* out = (oh + oc) / l, lse = m + log l (0 and -inf for a row that saw nothing, NaN for a row with a
 * NaN or +inf score): into out/lse, or into the fp32 partials of split `split`. */
static void store_rows(const fc_cpu_attn *a, const fc_cpu_tile *t, const fc_seqlen *s, int split, const tile_rows *rw,
                       const float *o, const float *oc) {
    const fc_problem *p = a->p;
    int dv = p->d_v;
    for (int i = 0; i < rw->n; i++) {
        const float *restrict oi = o + (int64_t)i * dv, *restrict ci = oc + (int64_t)i * dv;
        float l = rw->l[i] + rw->lc[i];
        int nan_row = l != l, empty = !(l > 0.0f);
        float lse = nan_row ? NAN : empty ? -INFINITY : rw->m[i] + logf(l);
        int r = rw->r[i], hq = rw->hq[i];
        if (a->splits == 1) {
            int64_t off = fc_q_row_offset(&p->out, s, t->b, r) + hq * p->out.sh;
            for (int c = 0; c < dv; c++)
                fc_store(p->out.data, p->dtype, off + c, nan_row ? NAN : empty ? 0.0f : (oi[c] + ci[c]) / l);
            if (p->lse) p->lse[t->b * p->lse_sb + hq * p->lse_sh + (s->q_row0 + r) * p->lse_sr] = lse;
        } else {
            int64_t row = ((int64_t)split * a->part_rows + global_row(p, s, t->b, r)) * p->h_q + hq;
            float *restrict dst = a->part_out + row * dv;
            for (int c = 0; c < dv; c++) dst[c] = nan_row ? NAN : empty ? 0.0f : (oi[c] + ci[c]) / l;
            a->part_lse[row] = lse;
        }
    }
}

#ifndef FC_CPU_ISA /* the baseline build only: no hot loops */
void fc_cpu_merge_tile(const fc_cpu_attn *a, const fc_cpu_tile *t) {
    const fc_problem *p = a->p;
    fc_seqlen s = fc_seqlen_of(p, t->b);
    int64_t split_stride = a->part_rows * p->h_q;
    for (int i = 0; i < t->rows; i++) {
        int pm = t->m0 + i;
        int r = pm / a->group, hq = t->hk * a->group + pm % a->group;
        int64_t row = global_row(p, &s, t->b, r) * p->h_q + hq;
        int64_t out_off = fc_q_row_offset(&p->out, &s, t->b, r) + hq * p->out.sh;
        float *lse = p->lse ? p->lse + t->b * p->lse_sb + hq * p->lse_sh + (s.q_row0 + r) * p->lse_sr : NULL;
        fc_cpu_merge_row(a->splits, p->d_v, a->part_out, FC_FP32, row * p->d_v, split_stride * p->d_v,
                         a->part_lse + row, split_stride, p->out.data, p->dtype, out_off, lse);
    }
}

#endif

/* ---------------------------------------------------------------------------------------------- */

void FC_CPU_ISA_NAME(fc_cpu_run_item)(const fc_cpu_attn *a, const fc_cpu_tile *t, int split, float *scratch) {
    const fc_problem *p = a->p;
    fc_seqlen s = fc_seqlen_of(p, t->b);
    tile_buf buf = carve(p, scratch);
    tile_rows rw;
    init_rows(a, t, &s, split, &rw);
    load_queries(a, t, &s, &rw, buf.q);
    memset(buf.o, 0, sizeof(float) * (size_t)rw.n * (size_t)p->d_v);
    memset(buf.oh, 0, sizeof(float) * (size_t)rw.n * (size_t)p->d_v);
    memset(buf.oc, 0, sizeof(float) * (size_t)rw.n * (size_t)p->d_v);

    int kb0, kb1;
    item_blocks(a, &s, &rw, split, &kb0, &kb1);
    int inner_lo = rw.lo[rw.n - 1], inner_hi = rw.hi[0]; /* keys visible to every row of the tile */
    int off = s.s_k - s.s_q;
    for (int kb = kb0; kb < kb1; kb++) { /* S[n][BK] = Q K^T; P = softmax pieces; O = alpha O + P V */
        int jb = kb * BK;
        int masked = !(jb >= inner_lo && jb + BK <= inner_hi);
        load_kv_block(p, &s, t->b, t->hk, jb, &buf);
        qk_block(buf.q, p->d, buf.kt, buf.s, rw.n);
        for (int i = 0; i < rw.n; i++) {
            float *x = buf.s + i * BK;
            modify_scores(p, x, jb, rw.r[i] + off, rw.lo[i], rw.hi[i], rw.slope[i], masked);
            rw.alpha[i] = softmax_row(x, &rw.m[i], &rw.l[i], &rw.lc[i]);
            if (p->q_dtype != p->dtype) /* FP8 attention: P in e4m3 for P·V (the sum above is unquantised) */
                for (int j = 0; j < BK; j++) x[j] = fc_round_to(FC_E4M3, x[j]);
        }
        if (masked && !block_finite(buf.v, BK * p->d_v)) pv_block_visible(buf.s, buf.v, p->d_v, &rw, jb, buf.o);
        else pv_block(buf.s, buf.v, p->d_v, rw.alpha, buf.o, rw.n);
        for (int i = 0; i < rw.n; i++) rw.behind[i] *= rw.alpha[i];
        if ((kb - kb0) % FOLD == FOLD - 1 || kb == kb1 - 1) fold_rows(&rw, p->d_v, buf.o, buf.oh, buf.oc);
    }
    store_rows(a, t, &s, split, &rw, buf.oh, buf.oc);
}
