/* problem.c — the attention tests' random cases: building the arguments on the host, ref64, group bookkeeping. */
#include "problem.h"

#include <time.h>

#include "ref64.h"

/* ---------------------------------------------------------------------------------------------- */
/* Configs                                                                                         */

cfg cfg_base(void) {
    cfg c;
    memset(&c, 0, sizeof c);
    c.dt = FC_BF16;
    c.b = 2;
    c.s_q = c.s_k = 16;
    c.h_q = c.h_k = 2;
    c.d = c.d_v = 64;
    c.wl = c.wr = -1;
    c.lse = 1;
    c.page_size = 16;
    c.nsplits = 1;
    return c;
}

void describe(const cfg *c, char *s, size_t n) {
    static const char *kvn[] = {"dense", "varlen", "paged"};
    int k = snprintf(s, n, "%s b%d sq%d sk%d h%d/%d d%d/%d", tu_dtype_name(c->dt), c->b, c->s_q, c->s_k, c->h_q,
                     c->h_k, c->d, c->d_v);
#define ADD(...) k += snprintf(s + k, k < (int)n ? n - k : 0, __VA_ARGS__)
    if (c->causal) ADD(" causal");
    if (c->wl >= 0 || c->wr >= 0) ADD(" win(%d,%d)", c->wl, c->wr);
    if (c->softcap > 0) ADD(" cap%g", c->softcap);
    if (c->scale != 0) ADD(" scale%g", c->scale);
    if (c->alibi) ADD(" alibi%dd", c->alibi);
    if (c->sinks) ADD(" sinks");
    if (!c->lse) ADD(" nolse");
    if (c->q_varlen) ADD(" q-varlen");
    ADD(" kv-%s", kvn[c->kv]);
    if (c->kv == KV_PAGED) ADD(" ps%d", c->page_size);
    if (c->seqused) ADD(" seqused%d", c->seqused);
    if (c->layout) ADD(" %s", c->layout == LAYOUT_PADDED ? "padded" : "packed");
    if (c->nan_unused) ADD(" nan-unused");
    if (c->s_new) ADD(" new%d", c->s_new);
    if (c->rot_dim) ADD(" rot%d%s%s", c->rot_dim, c->rot_inter ? "i" : "h", c->rot_f32 ? "f32" : "");
    if (c->fp8) ADD(" kv-%s", tu_dtype_name(cfg_kv_dtype(c)));
    if (c->fp8_q) ADD(" q-fp8");
    if (c->descale) ADD(" descale%d", c->descale);
    if (c->kv_index) ADD("%s%s", c->kv_index & 1 ? " batch-idx" : "", c->kv_index & 2 ? " leftpad" : "");
    if (c->threads) ADD(" threads%d", c->threads);
    ADD(" splits");
    for (int i = 0; i < c->nsplits; i++) ADD("%s%d", i ? "," : "", c->splits[i]);
#undef ADD
}

void set_mask(cfg *c, int mask) {
    c->causal = mask == 1 || mask == 3;
    c->wl = mask == 2 ? 11 : mask == 3 ? 19 : -1;
    c->wr = mask == 2 ? 7 : -1;
}

void mix_axes(cfg *c, uint64_t *r) {
    static const int sq[6] = {1, 2, 5, 17, 64, 100}, sk[6] = {1, 3, 31, 64, 129, 250};
    static const int sizes[5] = {1, 3, 16, 64, 256}, splits[5] = {1, 3, 0, 2, 5};
    c->b = tu_randint(r, 1, 5);
    c->s_q = sq[tu_randint(r, 0, 5)];
    c->s_k = sk[tu_randint(r, 0, 5)];
    set_mask(c, tu_randint(r, 0, 3));
    if (c->wr >= 0 && !c->causal) c->wl = tu_randint(r, -1, 40), c->wr = tu_randint(r, -1, 40);
    c->softcap = tu_randint(r, 0, 2) ? 0 : 2.0f;
    c->scale = tu_randint(r, 0, 4) ? 0 : 0.2f;
    c->alibi = tu_randint(r, 0, 2);
    c->sinks = tu_randint(r, 0, 3) == 0;
    c->lse = tu_randint(r, 0, 3) != 0;
    c->kv = tu_randint(r, 0, 2);
    c->page_size = sizes[tu_randint(r, 0, 4)];
    c->q_varlen = tu_randint(r, 0, 1);
    c->seqused = tu_randint(r, 0, 2);
    if (c->kv != KV_VARLEN && !c->q_varlen && tu_randint(r, 0, 3) == 0) {
        c->s_new = tu_randint(r, 1, 4);
        if (c->s_k < c->s_new) c->s_k = c->s_new;
        if (tu_randint(r, 0, 1)) {
            c->s_q = tu_randint(r, 1, c->s_new); /* rotary: query positions >= 0 */
            c->rot_dim = tu_randint(r, 0, 1) ? c->d : c->d / 2;
            c->rot_inter = tu_randint(r, 0, 1);
            c->rot_f32 = tu_randint(r, 0, 1);
        }
    }
    c->layout = tu_randint(r, 0, 4) == 0 ? LAYOUT_PADDED : LAYOUT_CONTIG;
    c->nan_unused = tu_randint(r, 0, 5) == 0;
    c->splits[0] = splits[tu_randint(r, 0, 4)];
}

