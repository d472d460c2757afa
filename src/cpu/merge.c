/* merge.c — merging partial attention states (out_s, lse_s) into one: fc_merge_states and the split-KV combine. */
#include <math.h>

#include "cpu/cpu.h"

#define MERGE_CHUNK 64 /* features accumulated at a time */

static void store_value(void *out, fc_dtype dt, int64_t off, int n, float x) {
    for (int c = 0; c < n; c++) fc_store(out, dt, off + c, x);
}

/* acc[0..n) += w * partial[off .. off+n) */
static void add_weighted(float *restrict acc, float w, const void *op, fc_dtype dt, int64_t off, int n) {
    if (dt == FC_FP32) {
        const float *restrict x = (const float *)op + off;
        for (int c = 0; c < n; c++) acc[c] = fc_madd(w, x[c], acc[c]);
    } else {
        float x[MERGE_CHUNK];
        fc_cpu_load_row(op, dt, off, n, x);
        for (int c = 0; c < n; c++) acc[c] = fc_madd(w, x[c], acc[c]);
    }
}

/* lse = log(sum_s exp(lse_s)), out = sum_s exp(lse_s - lse) out_s; partials with lse_s = -inf are
 * skipped (their out_s is never read); all -inf gives out = 0, lse = -inf; a NaN lse_s gives NaN. The
 * weights are exp(lse_s - max) / sum, not exp(lse_s - lse): with |lse_s| large (1e8) lse rounds by more
 * than log(sum) and weights from it would not add up to 1. */
void fc_cpu_merge_row(int n, int d_v, const void *op, fc_dtype op_dt, int64_t op_off, int64_t op_sn,
                      const float *lp, int64_t lp_sn, void *out, fc_dtype out_dt, int64_t out_off, float *lse) {
    float lmax = -INFINITY;
    for (int s = 0; s < n; s++)
        if (lp[s * lp_sn] > lmax || lp[s * lp_sn] != lp[s * lp_sn]) lmax = lp[s * lp_sn];
    if (lmax == -INFINITY || lmax != lmax) {
        store_value(out, out_dt, out_off, d_v, lmax != lmax ? NAN : 0.0f);
        if (lse) *lse = lmax;
        return;
    }
    float sum = 0.0f;
    for (int s = 0; s < n; s++)
        if (lp[s * lp_sn] != -INFINITY) sum += expf(lp[s * lp_sn] - lmax);
    float l = lmax + logf(sum), inv = 1.0f / sum;

    for (int64_t c0 = 0; c0 < d_v; c0 += MERGE_CHUNK) { /* out[c0 .. c0+len) */
        int len = d_v - c0 < MERGE_CHUNK ? (int)(d_v - c0) : MERGE_CHUNK;
        float acc[MERGE_CHUNK] = {0};
        for (int s = 0; s < n; s++) {
            float ls = lp[s * lp_sn];
            if (ls == -INFINITY) continue;
            add_weighted(acc, expf(ls - lmax) * inv, op, op_dt, op_off + s * op_sn + c0, len);
        }
        for (int c = 0; c < len; c++) fc_store(out, out_dt, out_off + c0 + c, acc[c]);
    }
    if (lse) *lse = l;
}

/* ---------------------------------------------------------------------------------------------- */
/* fc_merge_states on the CPU: rows in chunks over the worker threads.                             */

#define ROWS_PER_ITEM 16

static void merge_rows(void *ctx, int64_t item, int worker) {
    const fc_merge_problem *m = ctx;
    int64_t r1 = (item + 1) * ROWS_PER_ITEM < m->rows ? (item + 1) * ROWS_PER_ITEM : m->rows;
    for (int64_t r = item * ROWS_PER_ITEM; r < r1; r++)
        for (int h = 0; h < m->h; h++)
            fc_cpu_merge_row(m->n, m->d_v, m->out_partial, m->partial_dtype, r * m->op_sr + h * m->op_sh, m->op_sn,
                             m->lse_partial + r * m->lp_sr + h * m->lp_sh, m->lp_sn, m->out, m->out_dtype,
                             r * m->o_sr + h * m->o_sh, m->lse ? m->lse + r * m->l_sr + h * m->l_sh : NULL);
}

fc_status fc_cpu_merge(const fc_merge_problem *m) {
    int64_t items = ((int64_t)m->rows + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM;
    double work = (double)m->rows * m->h * m->n * ((double)m->d_v + 1); /* elements read: may exceed int64 */
    int workers = work < (1 << 16) ? 1 : fc_get_num_threads(); /* threads only pay off on large merges */
    fc_cpu_parallel_for(items, workers, merge_rows, (void *)m);
    return FC_OK;
}
