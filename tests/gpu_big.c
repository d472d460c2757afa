/* gpu_big.c — the CUDA backend on tensors of more than 2^31 elements: far pages, far sequences, far rows. */
/*
 * Element offsets past 2^31 must be computed in 64 bits everywhere on the device. Each case puts what a
 * kernel must read (or write) past element 2^31 of a tensor, fills the rest of that tensor with a
 * pattern a wrong offset would show (NaN bytes, or a constant), and checks the GPU's results for those
 * rows against the CPU backend run on host copies of just the data involved, and ref64 on sampled rows,
 * as gpu_attn does: |gpu - ref64| beyond out's rounding <= 2 max|ref_lowp - ref64| + 1e-5,
 * |gpu - cpu| - eps|cpu| within twice that on every row, lse within 1e-3 (1 + |lse|) of the CPU's, no NaN.
 *
 * Cases (full sizes; --small moves the boundary from element 2^31 to 2^24, for a harness check):
 *   paged-psP-decode, -prefill  k and v (num_pages, P, 8, 128), P = 16, 64, 256, of more than 2^31
 *                               elements each (4.4 GB); 4 sequences (1000, 2999, 1, 2048 keys) on pages
 *                               past element 2^31 but one just below it, every other page NaN; s_q 1
 *                               (h_q 32) and 200 causal (h_q 16).
 *   dense-decode, -prefill      k and v (65, 32768, 8, 128): sequences 0 and 64 (from element 2^31 on)
 *                               random and checked against the CPU; the other sequences hold a constant
 *                               whose output must come back (within one rounding) on every row.
 *   append-paged, append-dense  4 new keys with rotary appended on far pages, and into the second
 *                               sequence of a dense cache whose batch stride puts it past element 2^31;
 *                               then the whole cache must hold the CPU's appended rows and the fill
 *                               everywhere else.
 *   varlen-q-many, -few         q and out (total_q, 32, 128) of more than 2^31 elements (4.4 GB each):
 *                               ~1000 sequences of 0..1023 queries (causal, 600 keys shared through a
 *                               batch stride of 0), or 2 sequences of 270k queries over 128 keys each;
 *                               whole sequences / 512-row slices near the start, middle and end checked
 *                               against the CPU; every element of out written and within the range of v.
 * Device memory: at most two 4.4 GB tensors at a time (~9 GB); host memory about 1 GB.
 *
 * usage: gpu_big [--small] [NAME]     the cases whose name contains NAME (default: all)
 * environment: FLASHC_GPU_FAKE=1 (needs --small) the CPU backend stands in for the GPU.
 * Exit: 0 all passed, 1 something failed, 2 no CUDA device.
 */
#include "gpu_harness.h"

enum { H_K = 8, D = 128 };

static int64_t g_far;   /* the boundary the data sits beyond: 2^31 elements (--small: 2^24) */
static int64_t g_big_n; /* elements of each big tensor: g_far + g_far / 32 */
static void *g_kbig, *g_vbig;
static double g_worst;

/* ---------------------------------------------------------------------------------------------- */
/* Memory                                                                                          */