/* ---------------------------------------------------------------------------------------------- */
/* Memory and random values                                                                        */

/* A zeroed, 256-byte aligned host buffer of P; returns its index. */
static int palloc(prob *P, size_t bytes) {
    size_t n = (bytes + 255) / 256 * 256;
    if (n == 0) n = 256;
    void *p = aligned_alloc(256, n);
    if (!p || P->nmem == MAX_ALLOCS) {
        printf("problem: out of host memory\n");
        exit(1);
    }
    memset(p, 0, n);
    P->mem[P->nmem] = (buf){p, NULL, n};
    return P->nmem++;
}

void prob_free(prob *P) {
    for (int i = 0; i < P->nmem; i++) free(P->mem[i].host);
    P->nmem = 0;
    free(P->k_snap);
    free(P->v_snap);
    P->k_snap = P->v_snap = NULL;
}

void *reg_host(const prob *P, const region *r) { return P->mem[r->buf].host; }
size_t reg_bytes(const region *r) { return (size_t)r->n * tu_esize(r->dt); }

/* Extra elements of a padded tensor: after dimension k's stride (k > 0), or at the end (k < 0). */
static int64_t pad_of(const prob *P, int k) {
    if (P->o->pad) return k == 0 ? 0 : P->o->pad;
    return k < 0 ? 5 : k == 0 ? 0 : 2 + k;
}

/* A tensor of the given shape; padded: every non-last stride has a few extra elements. */
static fc_tensor new_tensor(prob *P, fc_dtype dt, int nd, const int64_t *shape, int padded, region *reg) {
    fc_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = nd;
    int64_t st = 1, unit = P->o->pad && tu_esize(dt) == 1 ? 2 : 1; /* fp8 with pad 8: 16 bytes too */
    for (int k = nd - 1; k >= 0; k--) {
        t.shape[k] = shape[k];
        t.stride[k] = st;
        st = st * shape[k] + (padded ? unit * pad_of(P, k) : 0);
    }
    int64_t n = t.shape[0] * t.stride[0] + (padded ? unit * pad_of(P, -1) : 0);
    if (n < 1) n = 1;
    int idx = palloc(P, (size_t)n * tu_esize(dt));
    t.data = P->mem[idx].host;
    if (reg) *reg = (region){idx, dt, n};
    return t;
}

static fc_tensor int_tensor(prob *P, int64_t n, const int *vals) {
    int64_t shape[1] = {n};
    fc_tensor t = new_tensor(P, FC_INT32, 1, shape, 0, NULL);
    for (int64_t i = 0; i < n; i++) ((int32_t *)t.data)[i] = vals[i];
    return t;
}

/* Random normal values already encoded as bf16 / fp16 bits (fast_fill): filling a large cache element by
 * element through tu_store would dominate the run time. */
static uint16_t g_pool[2][65536];

static void pool_init(void) {
    static int ready;
    if (ready) return;
    uint64_t rng = 99;
    for (int i = 0; i < 65536; i++) {
        double x = tu_normal(&rng);
        g_pool[0][i] = tu_bf16_bits(tu_round(FC_BF16, x));
        g_pool[1][i] = tu_fp16_bits(tu_round(FC_FP16, x));
    }
    ready = 1;
}

/* Element i of a bf16/fp16/fp32 array: a random normal value. */
static inline void store_random(const prob *P, void *p, fc_dtype dt, int64_t i, uint64_t *rng) {
    if (P->o->fast_fill && (dt == FC_BF16 || dt == FC_FP16))
        ((uint16_t *)p)[i] = g_pool[dt == FC_FP16][tu_rng_next(rng) >> 48];
    else tu_store(p, dt, i, tu_normal(rng));
}

void fill_random(void *p, fc_dtype dt, int64_t n, uint64_t *rng) {
    pool_init();
    if (dt == FC_BF16 || dt == FC_FP16)
        for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = g_pool[dt == FC_FP16][tu_rng_next(rng) >> 48];
    else
        for (int64_t i = 0; i < n; i++) tu_store(p, dt, i, tu_normal(rng));
}

/* Calls fn(o, ctx) with the offset o of every element of the view t (up to 4 dims), in order. */
static void each_offset(const fc_tensor *t, void (*fn)(int64_t o, void *ctx), void *ctx) {
    int64_t sh[4] = {1, 1, 1, 1}, st[4] = {0, 0, 0, 0};
    for (int k = 0; k < t->ndim; k++) {
        sh[4 - t->ndim + k] = t->shape[k];
        st[4 - t->ndim + k] = t->stride[k];
    }
    for (int64_t i0 = 0; i0 < sh[0]; i0++)
        for (int64_t i1 = 0; i1 < sh[1]; i1++)
            for (int64_t i2 = 0; i2 < sh[2]; i2++)
                for (int64_t i3 = 0; i3 < sh[3]; i3++) fn(i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3], ctx);
}

typedef struct fill_ctx {
    prob *P;
    const fc_tensor *t;
    double scale, shift;
} fill_ctx;

static void fill_one(int64_t o, void *ctx) {
    fill_ctx *f = ctx;
    if (f->scale == 1 && f->shift == 0) store_random(f->P, f->t->data, f->t->dtype, o, &f->P->rng);
    else tu_store(f->t->data, f->t->dtype, o, f->shift + f->scale * tu_normal(&f->P->rng));
}

/* Random values (scale x + shift, x normal) into every element of the view t. */
static void fill_view(prob *P, const fc_tensor *t, double scale, double shift) {
    fill_ctx f = {P, t, scale, shift};
    each_offset(t, fill_one, &f);
}

static void fill_region(prob *P, const region *r) {
    void *p = reg_host(P, r);
    for (int64_t i = 0; i < r->n; i++) store_random(P, p, r->dt, i, &P->rng);
}

/* ---------------------------------------------------------------------------------------------- */
/* Building a case                                                                                 */

int64_t kv_off(const prob *P, const fc_tensor *t, int b, int64_t j, int h) {
    const fc_attn_args *a = &P->a;
    if (P->c.kv == KV_VARLEN)
        return (((const int32_t *)a->cu_seqlens_k.data)[b] + j) * t->stride[0] + h * t->stride[1];
    if (P->c.kv == KV_PAGED) {
        int64_t page = ((const int32_t *)a->page_table.data)[b * a->page_table.stride[0] + j / P->c.page_size];
        return page * t->stride[0] + (j % P->c.page_size) * t->stride[1] + h * t->stride[2];
    }
    return P->kv_row[b] * t->stride[0] + (P->pad[b] + j) * t->stride[1] + h * t->stride[2];
}

/* Per-sequence lengths: queries, cache capacity, keys present before the append. Varlen batches get
 * an empty sequence (q and k) when b >= 3. */
static void build_lengths(prob *P) {
    const cfg *c = &P->c;
    int64_t row = 0;
    if (c->b > MAX_BATCH) { /* the per-sequence arrays hold MAX_BATCH: a test asking for more is wrong */
        fprintf(stderr, "problem.c: batch %d exceeds MAX_BATCH %d\n", c->b, MAX_BATCH);
        abort();
    }
    for (int i = 0; i < c->b; i++) {
        P->len_q[i] = c->q_varlen ? tu_randint(&P->rng, 0, c->s_q) : c->s_q;
        P->cap[i] = c->kv == KV_VARLEN ? tu_randint(&P->rng, 0, c->s_k) : c->s_k;
        P->kv_row[i] = c->kv_index & 1 ? c->b - i : i; /* kv_batch_idx: reversed, over b + 1 rows */
        P->pad[i] = 0;
        if (c->kv_index & 2) { /* kv_leftpad: the keys start a few rows in; the capacity counts from there */
            P->pad[i] = tu_randint(&P->rng, 0, c->s_k - c->s_new < 9 ? c->s_k - c->s_new : 9);
            P->cap[i] -= P->pad[i];
        }
    }
    if (c->q_varlen) {
        P->len_q[0] = c->s_q;
        if (c->b >= 3) P->len_q[1] = 0;
    }
    if (c->kv == KV_VARLEN) {
        P->cap[c->b - 1] = c->s_k;
        if (c->b >= 3) P->cap[0] = 0;
    }
    for (int i = 0; i < c->b; i++) {
        P->q_row0[i] = row;
        row += P->len_q[i];
        int room = P->cap[i] - c->s_new;
        P->s_cache[i] = c->seqused ? tu_randint(&P->rng, 0, room) : room;
    }
    if (c->seqused == 2) P->s_cache[0] = 0;
    P->total_q = row;
}