/* Sets bytes of device memory to byte (on g_stream; waits). */
static void dev_fill(void *p, int byte, int64_t bytes) {
    if (g_fake) {
        memset(p, byte, (size_t)bytes);
        return;
    }
    cuda_die(cudaMemsetAsync(p, byte, (size_t)bytes, g_stream), "cudaMemsetAsync");
    cuda_die(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
}

/* A device copy of n host bytes. */
static void *dev_copy(const void *host, size_t n) {
    void *p = dev_alloc(n);
    to_dev(p, host, n);
    return p;
}

static void *host_alloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("gpu_big: out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* Element e of a 2-byte-element buffer. */
static void *at(void *base, int64_t e) { return (char *)base + e * 2; }

static void *random_buf(fc_dtype dt, int64_t n, uint64_t *rng) {
    void *p = host_alloc((size_t)n * tu_esize(dt));
    fill_random(p, dt, n, rng);
    return p;
}

/* The two big tensors (k and v of the cache cases), allocated once. */
static void big_kv(void) {
    if (g_kbig) return;
    g_kbig = dev_alloc((size_t)g_big_n * 2);
    g_vbig = dev_alloc((size_t)g_big_n * 2);
}

static void free_big_kv(void) {
    dev_free(g_kbig);
    dev_free(g_vbig);
    g_kbig = g_vbig = NULL;
}

/* A span of a big tensor whose contents are known: n elements from element off equal want. */
typedef struct span {
    int64_t off, n;
    const uint16_t *want;
} span;

static int span_order(const void *a, const void *b) {
    int64_t x = ((const span *)a)->off, y = ((const span *)b)->off;
    return x < y ? -1 : x > y;
}

/* Elements of the device tensor dev (n 2-byte elements) that differ from what they must hold: the
 * spans' contents inside them (disjoint), fill everywhere else. Reads the tensor back in chunks. */
static int64_t scan_big(const void *dev, int64_t n, uint16_t fill, span *sp, int nsp) {
    const int64_t chunk = (int64_t)1 << 26;
    uint16_t *buf = host_alloc((size_t)chunk * 2);
    qsort(sp, (size_t)nsp, sizeof *sp, span_order);
    int64_t bad = 0;
    int s = 0;
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
        int64_t c1 = c0 + chunk < n ? c0 + chunk : n;
        to_host(buf, (const char *)dev + c0 * 2, (size_t)(c1 - c0) * 2);
        for (int64_t i = c0; i < c1;) {
            while (s < nsp && sp[s].off + sp[s].n <= i) s++;
            int64_t gap_end = s < nsp && sp[s].off < c1 ? sp[s].off : c1;
            for (; i < gap_end; i++) bad += buf[i - c0] != fill;
            if (i == c1) break;
            int64_t end = sp[s].off + sp[s].n < c1 ? sp[s].off + sp[s].n : c1;
            for (; i < end; i++) bad += buf[i - c0] != sp[s].want[i - sp[s].off];
        }
    }
    free(buf);
    return bad;
}

/* ---------------------------------------------------------------------------------------------- */
/* Running and checking                                                                            */

/* Runs a on the device (poisoned workspace) and waits; 1 if it succeeded, else a failure is counted. */
static int gpu_call(const char *name, const fc_attn_args *a) {
    size_t ws_bytes = 0;
    fc_status st = fc_attn_workspace_size(a, &ws_bytes);
    void *ws = st == FC_OK && ws_bytes ? dev_alloc_ws(ws_bytes) : NULL;
    if (st == FC_OK) st = fc_attn_fwd(a, ws, ws_bytes, g_fake ? NULL : (void *)g_stream);
    cudaError_t e = dev_sync();
    if (!tu_check(e == cudaSuccess, "%s: after fc_attn_fwd: %s", name, cudaGetErrorString(e))) {
        tu_finish(); /* a sticky fault: nothing further can run in this process */
        exit(1);
    }
    dev_free(ws);
    if (!tu_check(st == FC_OK, "%s: fc_attn_fwd: %s: %s", name, fc_status_string(st), fc_last_error())) return 0;
    st = fc_check_errors(g_fake ? NULL : (void *)g_stream); /* a valid call: nothing recorded */
    if (!tu_check(st == FC_OK, "%s: fc_check_errors: %s: %s", name, fc_status_string(st), fc_last_error())) return 0;
    return 1;
}

/* ref64's sampled rows: every step-th, the float64 work near 1e8 multiply-adds (at least 8 rows). */
static int row_step(int64_t rows, int h_q, int64_t keys) {
    double want = ceil((double)rows * h_q * (keys + 1) * 2 * D / 1e8);
    int64_t cap = rows / 8 > 1 ? rows / 8 : 1, step = want < 1 ? 1 : (int64_t)want;
    if (step > cap) step = cap;
    if (step > 1 && step % 2 == 0) step++;
    return (int)step;
}

/* One output row (D values from element o; lse element l) of the GPU against the CPU's and, if sampled,
 * ref64 (gpu_harness.h's cmp). */
static void cmp_rows(const fc_attn_args *a, const void *gpu_out, const float *gpu_lse, const double *ref,
                    const double *low, int sampled, int64_t o, int64_t l, cmp *m) {
    fc_dtype dt = a->q.dtype;
    int masked = 0;
    if (a->lse.data) {
        double cl = ((const float *)a->lse.data)[l], gl = gpu_lse[l];
        masked = cl == -INFINITY;
        double e = masked ? (gl == -INFINITY ? 0 : INFINITY) : fabs(gl - cl) / (1 + fabs(cl));
        if (!(e <= 1e-3)) m->lse_bad++;
        if (!(e <= m->lse_err)) m->lse_err = e;
    }
    for (int e = 0; e < D; e++) {
        double x = tu_load(gpu_out, dt, o + e), y = tu_load(a->out.data, dt, o + e);
        if (isnan(x)) m->nans++;
        if (masked && x != 0) m->masked_bad++;
        double dc = fabs(x - y), ex = dc - tu_eps(dt) * fabs(y);
        if (!(dc <= m->cpu_diff)) m->cpu_diff = isnan(dc) ? INFINITY : dc;
        if (!(ex <= m->cpu_excess)) m->cpu_excess = isnan(ex) ? INFINITY : ex;
        if (!sampled) continue;
        double er = tu_err_beyond_rounding(dt, x, ref[e]), el = fabs(low[e] - ref[e]);
        if (!(er <= m->err)) m->err = isnan(er) ? INFINITY : er;
        if (el > m->err_low) m->err_low = el;
    }
}

/* The CPU backend on the host problem a (dense q (b, s_q, h_q, 128); out and lse contiguous host buffers,
 * written here) against the GPU's out and lse of the same rows in the same layouts, and ref64. keys: the
 * most keys a row sees (sizes ref64's sample). */
static void check_rows(const char *name, fc_attn_args *a, const void *gpu_out, const float *gpu_lse, int64_t keys) {
    int64_t b = a->q.shape[0], s_q = a->q.shape[1], h_q = a->q.shape[2], rows = b * s_q;
    tu_poison(a->out.data, a->q.dtype, rows * h_q * D);
    tu_poison(a->lse.data, FC_FP32, rows * h_q);
    a->device = FC_DEVICE_CPU;
    a->num_splits = 0;
    fc_status st = fc_attn_fwd(a, NULL, 0, NULL);
    if (!tu_check(st == FC_OK, "%s: CPU backend: %s: %s", name, fc_status_string(st), fc_last_error())) return;
    size_t n = (size_t)(rows > 0 ? rows : 1) * h_q;
    double *ref = host_alloc(n * D * 8), *low = host_alloc(n * D * 8), *lse = host_alloc(n * 8),
           *lse_low = host_alloc(n * 8);
    int step = row_step(rows, (int)h_q, keys);
    if (tu_check(ref64_pair(a, step, ref, lse, low, lse_low, NULL) == 0, "%s: ref64 cannot read this case", name)) {
        cmp m;
        memset(&m, 0, sizeof m);
        for (int64_t bb = 0; bb < b; bb++)
            for (int64_t r = 0; r < s_q; r++) {
                int64_t row = bb * s_q + r;
                int sampled = ref64_sampled(row, r, s_q, step);
                for (int64_t h = 0; h < h_q; h++)
                    cmp_rows(a, gpu_out, gpu_lse, ref + (row * h_q + h) * D, low + (row * h_q + h) * D, sampled,
                            (row * h_q + h) * D, (bb * h_q + h) * s_q + r, &m);
            }
        double tol = tol_of(m.err_low), ratio = m.nans || m.masked_bad ? INFINITY : m.err / tol;
        worst_update(&g_worst, ratio);
        tu_check(m.nans == 0 && m.masked_bad == 0 && m.err <= tol,
                 "%s: |gpu-ref64| beyond rounding %.3g, max|lowp-ref64| %.3g, ratio %.3g, NaN %lld, masked rows "
                 "nonzero %lld (rows every %d)",
                 name, m.err, m.err_low, ratio, (long long)m.nans, (long long)m.masked_bad, step);
        tu_check(m.cpu_excess <= 2 * tol, "%s: |gpu-cpu| - eps|cpu| up to %.3g, over 2 x tolerance %.3g", name,
                 m.cpu_excess, 2 * tol);
        tu_check(m.lse_bad == 0, "%s: lse %lld bad against the CPU's, worst rel err %.3g", name, (long long)m.lse_bad,
                 m.lse_err);
        printf("  %-40s %6lld rows x %2lld heads: ratio %.3f, max|gpu-cpu| %.2e\n", name, (long long)rows,
               (long long)h_q, ratio, m.cpu_diff);
    }
    free(ref);
    free(low);
    free(lse);
    free(lse_low);
}

/* Host out and lse for the dense queries of a: contiguous, (b, s_q, h_q, 128) and (b, h_q, s_q). */
static void host_outputs(fc_attn_args *a) {
    int64_t b = a->q.shape[0], s_q = a->q.shape[1], h_q = a->q.shape[2];
    a->out = fc_tensor_4d(host_alloc((size_t)(b * s_q * h_q * D * 2)), a->q.dtype, b, s_q, h_q, D);
    a->lse = fc_tensor_3d(host_alloc((size_t)(b * h_q * s_q * 4)), FC_FP32, b, h_q, s_q);
}

/* Bytes of a contiguous tensor. */
static size_t bytes_of(const fc_tensor *t) { return (size_t)(t->shape[0] * t->stride[0]) * fc_dtype_size(t->dtype); }

/* Device out and lse like host's, NaN-poisoned. */
static void dev_outputs(fc_attn_args *d, const fc_attn_args *host) {
    size_t ob = bytes_of(&host->out), lb = bytes_of(&host->lse);
    d->out = host->out;
    d->lse = host->lse;
    d->out.data = dev_alloc(ob);
    d->lse.data = dev_alloc(lb);
    dev_fill(d->out.data, 0xff, (int64_t)ob);
    dev_fill(d->lse.data, 0xff, (int64_t)lb);
}

/* Copies the device out and lse of d back (host buffers of host's sizes). */
static void download_outputs(const fc_attn_args *d, const fc_attn_args *host, void **out, float **lse) {
    size_t ob = bytes_of(&host->out), lb = bytes_of(&host->lse);
    *out = host_alloc(ob);
    *lse = host_alloc(lb);
    to_host(*out, d->out.data, ob);
    to_host(*lse, d->lse.data, lb);
}

/* Rotary tables (max_pos, rot_dim / 2), float32, on the host. */
static void rotary_tables(fc_attn_args *a, int64_t max_pos, int rot_dim) {
    int half = rot_dim / 2;
    float *c = host_alloc((size_t)(max_pos * half * 4)), *s = host_alloc((size_t)(max_pos * half * 4));
    for (int64_t p = 0; p < max_pos; p++)
        for (int m = 0; m < half; m++) {
            double ang = (double)p * pow(10000.0, -2.0 * m / rot_dim);
            c[p * half + m] = (float)cos(ang);
            s[p * half + m] = (float)sin(ang);
        }
    a->rotary_cos = fc_tensor_2d(c, FC_FP32, max_pos, half);
    a->rotary_sin = fc_tensor_2d(s, FC_FP32, max_pos, half);
}

/* Device copies of every small host tensor of a that d shares (q, seqused_k, k_new, ..., rotary). */
static void mirror_small(fc_attn_args *d, const fc_attn_args *a) {
    fc_tensor *dt[] = {&d->q,          &d->seqused_k,  &d->k_new,      &d->v_new,
                       &d->rotary_cos, &d->rotary_sin, &d->page_table, NULL};
    const fc_tensor *ht[] = {&a->q,          &a->seqused_k,  &a->k_new,     &a->v_new,
                             &a->rotary_cos, &a->rotary_sin, &a->page_table};
    for (int i = 0; dt[i]; i++)
        if (ht[i]->data && dt[i]->data == ht[i]->data) /* present, and not set by the case */
            dt[i]->data = dev_copy(ht[i]->data, bytes_of(ht[i]));
}

static void free_small(fc_attn_args *d, const fc_attn_args *a) {
    fc_tensor *dt[] = {&d->q, &d->seqused_k, &d->k_new, &d->v_new, &d->rotary_cos, &d->rotary_sin, &d->page_table,
                       &d->out, &d->lse, NULL};
    const fc_tensor *ht[] = {&a->q, &a->seqused_k, &a->k_new, &a->v_new, &a->rotary_cos, &a->rotary_sin,
                             &a->page_table, &a->out, &a->lse};
    for (int i = 0; dt[i]; i++) {
        if (dt[i]->data && dt[i]->data != ht[i]->data) dev_free(dt[i]->data);
        free(ht[i]->data);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Paged: sequences on the far pages of a cache of more than 2^31 elements (and an append there)    */

static void case_paged(const char *name, int ps, int s_q, fc_dtype dt, int s_new, int rot_dim) {
    enum { B = 4 };
    static const int keys[B] = {1000, 2999, 1, 2048};
    uint64_t rng = 1000 + (uint64_t)ps * 7 + (uint64_t)s_q;
    int64_t page_elems = (int64_t)ps * H_K * D, num_pages = g_big_n / page_elems, first_far = g_far / page_elems;
    int need[B], total = 0, max_pages = 0;
    for (int i = 0; i < B; i++) {
        need[i] = (keys[i] + s_new + ps - 1) / ps;
        total += need[i];
        if (need[i] + 1 > max_pages) max_pages = need[i] + 1;
    }
    /* device pages: the last total - 1 of the cache and the one just below element g_far, shuffled */
    int64_t *page = host_alloc(sizeof(int64_t) * (size_t)total);
    for (int c = 0; c < total; c++) page[c] = num_pages - 1 - c;
    if (num_pages - total > first_far - 1) page[total - 1] = first_far - 1;
    for (int c = total - 1; c > 0; c--) {
        int j = tu_randint(&rng, 0, c);
        int64_t t = page[c];
        page[c] = page[j];
        page[j] = t;
    }
    /* the host cache: the pages in use only (compact), rows past seqused_k NaN */
    uint16_t *kc = host_alloc((size_t)(total * page_elems * 2)), *vc = host_alloc((size_t)(total * page_elems * 2));
    tu_poison(kc, dt, total * page_elems);
    tu_poison(vc, dt, total * page_elems);
    int32_t *pt_host = host_alloc(sizeof(int32_t) * B * max_pages);
    int32_t *pt_dev = host_alloc(sizeof(int32_t) * B * max_pages);
    /* compact page c of the host is device page page[c]; a spare entry per sequence points at page 0 */
    for (int i = 0, c = 0; i < B; i++)
        for (int p = 0; p < max_pages; p++) {
            pt_host[i * max_pages + p] = p < need[i] ? c : 0;
            pt_dev[i * max_pages + p] = p < need[i] ? (int32_t)page[c] : 0;
            if (p >= need[i]) continue;
            for (int64_t t = 0; t < ps && p * ps + t < keys[i]; t++) {
                fill_random(kc + (c * ps + t) * H_K * D, dt, H_K * D, &rng);
                fill_random(vc + (c * ps + t) * H_K * D, dt, H_K * D, &rng);
            }
            c++;
        }
    big_kv();
    dev_fill(g_kbig, 0xff, g_big_n * 2);
    dev_fill(g_vbig, 0xff, g_big_n * 2);
    for (int c = 0; c < total; c++) {
        to_dev(at(g_kbig, page[c] * page_elems), kc + c * page_elems, (size_t)page_elems * 2);
        to_dev(at(g_vbig, page[c] * page_elems), vc + c * page_elems, (size_t)page_elems * 2);
    }

    int h_q = s_q == 1 ? 32 : 16;
    fc_attn_args a;
    fc_attn_args_init(&a);
    a.q = fc_tensor_4d(random_buf(dt, (int64_t)B * s_q * h_q * D, &rng), dt, B, s_q, h_q, D);
    a.k = fc_tensor_4d(kc, dt, total, ps, H_K, D);
    a.v = fc_tensor_4d(vc, dt, total, ps, H_K, D);
    a.page_table = fc_tensor_2d(pt_host, FC_INT32, B, max_pages);
    int32_t *used = host_alloc(sizeof(int32_t) * B);
    for (int i = 0; i < B; i++) used[i] = keys[i];
    a.seqused_k = fc_tensor_1d(used, FC_INT32, B);
    a.causal = s_q > 1;
    if (s_new) {
        a.k_new = fc_tensor_4d(random_buf(dt, (int64_t)B * s_new * H_K * D, &rng), dt, B, s_new, H_K, D);
        a.v_new = fc_tensor_4d(random_buf(dt, (int64_t)B * s_new * H_K * D, &rng), dt, B, s_new, H_K, D);
        if (rot_dim) rotary_tables(&a, (int64_t)max_pages * ps + 1, rot_dim);
    }
    host_outputs(&a);
    fc_attn_args d = a;
    d.device = gpu_device();
    d.k = fc_tensor_4d(g_kbig, dt, num_pages, ps, H_K, D);
    d.v = fc_tensor_4d(g_vbig, dt, num_pages, ps, H_K, D);
    d.page_table = fc_tensor_2d(dev_copy(pt_dev, sizeof(int32_t) * B * max_pages), FC_INT32, B, max_pages);
    mirror_small(&d, &a);
    dev_outputs(&d, &a);
    printf("%s: k, v (%lld, %d, %d, %d) = %.3g elements each; %d pages in use from page %lld (element %lld from "
           "page %lld on)\n", name, (long long)num_pages, ps, H_K, D, (double)num_pages * page_elems, total,
           (long long)(num_pages - total < first_far - 1 ? num_pages - total : first_far - 1), (long long)g_far,
           (long long)first_far);
    if (gpu_call(name, &d)) {
        void *out;
        float *lse;
        download_outputs(&d, &a, &out, &lse);
        check_rows(name, &a, out, lse, 3000 + s_new);
        if (s_new) { /* the whole cache: the CPU's pages after its append where in use, NaN elsewhere */
            span *sk = host_alloc(sizeof(span) * (size_t)total), *sv = host_alloc(sizeof(span) * (size_t)total);
            for (int c = 0; c < total; c++) {
                sk[c] = (span){page[c] * page_elems, page_elems, kc + c * page_elems};
                sv[c] = (span){page[c] * page_elems, page_elems, vc + c * page_elems};
            }
            int64_t bk = scan_big(g_kbig, g_big_n, 0xffff, sk, total);
            int64_t bv = scan_big(g_vbig, g_big_n, 0xffff, sv, total);
            tu_check(bk == 0 && bv == 0, "%s: cache after the append: %lld k and %lld v elements differ from the "
                     "CPU's pages or the NaN fill", name, (long long)bk, (long long)bv);
            free(sk);
            free(sv);
        }
        free(out);
        free(lse);
    }
    free_small(&d, &a);
    free(kc);
    free(vc);
    free(pt_dev);
    free(page);
}

/* ---------------------------------------------------------------------------------------------- */
/* Dense: a (b, s_k, h_k, d) cache of more than 2^31 elements, its last sequence past element 2^31  */

/* Sequences 0 and b - 1 checked against the CPU: host copies of their keys and queries. */
static void check_dense_seq(const char *name, const fc_attn_args *full, int i, const void *k, const void *v,
                            const void *gpu_out, const float *gpu_lse) {
    fc_dtype dt = full->q.dtype;
    int64_t s_q = full->q.shape[1], h_q = full->q.shape[2], s_k = full->k.shape[1];
    fc_attn_args a = *full;
    a.device = FC_DEVICE_CPU;
    a.q = fc_tensor_4d(at(full->q.data, i * s_q * h_q * D), dt, 1, s_q, h_q, D);
    a.k = fc_tensor_4d((void *)k, dt, 1, s_k, H_K, D);
    a.v = fc_tensor_4d((void *)v, dt, 1, s_k, H_K, D);
    host_outputs(&a);
    char what[96];
    snprintf(what, sizeof what, "%s, sequence %d", name, i);
    check_rows(what, &a, at((void *)gpu_out, i * s_q * h_q * D), gpu_lse + i * h_q * s_q, s_k);
    free(a.out.data);
    free(a.lse.data);
}

static void case_dense(const char *name, int s_q, fc_dtype dt) {
    uint64_t rng = 2000 + (uint64_t)s_q;
    int b = 65, h_q = s_q == 1 ? 32 : 16, checked[2] = {0, 64};
    int64_t seq = g_far / 64, s_k = seq / (H_K * D);
    big_kv();
    dev_fill(g_kbig, 0x3c, g_big_n * 2); /* the constant 0x3c3c (bf16 0.0115, fp16 1.06) */
    dev_fill(g_vbig, 0x3c, g_big_n * 2);
    void *k[2], *v[2];
    for (int j = 0; j < 2; j++) {
        k[j] = random_buf(dt, seq, &rng);
        v[j] = random_buf(dt, seq, &rng);
        to_dev(at(g_kbig, checked[j] * seq), k[j], (size_t)seq * 2);
        to_dev(at(g_vbig, checked[j] * seq), v[j], (size_t)seq * 2);
    }
    fc_attn_args a;
    fc_attn_args_init(&a);
    a.q = fc_tensor_4d(random_buf(dt, (int64_t)b * s_q * h_q * D, &rng), dt, b, s_q, h_q, D);
    a.k = fc_tensor_4d(NULL, dt, b, s_k, H_K, D);
    a.v = a.k;
    a.causal = s_q > 1;
    host_outputs(&a);
    fc_attn_args d = a;
    d.device = gpu_device();
    d.k.data = g_kbig;
    d.v.data = g_vbig;
    mirror_small(&d, &a);
    dev_outputs(&d, &a);
    printf("%s: k, v (%d, %lld, %d, %d) = %.3g elements each; sequence %d from element %lld\n", name, b,
           (long long)s_k, H_K, D, (double)b * seq, b - 1, (long long)((b - 1) * seq));
    if (gpu_call(name, &d)) {
        void *out;
        float *lse;
        download_outputs(&d, &a, &out, &lse);
        for (int j = 0; j < 2; j++) check_dense_seq(name, &a, checked[j], k[j], v[j], out, lse);
        /* every other sequence: v is the constant, so is each output element (within one rounding) */
        double cv = dt == FC_BF16 ? tu_bf16_to_double(0x3c3c) : tu_fp16_to_double(0x3c3c);
        int64_t bad = 0, lse_bad = 0;
        for (int i = 1; i < b - 1; i++) {
            for (int64_t e = 0; e < s_q * h_q * D; e++)
                bad += !(fabs(tu_load(out, dt, i * s_q * h_q * D + e) - cv) <= tu_eps(dt) * cv);
            for (int64_t e = 0; e < s_q * h_q; e++) lse_bad += !isfinite(lse[i * h_q * s_q + e]);
        }
        tu_check(bad == 0 && lse_bad == 0, "%s: sequences 1..%d (constant keys and values): %lld out elements not "
                 "the constant %g, %lld lse not finite", name, b - 2, (long long)bad, cv, (long long)lse_bad);
        free(out);
        free(lse);
    }
    d.k.data = d.v.data = a.k.data = a.v.data = NULL;
    free_small(&d, &a);
    for (int j = 0; j < 2; j++) free(k[j]), free(v[j]);
}

/* Append into a dense cache of 2 sequences whose batch stride puts the second past element 2^31. */
static void case_append_dense(const char *name, fc_dtype dt) {
    enum { B = 2, S_NEW = 4, S_Q = 4, H_Q = 16 };
    uint64_t rng = 3000;
    int64_t seq = g_far / 64, s_k = seq / (H_K * D), stride0 = g_big_n - seq;
    int keys[B] = {(int)(s_k / 7), (int)(s_k - S_NEW - 3)};
    uint16_t *kh = host_alloc((size_t)(B * seq * 2)), *vh = host_alloc((size_t)(B * seq * 2));
    tu_poison(kh, dt, B * seq); /* rows past seqused_k: NaN, never to be read */
    tu_poison(vh, dt, B * seq);
    for (int i = 0; i < B; i++) {
        fill_random(kh + i * seq, dt, (int64_t)keys[i] * H_K * D, &rng);
        fill_random(vh + i * seq, dt, (int64_t)keys[i] * H_K * D, &rng);
    }
    big_kv();
    dev_fill(g_kbig, 0xff, g_big_n * 2);
    dev_fill(g_vbig, 0xff, g_big_n * 2);
    for (int i = 0; i < B; i++) {
        to_dev(at(g_kbig, i * stride0), kh + i * seq, (size_t)seq * 2);
        to_dev(at(g_vbig, i * stride0), vh + i * seq, (size_t)seq * 2);
    }
    fc_attn_args a;
    fc_attn_args_init(&a);
    a.q = fc_tensor_4d(random_buf(dt, (int64_t)B * S_Q * H_Q * D, &rng), dt, B, S_Q, H_Q, D);
    a.k = fc_tensor_4d(kh, dt, B, s_k, H_K, D);
    a.v = fc_tensor_4d(vh, dt, B, s_k, H_K, D);
    int32_t *used = host_alloc(sizeof(int32_t) * B);
    for (int i = 0; i < B; i++) used[i] = keys[i];
    a.seqused_k = fc_tensor_1d(used, FC_INT32, B);
    a.k_new = fc_tensor_4d(random_buf(dt, (int64_t)B * S_NEW * H_K * D, &rng), dt, B, S_NEW, H_K, D);
    a.v_new = fc_tensor_4d(random_buf(dt, (int64_t)B * S_NEW * H_K * D, &rng), dt, B, S_NEW, H_K, D);
    rotary_tables(&a, s_k + 1, D);
    a.causal = 1;
    host_outputs(&a);
    fc_attn_args d = a;
    d.device = gpu_device();
    d.k.data = g_kbig;
    d.v.data = g_vbig;
    d.k.stride[0] = d.v.stride[0] = stride0;
    mirror_small(&d, &a);
    dev_outputs(&d, &a);
    printf("%s: k, v (%d, %lld, %d, %d) with batch stride %lld: sequence 1 appends at element %lld\n", name, B,
           (long long)s_k, H_K, D, (long long)stride0, (long long)(stride0 + (int64_t)keys[1] * H_K * D));
    if (gpu_call(name, &d)) {
        void *out;
        float *lse;
        download_outputs(&d, &a, &out, &lse);
        check_rows(name, &a, out, lse, s_k);
        span sk[B], sv[B];
        for (int i = 0; i < B; i++) {
            sk[i] = (span){i * stride0, seq, kh + i * seq};
            sv[i] = (span){i * stride0, seq, vh + i * seq};
        }
        int64_t bk = scan_big(g_kbig, g_big_n, 0xffff, sk, B), bv = scan_big(g_vbig, g_big_n, 0xffff, sv, B);
        tu_check(bk == 0 && bv == 0, "%s: cache after the append: %lld k and %lld v elements differ from the CPU's "
                 "sequences or the NaN fill", name, (long long)bk, (long long)bv);
        free(out);
        free(lse);
    }
    d.k.data = d.v.data = NULL;
    free_small(&d, &a);
    free(kh);
    free(vh);
}

/* ---------------------------------------------------------------------------------------------- */
/* Varlen queries: q and out of more than 2^31 elements                                            */

/* Rows [row0, row0 + n) of the varlen queries (sequence seq, whose keys are k, v (1, s_k, h_k, 128)). */
typedef struct slice {
    int64_t row0, n;
    int seq;
    void *q;
} slice;

static void check_slice(const char *name, const fc_attn_args *d, int64_t total_q, const slice *s, const void *k,
                        const void *v, int64_t s_k, const float *lse_all) {
    fc_dtype dt = d->q.dtype;
    int64_t h_q = d->q.shape[1];
    fc_attn_args a;
    fc_attn_args_init(&a);
    a.q = fc_tensor_4d(s->q, dt, 1, s->n, h_q, D);
    a.k = fc_tensor_4d((void *)k, dt, 1, s_k, H_K, D);
    a.v = fc_tensor_4d((void *)v, dt, 1, s_k, H_K, D);
    a.causal = d->causal;
    host_outputs(&a);
    void *out = host_alloc((size_t)(s->n * h_q * D * 2));
    float *lse = host_alloc(sizeof(float) * (size_t)(s->n * h_q));
    to_host(out, at(d->out.data, s->row0 * h_q * D), (size_t)(s->n * h_q * D * 2));
    for (int64_t h = 0; h < h_q; h++)
        for (int64_t r = 0; r < s->n; r++) lse[h * s->n + r] = lse_all[h * total_q + s->row0 + r];
    char what[128];
    snprintf(what, sizeof what, "%s, sequence %d rows %lld..%lld", name, s->seq, (long long)s->row0,
             (long long)(s->row0 + s->n - 1));
    check_rows(what, &a, out, lse, s_k);
    free(out);
    free(lse);
    free(a.out.data);
    free(a.lse.data);
}

/* Elements of the device out (n of them) unwritten (NaN) or outside the range of the values: a convex
 * combination of rows of v is at most max|v|, here vmax_bits (|v| as bf16/fp16 bits), plus one rounding.
 * Bits compare: the magnitude bits of bf16 and fp16 order as their values do, NaN above all. */
static int64_t out_bad(const void *dev, int64_t n, uint16_t vmax_bits) {
    const int64_t chunk = (int64_t)1 << 26;
    uint16_t *buf = host_alloc((size_t)chunk * 2), lim = (uint16_t)(vmax_bits + 1);
    int64_t bad = 0;
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
        int64_t m = c0 + chunk < n ? chunk : n - c0;
        to_host(buf, (const char *)dev + c0 * 2, (size_t)m * 2);
        for (int64_t i = 0; i < m; i++) bad += (buf[i] & 0x7fff) > lim;
    }
    free(buf);
    return bad;
}

static void case_varlen(const char *name, int many, fc_dtype dt) {
    enum { H_Q = 32 };
    uint64_t rng = 4000 + (uint64_t)many;
    int64_t target = g_far / (H_Q * D) + g_far / (H_Q * D) / 32; /* rows: q and out just over 2^31 elements */
    int b = 0, cap = 8192;
    int32_t *cu = host_alloc(sizeof(int32_t) * (size_t)(cap + 1));
    cu[0] = 0;
    while ((cu[b] < target || (many && b < 5)) && b < cap) { /* many: 5 distinct sequences to check */
        int len = many ? tu_randint(&rng, 0, 1023) : (int)((target + 1) / 2);
        cu[b + 1] = cu[b] + len;
        b++;
    }
    int64_t total_q = cu[b], s_k = many ? 600 : 128, max_len = 0;
    for (int i = 0; i < b; i++)
        if (cu[i + 1] - cu[i] > max_len) max_len = cu[i + 1] - cu[i];
    int nk = many ? 1 : b; /* key sequences on the host: one shared (batch stride 0), or one each */
    void *kh = random_buf(dt, nk * s_k * H_K * D, &rng), *vh = random_buf(dt, nk * s_k * H_K * D, &rng);
    uint16_t vmax_bits = 0;
    for (int64_t i = 0; i < nk * s_k * H_K * D; i++)
        if ((((uint16_t *)vh)[i] & 0x7fff) > vmax_bits) vmax_bits = ((uint16_t *)vh)[i] & 0x7fff;

    slice sl[6];
    int ns = 0;
    if (many) {
        int pick[5] = {0, b / 2, b - 3, b - 2, b - 1};
        for (int j = 0; j < 5; j++) sl[ns++] = (slice){cu[pick[j]], cu[pick[j] + 1] - cu[pick[j]], pick[j], NULL};
    } else {
        for (int i = 0; i < b; i++) {
            sl[ns++] = (slice){cu[i], 512, i, NULL};
            sl[ns++] = (slice){cu[i + 1] - 512, 512, i, NULL};
        }
    }
    void *q = dev_alloc((size_t)(total_q * H_Q * D * 2)), *out = dev_alloc((size_t)(total_q * H_Q * D * 2));
    float *lse = dev_alloc(sizeof(float) * (size_t)(H_Q * total_q));
    dev_fill(q, 0x3c, total_q * H_Q * D * 2); /* rows outside the checked slices: a constant query */
    dev_fill(out, 0xff, total_q * H_Q * D * 2);
    dev_fill(lse, 0xff, (int64_t)sizeof(float) * H_Q * total_q);
    for (int j = 0; j < ns; j++) {
        sl[j].q = random_buf(dt, sl[j].n * H_Q * D, &rng);
        to_dev(at(q, sl[j].row0 * H_Q * D), sl[j].q, (size_t)(sl[j].n * H_Q * D * 2));
    }
    fc_attn_args d;
    fc_attn_args_init(&d);
    d.device = gpu_device();
    d.q = fc_tensor_3d(q, dt, total_q, H_Q, D);
    d.out = fc_tensor_3d(out, dt, total_q, H_Q, D);
    d.lse = fc_tensor_2d(lse, FC_FP32, H_Q, total_q);
    d.cu_seqlens_q = fc_tensor_1d(dev_copy(cu, sizeof(int32_t) * (size_t)(b + 1)), FC_INT32, b + 1);
    d.max_seqlen_q = (int)max_len;
    d.k = fc_tensor_4d(dev_copy(kh, (size_t)(nk * s_k * H_K * D * 2)), dt, b, s_k, H_K, D);
    d.v = fc_tensor_4d(dev_copy(vh, (size_t)(nk * s_k * H_K * D * 2)), dt, b, s_k, H_K, D);
    if (many) d.k.stride[0] = d.v.stride[0] = 0;
    d.causal = many;
    printf("%s: q, out (%lld, %d, %d) = %.3g elements each, %d sequences over %lld keys%s\n", name,
           (long long)total_q, H_Q, D, (double)total_q * H_Q * D, b, (long long)s_k, many ? " (shared), causal" : "");
    if (gpu_call(name, &d)) {
        float *lse_all = host_alloc(sizeof(float) * (size_t)(H_Q * total_q));
        to_host(lse_all, lse, sizeof(float) * (size_t)(H_Q * total_q));
        for (int j = 0; j < ns; j++) {
            const char *kq = at(kh, many ? 0 : sl[j].seq * s_k * H_K * D);
            const char *vq = at(vh, many ? 0 : sl[j].seq * s_k * H_K * D);
            check_slice(name, &d, total_q, &sl[j], kq, vq, s_k, lse_all);
        }
        int64_t bad = out_bad(out, total_q * H_Q * D, vmax_bits), lse_nan = 0;
        for (int64_t i = 0; i < H_Q * total_q; i++) lse_nan += isnan(lse_all[i]);
        double vmax = dt == FC_BF16 ? tu_bf16_to_double(vmax_bits) : tu_fp16_to_double(vmax_bits);
        tu_check(bad == 0 && lse_nan == 0, "%s: %lld out elements unwritten (NaN) or outside the range of v (%g), "
                 "%lld lse NaN", name, (long long)bad, vmax, (long long)lse_nan);
        free(lse_all);
    }
    for (int j = 0; j < ns; j++) free(sl[j].q);
    dev_free(q);
    dev_free(out);
    dev_free(lse);
    dev_free(d.cu_seqlens_q.data);
    dev_free(d.k.data);
    dev_free(d.v.data);
    free(kh);
    free(vh);
    free(cu);
}

/* ---------------------------------------------------------------------------------------------- */

typedef struct big_case {
    const char *name;
    int kind, ps, s_q; /* kind: 0 paged, 1 dense, 2 append-paged, 3 append-dense, 4 varlen */
    fc_dtype dt;
} big_case;

int main(int argc, char **argv) {
    static const big_case cases[] = {
        {"paged-ps16-decode", 0, 16, 1, FC_BF16},   {"paged-ps16-prefill", 0, 16, 200, FC_BF16},
        {"paged-ps64-decode", 0, 64, 1, FC_FP16},   {"paged-ps64-prefill", 0, 64, 200, FC_FP16},
        {"paged-ps256-decode", 0, 256, 1, FC_BF16}, {"paged-ps256-prefill", 0, 256, 200, FC_BF16},
        {"dense-decode", 1, 0, 1, FC_FP16},         {"dense-prefill", 1, 0, 64, FC_BF16},
        {"append-paged", 2, 16, 4, FC_BF16},        {"append-dense", 3, 0, 4, FC_FP16},
        {"varlen-q-many", 4, 1, 0, FC_BF16},        {"varlen-q-few", 4, 0, 0, FC_FP16},
    };
    int small = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small")) small = 1;
        else only = argv[i];
    }
    if (harness_init("gpu_big")) return 2;
    if (g_fake && !small) {
        printf("gpu_big: FLASHC_GPU_FAKE needs --small (the full sizes are 4.4 GB tensors on the CPU)\n");
        return 2;
    }
    g_far = small ? (int64_t)1 << 24 : (int64_t)1 << 31;
    g_big_n = g_far + g_far / 32;
    printf("gpu_big: flashc %s, CPU threads %d, boundary element %lld%s\n", fc_version(), fc_get_num_threads(),
           (long long)g_far, small ? " (--small)" : "");
    double t0 = now_s();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const big_case *c = &cases[i];
        if (only && !strstr(c->name, only)) continue;
        double t = now_s();
        switch (c->kind) {
        case 0: case_paged(c->name, c->ps, c->s_q, c->dt, 0, 0); break;
        case 1: case_dense(c->name, c->s_q, c->dt); break;
        case 2: case_paged(c->name, c->ps, c->s_q, c->dt, c->s_q, D / 2); break;
        case 3: case_append_dense(c->name, c->dt); break;
        default: free_big_kv(); case_varlen(c->name, c->ps, c->dt); break;
        }
        printf("  (%.1fs)\n", now_s() - t);
    }
    free_big_kv();
    printf("gpu_big: worst ratio %.3f (pass <= 1); %.1fs\n", g_worst, now_s() - t0);
    harness_done();
    return tu_finish();
}