/* cu_seqlens (b + 1 entries) from the per-sequence lengths; returns the longest. */
static int cu_seqlens(prob *P, const int *len, fc_tensor *t) {
    int cu[MAX_BATCH + 1], mx = 0;
    cu[0] = 0;
    for (int i = 0; i < P->c.b; i++) {
        cu[i + 1] = cu[i] + len[i];
        if (len[i] > mx) mx = len[i];
    }
    *t = int_tensor(P, P->c.b + 1, cu);
    return mx;
}

static void build_q_out(prob *P) {
    const cfg *c = &P->c;
    fc_attn_args *a = &P->a;
    int pad = P->o->pad_all ? c->layout != LAYOUT_CONTIG : c->layout == LAYOUT_PADDED;
    int lpad = P->o->pad_all && pad;
    region q;
    if (c->q_varlen) {
        int mx = cu_seqlens(P, P->len_q, &a->cu_seqlens_q);
        if (P->o->max_seqlen) a->max_seqlen_q = mx > 0 ? mx : 1; /* 0 means "not given" (CUDA: an error); 1 bounds 0 */
        int64_t qs[3] = {P->total_q, c->h_q, c->d}, os[3] = {P->total_q, c->h_q, c->d_v};
        int64_t ls[2] = {c->h_q, P->total_q};
        a->q = new_tensor(P, cfg_q_dtype(c), 3, qs, pad, &q);
        a->out = new_tensor(P, c->dt, 3, os, pad, &P->out);
        if (c->lse) a->lse = new_tensor(P, FC_FP32, 2, ls, lpad, &P->lse);
    } else {
        int64_t qs[4] = {c->b, c->s_q, c->h_q, c->d}, os[4] = {c->b, c->s_q, c->h_q, c->d_v};
        int64_t ls[3] = {c->b, c->h_q, c->s_q};
        if (c->layout != LAYOUT_PACKED) a->q = new_tensor(P, cfg_q_dtype(c), 4, qs, pad, &q);
        a->out = new_tensor(P, c->dt, 4, os, pad, &P->out);
        if (c->lse) a->lse = new_tensor(P, FC_FP32, 3, ls, lpad, &P->lse);
    }
    if (c->layout != LAYOUT_PACKED) {
        if (pad) tu_poison(a->q.data, cfg_q_dtype(c), q.n);
        fill_view(P, &a->q, 1, 0);
    }
}

/* q, k, v as slices of one (b, s, h_q + 2 h_k, d) tensor (dense, s_q = s_k, d = d_v). */
static void build_packed(prob *P) {
    const cfg *c = &P->c;
    fc_attn_args *a = &P->a;
    int64_t H = c->h_q + 2 * c->h_k, shape[4] = {c->b, c->s_q, H, c->d};
    region r;
    fc_tensor t = new_tensor(P, c->dt, 4, shape, 0, &r);
    fill_region(P, &r);
    size_t es = tu_esize(c->dt);
    a->q = a->k = a->v = t;
    a->q.shape[2] = c->h_q;
    a->k.shape[2] = a->v.shape[2] = c->h_k;
    a->k.data = (char *)t.data + (size_t)c->h_q * c->d * es;
    a->v.data = (char *)t.data + (size_t)(c->h_q + c->h_k) * c->d * es;
    P->kc = P->vc = r;
}

/* A shuffled page table; one spare entry per sequence (random page, or -1 with nan_unused). */
static void build_page_table(prob *P) {
    const cfg *c = &P->c;
    int ps = c->page_size, pps = (c->s_k + ps - 1) / ps, max_pages = pps + 1, num_pages = c->b * pps + 2;
    int *perm = malloc(sizeof(int) * (size_t)num_pages);
    for (int i = 0; i < num_pages; i++) perm[i] = i;
    for (int i = num_pages - 1; i > 0; i--) {
        int j = tu_randint(&P->rng, 0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t shape[2] = {c->b, max_pages};
    fc_tensor t = new_tensor(P, FC_INT32, 2, shape, c->layout == LAYOUT_PADDED, NULL);
    for (int i = 0; i < c->b; i++) {
        int used = (P->s_cache[i] + c->s_new + ps - 1) / ps;
        for (int p = 0; p < max_pages; p++) {
            int v = p < pps ? perm[i * pps + p] : perm[tu_randint(&P->rng, 0, num_pages - 1)];
            if (c->nan_unused && p >= used) v = -1;
            ((int32_t *)t.data)[i * t.stride[0] + p * t.stride[1]] = v;
        }
    }
    free(perm);
    P->a.page_table = t;
}

/* Random values into the rows of each sequence that count (every row up to capacity, unless the
 * unused ones are to hold NaN). */
static void fill_cache_rows(prob *P, const fc_tensor *t, int dim) {
    const cfg *c = &P->c;
    for (int i = 0; i < c->b; i++) {
        int upto = c->nan_unused ? P->s_cache[i] : P->cap[i];
        for (int64_t j = 0; j < upto; j++)
            for (int h = 0; h < c->h_k; h++) {
                int64_t o = kv_off(P, t, i, j, h);
                for (int e = 0; e < dim; e++) store_random(P, t->data, t->dtype, o + e, &P->rng);
            }
    }
}

static void build_kv(prob *P) {
    const cfg *c = &P->c;
    fc_attn_args *a = &P->a;
    int pad = c->layout == LAYOUT_PADDED;
    fc_dtype kdt = cfg_kv_dtype(c);
    if (c->layout == LAYOUT_PACKED) {
        build_packed(P);
        return;
    }
    if (c->kv == KV_VARLEN) {
        int mx = cu_seqlens(P, P->cap, &a->cu_seqlens_k);
        if (P->o->max_seqlen) a->max_seqlen_k = mx > 0 ? mx : 1; /* as max_seqlen_q */
        int64_t rows = ((const int32_t *)a->cu_seqlens_k.data)[c->b] + 2;
        int64_t ks[3] = {rows, c->h_k, c->d}, vs[3] = {rows, c->h_k, c->d_v};
        a->k = new_tensor(P, kdt, 3, ks, pad, &P->kc);
        a->v = new_tensor(P, kdt, 3, vs, pad, &P->vc);
    } else {
        int64_t n0 = c->b + (c->kv_index & 1), n1 = c->s_k;
        if (c->kv == KV_PAGED) {
            build_page_table(P);
            n0 = c->b * ((c->s_k + c->page_size - 1) / c->page_size) + 2;
            n1 = c->page_size;
        }
        int64_t ks[4] = {n0, n1, c->h_k, c->d}, vs[4] = {n0, n1, c->h_k, c->d_v};
        a->k = new_tensor(P, kdt, 4, ks, pad, &P->kc);
        a->v = new_tensor(P, kdt, 4, vs, pad, &P->vc);
    }
    if (pad || c->nan_unused) {
        tu_poison(reg_host(P, &P->kc), kdt, P->kc.n);
        tu_poison(reg_host(P, &P->vc), kdt, P->vc.n);
    } else {
        fill_region(P, &P->kc);
        fill_region(P, &P->vc);
    }
    if (!P->o->fast_fill || pad || c->nan_unused) { /* the rows that count: random (again) */
        fill_cache_rows(P, &a->k, c->d);
        fill_cache_rows(P, &a->v, c->d_v);
    }
    if (c->fp8 && c->descale) { /* dequantisation scales in [1/4, 2]; or one value through zero strides */
        fc_tensor *ds[3] = {&a->k_descale, &a->v_descale, &a->q_descale};
        for (int w = 0; w < 2 + c->fp8_q; w++) {
            int64_t shape[2] = {c->b, c->h_k};
            *ds[w] = new_tensor(P, FC_FP32, 2, shape, 0, NULL);
            for (int64_t i = 0; i < c->b * c->h_k; i++) ((float *)ds[w]->data)[i] = (float)(0.25 + 1.75 * tu_uniform(&P->rng));
            if (c->descale == 2) ds[w]->stride[0] = ds[w]->stride[1] = 0;
        }
    }
}

static void build_append(prob *P) {
    const cfg *c = &P->c;
    fc_attn_args *a = &P->a;
    int pad = c->layout == LAYOUT_PADDED, rpad = P->o->pad_all && pad;
    int64_t ks[4] = {c->b, c->s_new, c->h_k, c->d}, vs[4] = {c->b, c->s_new, c->h_k, c->d_v};
    a->k_new = new_tensor(P, c->dt, 4, ks, pad, NULL);
    a->v_new = new_tensor(P, c->dt, 4, vs, pad, NULL);
    fill_view(P, &a->k_new, 1, 0);
    fill_view(P, &a->v_new, 1, 0);
    if (!c->rot_dim) return;
    fc_dtype rdt = c->rot_f32 ? FC_FP32 : c->dt;
    int half = c->rot_dim / 2;
    int64_t rs[2] = {c->s_k + 3, half};
    a->rotary_cos = new_tensor(P, rdt, 2, rs, rpad, NULL);
    a->rotary_sin = new_tensor(P, rdt, 2, rs, rpad, NULL);
    for (int64_t p = 0; p < rs[0]; p++)
        for (int m = 0; m < half; m++) {
            double ang = (double)p * pow(10000.0, -2.0 * m / c->rot_dim);
            tu_store(a->rotary_cos.data, rdt, p * a->rotary_cos.stride[0] + m, cos(ang));
            tu_store(a->rotary_sin.data, rdt, p * a->rotary_sin.stride[0] + m, sin(ang));
        }
    a->rotary_interleaved = c->rot_inter;
}

static void build_options(prob *P) {
    const cfg *c = &P->c;
    fc_attn_args *a = &P->a;
    if (c->seqused || c->kv == KV_PAGED || c->s_new) { /* counted from cache row 0: the pad too */
        int used[MAX_BATCH];
        for (int i = 0; i < c->b; i++) used[i] = P->pad[i] + P->s_cache[i];
        a->seqused_k = int_tensor(P, c->b, used);
    }
    if (c->kv_index & 1) a->kv_batch_idx = int_tensor(P, c->b, P->kv_row);
    if (c->kv_index & 2) a->kv_leftpad = int_tensor(P, c->b, P->pad);
    a->softmax_scale = c->scale;
    a->softcap = c->softcap;
    a->causal = c->causal;
    a->window_left = c->wl;
    a->window_right = c->wr;
    if (c->alibi) {
        int64_t s1[1] = {c->h_q}, s2[2] = {c->b, c->h_q};
        a->alibi_slopes = new_tensor(P, FC_FP32, c->alibi, c->alibi == 1 ? s1 : s2, 0, NULL);
        fill_view(P, &a->alibi_slopes, 0.05, 0.15);
    }
    if (c->sinks) {
        int64_t s1[1] = {c->h_q};
        a->sinks = new_tensor(P, FC_FP32, 1, s1, 0, NULL);
        fill_view(P, &a->sinks, 1, 0.5);
    }
}

static unsigned char *snapshot(const prob *P, const region *r) {
    unsigned char *s = malloc(reg_bytes(r));
    memcpy(s, reg_host(P, r), reg_bytes(r));
    return s;
}

/* Largest finite |x| of n elements of dtype dt. */
static double max_abs(const void *p, fc_dtype dt, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fabs(tu_load(p, dt, i));
        if (x > m && isfinite(x)) m = x;
    }
    return m;
}

void prob_build(prob *P, const cfg *c, const prob_opts *o, uint64_t seed) {
    memset(P, 0, sizeof *P);
    P->c = *c;
    P->o = o;
    P->rng = seed;
    if (o->fast_fill) pool_init();
    fc_attn_args_init(&P->a);
    build_lengths(P);
    build_q_out(P);
    build_kv(P);
    if (c->s_new) build_append(P);
    build_options(P);
    P->k_snap = snapshot(P, &P->kc);
    P->v_snap = snapshot(P, &P->vc);
    P->vmax = max_abs(reg_host(P, &P->vc), P->vc.dt, P->vc.n);
    if (P->c.fp8 && P->c.descale) P->vmax *= 2.0; /* dequantised: descales up to 2 */
    const fc_tensor *vn = &P->a.v_new;
    for (int64_t i = 0; vn->data && i < vn->shape[0] * vn->shape[1] * vn->shape[2]; i++) {
        int64_t idx[4] = {i / (vn->shape[1] * vn->shape[2]), i / vn->shape[2] % vn->shape[1], i % vn->shape[2], 0};
        double m = max_abs((const char *)vn->data + tu_offset(vn, idx) * tu_esize(vn->dtype), vn->dtype, vn->shape[3]);
        if (m > P->vmax) P->vmax = m;
    }
}

void prob_restore_cache(prob *P) {
    memcpy(reg_host(P, &P->kc), P->k_snap, reg_bytes(&P->kc));
    memcpy(reg_host(P, &P->vc), P->v_snap, reg_bytes(&P->vc));
}

void prob_poison_out(prob *P) {
    tu_poison(reg_host(P, &P->out), P->c.dt, P->out.n);
    if (P->c.lse) tu_poison(reg_host(P, &P->lse), FC_FP32, P->lse.n);
}

/* ---------------------------------------------------------------------------------------------- */
/* Checking                                                                                        */

int64_t out_off(const prob *P, int b, int64_t r, int h) {
    const fc_tensor *t = &P->a.out;
    if (P->c.q_varlen) return (P->q_row0[b] + r) * t->stride[0] + h * t->stride[1];
    return b * t->stride[0] + r * t->stride[1] + h * t->stride[2];
}

int64_t lse_off(const prob *P, int b, int64_t r, int h) {
    const fc_tensor *t = &P->a.lse;
    if (P->c.q_varlen) return h * t->stride[0] + (P->q_row0[b] + r) * t->stride[1];
    return b * t->stride[0] + h * t->stride[1] + r * t->stride[2];
}

static void mark_one(int64_t o, void *in) { ((unsigned char *)in)[o] = 1; }

int64_t padding_touched(const region *r, const fc_tensor *t, const void *got, const void *poison) {
    size_t es = tu_esize(r->dt);
    unsigned char *in = calloc((size_t)r->n, 1);
    int64_t bad = 0;
    each_offset(t, mark_one, in);
    for (int64_t i = 0; i < r->n; i++)
        if (!in[i] && memcmp((const char *)got + i * es, poison, es)) bad++;
    free(in);
    return bad;
}

refs refs_new(const prob *P, int row_step) {
    int64_t rows = P->total_q, n = rows * P->c.h_q * P->c.d_v;
    size_t nb = (size_t)(n > 0 ? n : 1) * sizeof(double);
    size_t lb = (size_t)(rows > 0 ? rows : 1) * P->c.h_q * sizeof(double);
    size_t sb = (size_t)(rows > 0 ? rows : 1) * P->c.h_q * (P->c.d_v + 1) * sizeof(double);
    refs R = {malloc(nb), malloc(nb), malloc(lb), malloc(lb), calloc(1, sb), 0, 0, rows * P->c.h_q, row_step,
              P->c.h_q, P->c.d_v};
    return R;
}

void refs_free(refs *R) {
    free(R->out);
    free(R->low);
    free(R->lse);
    free(R->lse_low);
    free(R->slack);
}

int refs_run(const fc_attn_args *a, refs *R) {
    int rc = ref64_pair(a, R->row_step, R->out, R->lse, R->low, R->lse_low, R->slack);
    R->slack_max = R->lse_slack_max = 0;
    for (int64_t i = 0; rc == 0 && i < R->slack_n; i++) { /* unsampled rows hold 0 */
        const double *s = R->slack + i * (R->d_v + 1);
        for (int e = 0; e < R->d_v; e++) R->slack_max = fmax(R->slack_max, s[e]);
        R->lse_slack_max = fmax(R->lse_slack_max, s[R->d_v]);
    }
    return rc;
}

double refs_slack(const refs *R, int sampled, int64_t row, int h, int e) {
    if (!sampled) return e < R->d_v ? R->slack_max : R->lse_slack_max;
    return R->slack[(row * R->h_q + h) * (R->d_v + 1) + e];
}

double refs_err_low(const prob *P, const refs *R) {
    int64_t per_row = (int64_t)P->c.h_q * P->c.d_v;
    double err_low = 0;
    for (int b = 0; b < P->c.b; b++)
        for (int64_t r = 0; r < P->len_q[b]; r++) {
            int64_t row = P->q_row0[b] + r;
            if (!ref64_sampled(row, r, P->len_q[b], R->row_step)) continue;
            for (int64_t i = row * per_row; i < (row + 1) * per_row; i++)
                err_low = fmax(err_low, fabs(R->low[i] - R->out[i]));
        }
    return err_low;
}

double tol_of(double err_low) { return 2 * err_low + 1e-5; }

/* Every row_step-th global row, with row_step chosen to keep the float64 work near the budget (at least
 * 8 rows where there are that many); odd, so the sampled rows move across tile boundaries. */
int refs_row_step(const prob *P, double budget) {
    const cfg *c = &P->c;
    double per_row = (double)c->h_q * (c->s_k + 1) * (c->d + c->d_v);
    double want = ceil((double)P->total_q * per_row / budget);
    int64_t cap = P->total_q / 8 > 1 ? P->total_q / 8 : 1;
    int64_t step = want < 1 ? 1 : (int64_t)want;
    if (step > cap) step = cap;
    if (step > 1 && step % 2 == 0) step++;
    return (int)step;
}

/* Rotates row x (d features) to position pos with the case's tables, in float64. */
static void rotate_row(const prob *P, double *x, int64_t pos) {
    const fc_tensor *ct = &P->a.rotary_cos, *st = &P->a.rotary_sin;
    int half = P->c.rot_dim / 2;
    for (int m = 0; m < half; m++) {
        int i0 = P->c.rot_inter ? 2 * m : m, i1 = P->c.rot_inter ? 2 * m + 1 : m + half;
        double cs = tu_load(ct->data, ct->dtype, pos * ct->stride[0] + m * ct->stride[1]);
        double sn = tu_load(st->data, st->dtype, pos * st->stride[0] + m * st->stride[1]);
        double x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * cs - x1 * sn;
        x[i1] = x0 * sn + x1 * cs;
    }
}

/* Appended rows of one cache tensor: rotated features within a rounding of the exact rotation, others
 * copied exactly; marks the appended elements. Returns the number of bad elements. */
static int64_t appended_bad(const prob *P, const fc_tensor *cache, const fc_tensor *src, int dim, int rot,
                            const fc_tensor *descale, unsigned char *mark) {
    const cfg *c = &P->c;
    fc_dtype kdt = cfg_kv_dtype(c);
    double *x = malloc(sizeof(double) * (size_t)dim), *x0 = malloc(sizeof(double) * (size_t)dim);
    int64_t bad = 0;
    for (int b = 0; b < c->b; b++)
        for (int t = 0; t < c->s_new; t++)
            for (int h = 0; h < c->h_k; h++) {
                int64_t so = b * src->stride[0] + t * src->stride[1] + h * src->stride[2];
                int64_t co = kv_off(P, cache, b, P->s_cache[b] + t, h);
                for (int e = 0; e < dim; e++) x[e] = x0[e] = tu_load(src->data, src->dtype, so + e);
                if (rot) rotate_row(P, x, P->pad[b] + P->s_cache[b] + t);
                double ds = descale->data ? ((const float *)descale->data)[b * descale->stride[0] + h * descale->stride[1]] : 1;
                for (int e = 0; e < dim; e++) {
                    double got = tu_load(cache->data, kdt, co + e);
                    mark[co + e] = 1;
                    if (c->fp8) { /* quantised: x / descale rounded (saturated); a rounding of fp32 either way */
                        double want = tu_round(kdt, x[e] / ds);
                        double tol = tu_eps(kdt) * fabs(x[e] / ds) + 1e-6 * (1 + fabs(x[e]));
                        if (!(fabs(got - want) <= tol)) bad++;
                    } else if (rot && e < c->rot_dim) {
                        int half = c->rot_dim / 2;
                        int partner = c->rot_inter ? (e ^ 1) : (e < half ? e + half : e - half);
                        double tol = tu_eps(c->dt) * fabs(x[e]) + 1e-6 * (fabs(x0[e]) + fabs(x0[partner]));
                        if (!(fabs(got - x[e]) <= tol)) bad++;
                    } else if (got != x[e]) {
                        bad++;
                    }
                }
            }
    free(x);
    free(x0);
    return bad;
}

int64_t prob_cache_bad(const prob *P) {
    const region *rs[2] = {&P->kc, &P->vc};
    const unsigned char *snaps[2] = {P->k_snap, P->v_snap};
    int64_t bad = 0;
    for (int w = 0; w < 2; w++) {
        unsigned char *mark = calloc((size_t)rs[w]->n, 1);
        bad += w == 0 ? appended_bad(P, &P->a.k, &P->a.k_new, P->c.d, P->c.rot_dim > 0, &P->a.k_descale, mark)
                      : appended_bad(P, &P->a.v, &P->a.v_new, P->c.d_v, 0, &P->a.v_descale, mark);
        size_t es = tu_esize(cfg_kv_dtype(&P->c));
        for (int64_t i = 0; i < rs[w]->n; i++)
            if (!mark[i] && memcmp((const char *)reg_host(P, rs[w]) + i * es, snaps[w] + i * es, es)) bad++;
        free(mark);
    }
    return bad;
}

/* ---------------------------------------------------------------------------------------------- */
/* Groups                                                                                          */

void worst_update(double *worst, double ratio) {
    if (ratio > *worst || isnan(ratio)) *worst = isnan(ratio) ? INFINITY : ratio;
}

void group_note(group *g, int ok, double ratio, const char *desc) {
    g->checks++;
    if (!ok) g->failed++;
    if (ratio > g->worst || isnan(ratio)) {
        worst_update(&g->worst, ratio);
        snprintf(g->worst_case, sizeof g->worst_case, "%s", desc);
    }
}

double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void run_sweeps(const sweep *s, size_t n, const char *only, void (*print)(const group *g, double seconds)) {
    for (size_t i = 0; i < n; i++) {
        if (only && strcmp(only, s[i].name)) continue;
        group g;
        memset(&g, 0, sizeof g);
        g.name = s[i].name;
        double t = now_s();
        s[i].run(&g);
        print(&g, now_s() - t);
    }
}
