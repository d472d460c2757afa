/* gpu_attn.c — the CUDA backend against the CPU backend and the float64 oracle, over DESIGN.md's sweep. */
/*
 * Each case: random host inputs (never zeros), mirrored to the GPU; FC_DEVICE_CUDA runs on a non-default
 * stream with a cudaMalloc'd workspace and NaN-poisoned outputs; FC_DEVICE_CPU runs on the host copies;
 * ref64 (float64, and with the kernels' rounding steps) on sampled rows. Checks: FlashAttention's rule
 * max|gpu - ref64| <= 2 max|ref_lowp - ref64| + 1e-5 (the ratio is reported), every element written,
 * |gpu - cpu| within twice that tolerance plus one rounding of the value (every row; max|gpu - cpu| is
 * reported), lse within 1e-3 (1 + |lse|) of the CPU's, fully masked rows exactly 0 / -inf, padding
 * untouched, the cache after an append equal to the CPU's byte for byte, splits agreeing, CUDA graph
 * replay equal to a direct call. FC_ERR_UNSUPPORTED from the CUDA backend
 * counts as SKIPPED (listed, never passed); any other error is a failure.
 *
 * usage: gpu_attn [GROUP]      environment: FLASHC_GPU_QUICK=N a reduced sweep, every N-th small case of
 *                              each group (for compute-sanitizer);
 *                              FLASHC_GPU_FAKE=1 run the "GPU" side on the CPU backend (tests the harness
 *                              on a machine without a GPU); FLASHC_GPU_VERBOSE=1 list every skipped case.
 * Exit: 0 all passed, 1 something failed, 2 no CUDA device.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "ref64.h"
#include "testutil.h"

enum { KV_DENSE, KV_VARLEN, KV_PAGED };
enum { LAYOUT_CONTIG, LAYOUT_PADDED, LAYOUT_PACKED };
enum { MAX_BATCH = 8, MAX_ALLOCS = 40, MAX_SPLITS = 3, MAX_SKIP_KINDS = 24 };

/* ---------------------------------------------------------------------------------------------- */
/* Options and device access (real CUDA, or the CPU backend standing in for it with FLASHC_GPU_FAKE) */

static int g_quick, g_fake, g_verbose;
static cudaStream_t g_stream;
static double g_ref_budget = 1.5e8; /* float64 multiply-adds per ref64 call (rows are sampled to fit) */

static int env_flag(const char *name) {
    const char *s = getenv(name);
    return s && *s && strcmp(s, "0") != 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A CUDA runtime failure in the harness itself: nothing sensible can follow. */
static void cuda_die(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return;
    printf("  FAIL: %s: %s\n", what, cudaGetErrorString(e));
    tu_failed++;
    tu_finish();
    exit(1);
}

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 256;
    if (g_fake) {
        p = aligned_alloc(256, (bytes + 255) / 256 * 256);
        if (!p) cuda_die(cudaErrorMemoryAllocation, "aligned_alloc");
        return p;
    }
    cuda_die(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
}

static void dev_free(void *p) {
    if (!p) return;
    if (g_fake) free(p);
    else cuda_die(cudaFree(p), "cudaFree");
}

static void to_dev(void *dst, const void *src, size_t bytes) {
    if (g_fake) {
        memcpy(dst, src, bytes);
        return;
    }
    cuda_die(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_stream), "cudaMemcpyAsync H2D");
    cuda_die(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
}

static void to_host(void *dst, const void *src, size_t bytes) {
    if (g_fake) {
        memcpy(dst, src, bytes);
        return;
    }
    cuda_die(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_stream), "cudaMemcpyAsync D2H");
    cuda_die(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
}

/* Waits for the stream; a kernel fault shows here. */
static cudaError_t dev_sync(void) {
    if (g_fake) return cudaSuccess;
    cudaError_t e = cudaStreamSynchronize(g_stream);
    return e != cudaSuccess ? e : cudaGetLastError();
}

static fc_device gpu_device(void) { return g_fake ? FC_DEVICE_CPU : FC_DEVICE_CUDA; }

/* ---------------------------------------------------------------------------------------------- */
/* Cases                                                                                           */

/* One test case. s_k: key length of dense KV, the longest sequence of varlen KV, each sequence's
 * capacity of paged KV. */
typedef struct cfg {
    fc_dtype dt;
    int b, s_q, s_k, h_q, h_k, d, d_v;
    int causal, wl, wr;
    float softcap, scale;
    int alibi;      /* 0 none, 1 (h_q), 2 (b, h_q) */
    int sinks, lse; /* 1: given */
    int q_varlen, kv, page_size;
    int seqused;    /* 0 none (paged/append: full), 1 random, 2 random with sequence 0 at 0 */
    int layout;     /* LAYOUT_*: padded strides (padding NaN, 16-byte multiples), or slices of a packed qkv */
    int nan_unused; /* cache rows past seqused_k hold NaN; unused page-table entries are -1 */
    int s_new, rot_dim, rot_inter, rot_f32;
    int nsplits, splits[MAX_SPLITS];
} cfg;

/* A host allocation and its device mirror. */
typedef struct buf {
    void *host, *dev;
    size_t bytes;
} buf;

/* A region of elements (out, lse, caches) inside one buffer. */
typedef struct region {
    int buf;
    fc_dtype dt;
    int64_t n;
} region;

/* A built case: host arguments, buffers and per-sequence lengths. */
typedef struct prob {
    cfg c;
    fc_attn_args a;
    buf mem[MAX_ALLOCS];
    int nmem;
    uint64_t rng;
    int64_t total_q, q_row0[MAX_BATCH];
    int len_q[MAX_BATCH], cap[MAX_BATCH], s_cache[MAX_BATCH];
    region out, lse, kc, vc;
} prob;

/* Per-group statistics: one line of output per group. */
typedef struct skip_kind {
    char what[160];
    int count;
    char example[200];
} skip_kind;

typedef struct group {
    const char *name;
    int seen, cases, skipped, checks, failed;
    double worst, worst_cpu_diff;
    char worst_case[240];
    skip_kind skips[MAX_SKIP_KINDS];
    int nskip_kinds;
} group;

static double g_worst_ratio;
static int g_total_skipped;

static cfg cfg_base(void) {
    cfg c;
    memset(&c, 0, sizeof c);
    c.dt = FC_BF16;
    c.b = 2;
    c.s_q = c.s_k = 16;
    c.h_q = c.h_k = 4;
    c.d = c.d_v = 64;
    c.wl = c.wr = -1;
    c.lse = 1;
    c.page_size = 16;
    c.nsplits = 1;
    return c;
}

static void describe(const cfg *c, char *s, size_t n) {
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
    ADD(" splits");
    for (int i = 0; i < c->nsplits; i++) ADD("%s%d", i ? "," : "", c->splits[i]);
#undef ADD
}

/* ---------------------------------------------------------------------------------------------- */
/* Building a case on the host                                                                     */

static int palloc_idx(prob *P, size_t bytes) {
    size_t n = (bytes + 255) / 256 * 256;
    if (n == 0) n = 256;
    void *p = aligned_alloc(256, n);
    if (!p || P->nmem == MAX_ALLOCS) {
        printf("gpu_attn: out of host memory\n");
        exit(1);
    }
    memset(p, 0, n);
    P->mem[P->nmem].host = p;
    P->mem[P->nmem].dev = NULL;
    P->mem[P->nmem].bytes = n;
    return P->nmem++;
}


static void prob_free(prob *P) {
    for (int i = 0; i < P->nmem; i++) {
        free(P->mem[i].host);
        dev_free(P->mem[i].dev);
    }
    P->nmem = 0;
}

/* A tensor of the given shape; padded: every non-last stride gets 8 more elements (16-byte multiples). */
static fc_tensor new_tensor(prob *P, fc_dtype dt, int nd, const int64_t *shape, int padded, region *reg) {
    fc_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = nd;
    int64_t st = 1;
    for (int k = nd - 1; k >= 0; k--) {
        t.shape[k] = shape[k];
        t.stride[k] = st;
        st = st * shape[k] + (padded && k > 0 ? 8 : 0);
    }
    int64_t n = t.shape[0] * t.stride[0] + (padded ? 8 : 0);
    if (n < 1) n = 1;
    int idx = palloc_idx(P, (size_t)n * tu_esize(dt));
    t.data = P->mem[idx].host;
    if (reg) {
        reg->buf = idx;
        reg->dt = dt;
        reg->n = n;
    }
    return t;
}

static void *reg_host(const prob *P, const region *r) { return P->mem[r->buf].host; }
static size_t reg_bytes(const region *r) { return (size_t)r->n * tu_esize(r->dt); }

/* Random normal values already encoded as bf16 / fp16 bits: filling a large cache element by element
 * through tu_store would dominate the run time. */
static uint16_t g_pool[2][65536];

static void pool_init(void) {
    uint64_t rng = 99;
    for (int i = 0; i < 65536; i++) {
        double x = tu_normal(&rng);
        g_pool[0][i] = tu_bf16_bits(tu_round(FC_BF16, x));
        g_pool[1][i] = tu_fp16_bits(tu_round(FC_FP16, x));
    }
}

/* Element i of a bf16/fp16/fp32 array: a random normal value. */
static inline void store_random(void *p, fc_dtype dt, int64_t i, uint64_t *rng) {
    if (dt == FC_BF16 || dt == FC_FP16) ((uint16_t *)p)[i] = g_pool[dt == FC_FP16][tu_rng_next(rng) >> 48];
    else tu_store(p, dt, i, tu_normal(rng));
}

/* Random values into every element of the view t. */
static void fill_view(const fc_tensor *t, uint64_t *rng, double scale, double shift) {
    int64_t sh[4] = {1, 1, 1, 1}, st[4] = {0, 0, 0, 0};
    for (int k = 0; k < t->ndim; k++) {
        sh[4 - t->ndim + k] = t->shape[k];
        st[4 - t->ndim + k] = t->stride[k];
    }
    for (int64_t i0 = 0; i0 < sh[0]; i0++)
        for (int64_t i1 = 0; i1 < sh[1]; i1++)
            for (int64_t i2 = 0; i2 < sh[2]; i2++)
                for (int64_t i3 = 0; i3 < sh[3]; i3++)
                    if (scale == 1 && shift == 0)
                        store_random(t->data, t->dtype, i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3], rng);
                    else
                        tu_store(t->data, t->dtype, i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3],
                                 shift + scale * tu_normal(rng));
}

static void fill_region(prob *P, const region *r) {
    void *p = reg_host(P, r);
    for (int64_t i = 0; i < r->n; i++) store_random(p, r->dt, i, &P->rng);
}

/* Element offset of key row j of sequence b, head h, in cache tensor t (k or v). */
static int64_t kv_off(const prob *P, const fc_tensor *t, int b, int64_t j, int h) {
    const fc_attn_args *a = &P->a;
    if (P->c.kv == KV_VARLEN)
        return (((const int32_t *)a->cu_seqlens_k.data)[b] + j) * t->stride[0] + h * t->stride[1];
    if (P->c.kv == KV_PAGED) {
        int64_t page = ((const int32_t *)a->page_table.data)[b * a->page_table.stride[0] + j / P->c.page_size];
        return page * t->stride[0] + (j % P->c.page_size) * t->stride[1] + h * t->stride[2];
    }
    return b * t->stride[0] + j * t->stride[1] + h * t->stride[2];
}

/* Per-sequence lengths: queries, cache capacity, keys present before the append. Varlen batches get
 * an empty sequence (q and k) when b >= 3. */
static void build_lengths(prob *P) {
    const cfg *c = &P->c;
    int64_t row = 0;
    for (int i = 0; i < c->b; i++) {
        P->len_q[i] = c->q_varlen ? tu_randint(&P->rng, 0, c->s_q) : c->s_q;
        P->cap[i] = c->kv == KV_VARLEN ? tu_randint(&P->rng, 0, c->s_k) : c->s_k;
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

static fc_tensor int_tensor(prob *P, int64_t n, const int *vals) {
    int64_t shape[1] = {n};
    fc_tensor t = new_tensor(P, FC_INT32, 1, shape, 0, NULL);
    for (int64_t i = 0; i < n; i++) ((int32_t *)t.data)[i] = vals[i];
    return t;
}

static void build_q_out(prob *P) {
    const cfg *c = &P->c;
    fc_attn_args *a = &P->a;
    int pad = c->layout == LAYOUT_PADDED;
    if (c->q_varlen) {
        int cu[MAX_BATCH + 1], mx = 0;
        cu[0] = 0;
        for (int i = 0; i < c->b; i++) {
            cu[i + 1] = cu[i] + P->len_q[i];
            if (P->len_q[i] > mx) mx = P->len_q[i];
        }
        a->cu_seqlens_q = int_tensor(P, c->b + 1, cu);
        a->max_seqlen_q = mx;
        int64_t qs[3] = {P->total_q, c->h_q, c->d}, os[3] = {P->total_q, c->h_q, c->d_v};
        int64_t ls[2] = {c->h_q, P->total_q};
        a->q = new_tensor(P, c->dt, 3, qs, pad, NULL);
        a->out = new_tensor(P, c->dt, 3, os, pad, &P->out);
        if (c->lse) a->lse = new_tensor(P, FC_FP32, 2, ls, 0, &P->lse);
    } else {
        int64_t qs[4] = {c->b, c->s_q, c->h_q, c->d}, os[4] = {c->b, c->s_q, c->h_q, c->d_v};
        int64_t ls[3] = {c->b, c->h_q, c->s_q};
        if (c->layout != LAYOUT_PACKED) a->q = new_tensor(P, c->dt, 4, qs, pad, NULL);
        a->out = new_tensor(P, c->dt, 4, os, pad, &P->out);
        if (c->lse) a->lse = new_tensor(P, FC_FP32, 3, ls, 0, &P->lse);
    }
    if (c->layout != LAYOUT_PACKED) {
        if (pad) tu_poison(a->q.data, c->dt, a->q.shape[0] * a->q.stride[0] + 8);
        fill_view(&a->q, &P->rng, 1, 0);
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
                for (int e = 0; e < dim; e++) store_random(t->data, t->dtype, o + e, &P->rng);
            }
    }
}

static void build_kv(prob *P) {
    const cfg *c = &P->c;
    fc_attn_args *a = &P->a;
    int pad = c->layout == LAYOUT_PADDED;
    if (c->layout == LAYOUT_PACKED) {
        build_packed(P);
        return;
    }
    if (c->kv == KV_VARLEN) {
        int cu[MAX_BATCH + 1], mx = 0;
        cu[0] = 0;
        for (int i = 0; i < c->b; i++) {
            cu[i + 1] = cu[i] + P->cap[i];
            if (P->cap[i] > mx) mx = P->cap[i];
        }
        a->cu_seqlens_k = int_tensor(P, c->b + 1, cu);
        a->max_seqlen_k = mx;
        int64_t ks[3] = {cu[c->b] + 2, c->h_k, c->d}, vs[3] = {cu[c->b] + 2, c->h_k, c->d_v};
        a->k = new_tensor(P, c->dt, 3, ks, pad, &P->kc);
        a->v = new_tensor(P, c->dt, 3, vs, pad, &P->vc);
    } else {
        int64_t n0 = c->b, n1 = c->s_k;
        if (c->kv == KV_PAGED) {
            build_page_table(P);
            n0 = c->b * ((c->s_k + c->page_size - 1) / c->page_size) + 2;
            n1 = c->page_size;
        }
        int64_t ks[4] = {n0, n1, c->h_k, c->d}, vs[4] = {n0, n1, c->h_k, c->d_v};
        a->k = new_tensor(P, c->dt, 4, ks, pad, &P->kc);
        a->v = new_tensor(P, c->dt, 4, vs, pad, &P->vc);
    }
    if (pad || c->nan_unused) {
        tu_poison(reg_host(P, &P->kc), c->dt, P->kc.n);
        tu_poison(reg_host(P, &P->vc), c->dt, P->vc.n);
    } else {
        fill_region(P, &P->kc);
        fill_region(P, &P->vc);
    }
    if (pad || c->nan_unused) { /* the rows that count: random again */
        fill_cache_rows(P, &a->k, c->d);
        fill_cache_rows(P, &a->v, c->d_v);
    }
}

static void build_append(prob *P) {
    const cfg *c = &P->c;
    fc_attn_args *a = &P->a;
    int pad = c->layout == LAYOUT_PADDED;
    int64_t ks[4] = {c->b, c->s_new, c->h_k, c->d}, vs[4] = {c->b, c->s_new, c->h_k, c->d_v};
    a->k_new = new_tensor(P, c->dt, 4, ks, pad, NULL);
    a->v_new = new_tensor(P, c->dt, 4, vs, pad, NULL);
    fill_view(&a->k_new, &P->rng, 1, 0);
    fill_view(&a->v_new, &P->rng, 1, 0);
    if (!c->rot_dim) return;
    fc_dtype rdt = c->rot_f32 ? FC_FP32 : c->dt;
    int half = c->rot_dim / 2;
    int64_t rs[2] = {c->s_k + 3, half};
    a->rotary_cos = new_tensor(P, rdt, 2, rs, 0, NULL);
    a->rotary_sin = new_tensor(P, rdt, 2, rs, 0, NULL);
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
    if (c->seqused || c->kv == KV_PAGED || c->s_new) a->seqused_k = int_tensor(P, c->b, P->s_cache);
    a->softmax_scale = c->scale;
    a->softcap = c->softcap;
    a->causal = c->causal;
    a->window_left = c->wl;
    a->window_right = c->wr;
    if (c->alibi) {
        int64_t s1[1] = {c->h_q}, s2[2] = {c->b, c->h_q};
        a->alibi_slopes = new_tensor(P, FC_FP32, c->alibi, c->alibi == 1 ? s1 : s2, 0, NULL);
        fill_view(&a->alibi_slopes, &P->rng, 0.05, 0.15);
    }
    if (c->sinks) {
        int64_t s1[1] = {c->h_q};
        a->sinks = new_tensor(P, FC_FP32, 1, s1, 0, NULL);
        fill_view(&a->sinks, &P->rng, 1, 0.5);
    }
}

static void prob_build(prob *P, const cfg *c, uint64_t seed) {
    memset(P, 0, sizeof *P);
    P->c = *c;
    P->rng = seed;
    fc_attn_args_init(&P->a);
    build_lengths(P);
    build_q_out(P);
    build_kv(P);
    if (c->s_new) build_append(P);
    build_options(P);
}

/* ---------------------------------------------------------------------------------------------- */
/* The device mirror                                                                                */

/* Every tensor field of an fc_attn_args (NULL-terminated). */
static void arg_tensors(fc_attn_args *a, fc_tensor **t) {
    fc_tensor *list[] = {&a->q, &a->k, &a->v, &a->out, &a->lse, &a->cu_seqlens_q, &a->cu_seqlens_k,
                         &a->seqused_k, &a->page_table, &a->k_new, &a->v_new, &a->rotary_cos, &a->rotary_sin,
                         &a->alibi_slopes, &a->sinks, NULL};
    memcpy(t, list, sizeof list);
}

/* Copies every buffer to the device; returns the arguments with device pointers. */
static fc_attn_args mirror(prob *P) {
    for (int i = 0; i < P->nmem; i++) {
        P->mem[i].dev = dev_alloc(P->mem[i].bytes);
        to_dev(P->mem[i].dev, P->mem[i].host, P->mem[i].bytes);
    }
    fc_attn_args d = P->a;
    d.device = gpu_device();
    fc_tensor *t[16];
    arg_tensors(&d, t);
    for (int k = 0; t[k]; k++) {
        if (!t[k]->data) continue;
        for (int i = 0; i < P->nmem; i++) {
            char *h = P->mem[i].host;
            if ((char *)t[k]->data >= h && (char *)t[k]->data < h + P->mem[i].bytes) {
                t[k]->data = (char *)P->mem[i].dev + ((char *)t[k]->data - h);
                break;
            }
        }
    }
    return d;
}

/* Restores a region on the device from host bytes. */
static void reg_upload(const prob *P, const region *r, const void *src) {
    to_dev(P->mem[r->buf].dev, src, reg_bytes(r));
}

static void reg_download(const prob *P, const region *r, void *dst) {
    to_host(dst, P->mem[r->buf].dev, reg_bytes(r));
}

/* ---------------------------------------------------------------------------------------------- */
/* One GPU run                                                                                      */

/* What a GPU run left: status, and the out/lse/caches copied back. */
typedef struct gpu_run {
    fc_status st;
    char msg[320];
    unsigned char *out, *lse, *kc, *vc;
} gpu_run;

static void gpu_run_free(gpu_run *r) {
    free(r->out);
    free(r->lse);
    free(r->kc);
    free(r->vc);
    memset(r, 0, sizeof *r);
}

static void set_msg(gpu_run *r, fc_status st, const char *where) {
    r->st = st;
    snprintf(r->msg, sizeof r->msg, "%s: %s: %s", where, fc_status_string(st), fc_last_error());
}

/* Poisons out/lse on the device (and restores the caches there), runs, copies the results back. */
static void gpu_run_once(prob *P, fc_attn_args *d, const void *out_poison, const void *lse_poison,
                         const void *k_pristine, const void *v_pristine, gpu_run *r) {
    memset(r, 0, sizeof *r);
    reg_upload(P, &P->out, out_poison);
    if (P->c.lse) reg_upload(P, &P->lse, lse_poison);
    if (P->c.s_new) {
        reg_upload(P, &P->kc, k_pristine);
        reg_upload(P, &P->vc, v_pristine);
    }
    size_t ws_bytes = 0;
    fc_status st = fc_attn_workspace_size(d, &ws_bytes);
    if (st != FC_OK) {
        set_msg(r, st, "fc_attn_workspace_size");
        return;
    }
    void *ws = ws_bytes ? dev_alloc(ws_bytes) : NULL;
    st = fc_attn_fwd(d, ws, ws_bytes, g_fake ? NULL : (void *)g_stream);
    if (st != FC_OK) set_msg(r, st, "fc_attn_fwd");
    cudaError_t e = dev_sync();
    if (e != cudaSuccess && r->st == FC_OK) {
        r->st = FC_ERR_CUDA;
        snprintf(r->msg, sizeof r->msg, "after fc_attn_fwd: %s", cudaGetErrorString(e));
    }
    dev_free(ws);
    if (e != cudaSuccess) return; /* a sticky fault: copies would fail */
    r->out = malloc(reg_bytes(&P->out));
    reg_download(P, &P->out, r->out);
    if (P->c.lse) {
        r->lse = malloc(reg_bytes(&P->lse));
        reg_download(P, &P->lse, r->lse);
    }
    if (P->c.s_new) {
        r->kc = malloc(reg_bytes(&P->kc));
        r->vc = malloc(reg_bytes(&P->vc));
        reg_download(P, &P->kc, r->kc);
        reg_download(P, &P->vc, r->vc);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Reference and comparison                                                                        */

typedef struct refs {
    double *out, *low, *lse, *lse_low;
    int row_step;
} refs;

typedef struct ref_job {
    const fc_attn_args *a;
    int row_step, lowp, rc;
    double *out, *lse;
} ref_job;

static void *ref_thread(void *arg) {
    ref_job *j = arg;
    j->rc = ref64_attn(j->a, j->row_step, j->lowp, j->out, j->lse);
    return NULL;
}

/* Every row_step-th global row, with row_step chosen to keep the float64 work near the budget (at least
 * 8 rows where there are that many); odd, so the sampled rows move across tile boundaries. */
static int pick_row_step(const prob *P) {
    const cfg *c = &P->c;
    double per_row = (double)c->h_q * (c->s_k + 1) * (c->d + c->d_v);
    double want = ceil((double)P->total_q * per_row / g_ref_budget);
    int64_t cap = P->total_q / 8 > 1 ? P->total_q / 8 : 1;
    int64_t step = want < 1 ? 1 : (int64_t)want;
    if (step > cap) step = cap;
    if (step > 1 && step % 2 == 0) step++;
    return (int)step;
}

/* ref64 (float64 and the kernels' rounding) on the sampled rows, the two in parallel. */
static int run_refs(const fc_attn_args *a, refs *R) {
    ref_job j[2] = {{a, R->row_step, 0, 0, R->out, R->lse}, {a, R->row_step, 1, 0, R->low, R->lse_low}};
    pthread_t t;
    int threaded = pthread_create(&t, NULL, ref_thread, &j[1]) == 0;
    ref_thread(&j[0]);
    if (threaded) pthread_join(t, NULL);
    else ref_thread(&j[1]);
    return j[0].rc || j[1].rc ? -1 : 0;
}

typedef struct cmp {
    double err, err_low, cpu_diff, lse_err;
    double cpu_excess; /* max over elements of |gpu - cpu| - eps(dtype) |cpu| (one rounding of the value) */
    int64_t nans, masked_bad, lse_bad, pad_bad, cache_bad, cache_rot_ulp;
} cmp;

static int64_t out_off(const prob *P, int b, int64_t r, int h) {
    const fc_tensor *t = &P->a.out;
    if (P->c.q_varlen) return (P->q_row0[b] + r) * t->stride[0] + h * t->stride[1];
    return b * t->stride[0] + r * t->stride[1] + h * t->stride[2];
}

static int64_t lse_off(const prob *P, int b, int64_t r, int h) {
    const fc_tensor *t = &P->a.lse;
    if (P->c.q_varlen) return h * t->stride[0] + (P->q_row0[b] + r) * t->stride[1];
    return b * t->stride[0] + h * t->stride[1] + r * t->stride[2];
}

/* out of one query row and head: against ref64 (sampled rows) and the CPU (every row). */
static void cmp_row(const prob *P, const refs *R, const gpu_run *g, int b, int64_t r, int h, cmp *m) {
    const cfg *c = &P->c;
    int64_t row = P->q_row0[b] + r, o = out_off(P, b, r, h);
    const void *cpu = reg_host(P, &P->out);
    int sampled = row % R->row_step == 0, masked = 0;
    if (c->lse) {
        double cl = ((const float *)reg_host(P, &P->lse))[lse_off(P, b, r, h)];
        double gl = ((const float *)g->lse)[lse_off(P, b, r, h)];
        masked = cl == -INFINITY;
        if (masked) {
            if (gl != -INFINITY) m->lse_bad++;
        } else {
            double e = fabs(gl - cl) / (1 + fabs(cl));
            if (!(e <= 1e-3)) m->lse_bad++;
            if (!(e <= m->lse_err)) m->lse_err = e;
        }
    }
    for (int e = 0; e < c->d_v; e++) {
        double x = tu_load(g->out, c->dt, o + e), y = tu_load(cpu, c->dt, o + e);
        if (isnan(x)) m->nans++;
        if (masked && x != 0) m->masked_bad++;
        double dc = fabs(x - y), ex = dc - tu_eps(c->dt) * fabs(y);
        if (!(dc <= m->cpu_diff)) m->cpu_diff = isnan(dc) ? INFINITY : dc;
        if (!(ex <= m->cpu_excess)) m->cpu_excess = isnan(ex) ? INFINITY : ex;
        if (!sampled) continue;
        int64_t k = (row * c->h_q + h) * c->d_v + e;
        double er = fabs(x - R->out[k]), el = fabs(R->low[k] - R->out[k]);
        if (!(er <= m->err)) m->err = isnan(er) ? INFINITY : er;
        if (el > m->err_low) m->err_low = el;
    }
}

/* Elements of a region outside the view t still hold the poison (the output's padding). */
static int64_t padding_touched(const region *r, const fc_tensor *t, const unsigned char *got,
                               const unsigned char *poison) {
    size_t es = tu_esize(r->dt);
    unsigned char *in = calloc((size_t)r->n, 1);
    int64_t sh[4] = {1, 1, 1, 1}, st[4] = {0, 0, 0, 0}, bad = 0;
    for (int k = 0; k < t->ndim; k++) {
        sh[4 - t->ndim + k] = t->shape[k];
        st[4 - t->ndim + k] = t->stride[k];
    }
    for (int64_t i0 = 0; i0 < sh[0]; i0++)
        for (int64_t i1 = 0; i1 < sh[1]; i1++)
            for (int64_t i2 = 0; i2 < sh[2]; i2++)
                for (int64_t i3 = 0; i3 < sh[3]; i3++) in[i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3]] = 1;
    for (int64_t i = 0; i < r->n; i++)
        if (!in[i] && memcmp(got + i * es, poison + i * es, es)) bad++;
    free(in);
    return bad;
}

/* The device cache after the append against the CPU's, byte for byte; counts separately the rotated
 * features that differ by one unit in the last place (rounding of the rotation). */
static void cmp_cache(const prob *P, const gpu_run *g, cmp *m) {
    const region *rs[2] = {&P->kc, &P->vc};
    const unsigned char *got[2] = {g->kc, g->vc};
    size_t es = tu_esize(P->c.dt);
    for (int w = 0; w < 2; w++) {
        const unsigned char *cpu = reg_host(P, rs[w]);
        for (int64_t i = 0; i < rs[w]->n; i++) {
            if (!memcmp(got[w] + i * es, cpu + i * es, es)) continue;
            m->cache_bad++;
            if (w == 0 && P->c.rot_dim && es == 2) {
                uint16_t x, y;
                memcpy(&x, got[w] + i * es, 2);
                memcpy(&y, cpu + i * es, 2);
                if ((x ^ y) < 0x8000 && (x > y ? x - y : y - x) == 1) m->cache_rot_ulp++;
            }
        }
    }
}

static cmp compare(const prob *P, const refs *R, const gpu_run *g, const unsigned char *out_poison) {
    const cfg *c = &P->c;
    cmp m;
    memset(&m, 0, sizeof m);
    for (int b = 0; b < c->b; b++)
        for (int64_t r = 0; r < P->len_q[b]; r++)
            for (int h = 0; h < c->h_q; h++) cmp_row(P, R, g, b, r, h, &m);
    if (c->layout == LAYOUT_PADDED) m.pad_bad = padding_touched(&P->out, &P->a.out, g->out, out_poison);
    if (c->s_new) cmp_cache(P, g, &m);
    return m;
}

/* ---------------------------------------------------------------------------------------------- */
/* Recording                                                                                        */

static void group_note(group *g, int ok, double ratio, const char *desc) {
    g->checks++;
    if (!ok) g->failed++;
    if (ratio > g->worst || isnan(ratio)) {
        g->worst = isnan(ratio) ? INFINITY : ratio;
        snprintf(g->worst_case, sizeof g->worst_case, "%s", desc);
    }
    if (ratio > g_worst_ratio || isnan(ratio)) g_worst_ratio = isnan(ratio) ? INFINITY : ratio;
}

/* An unsupported combination: counted and listed by its message, never passed. */
static void group_skip(group *g, const char *msg, const char *desc) {
    g->skipped++;
    g_total_skipped++;
    if (g_verbose) printf("  SKIPPED [%s]: %s\n", desc, msg);
    for (int i = 0; i < g->nskip_kinds; i++)
        if (!strcmp(g->skips[i].what, msg)) {
            g->skips[i].count++;
            return;
        }
    if (g->nskip_kinds == MAX_SKIP_KINDS) return;
    skip_kind *k = &g->skips[g->nskip_kinds++];
    snprintf(k->what, sizeof k->what, "%s", msg);
    snprintf(k->example, sizeof k->example, "%s", desc);
    k->count = 1;
}

/* Checks one GPU run against the CPU and the references; returns the ratio. */
static double check_run(group *g, const prob *P, const refs *R, const gpu_run *gr, int splits,
                        const unsigned char *out_poison, const char *desc) {
    const cfg *c = &P->c;
    cmp m = compare(P, R, gr, out_poison);
    double tol = 2 * m.err_low + 1e-5, ratio = m.err / tol;
    if (m.nans || m.masked_bad) ratio = INFINITY;
    if (m.cpu_diff > g->worst_cpu_diff) g->worst_cpu_diff = m.cpu_diff;
    int ok = tu_check(m.nans == 0 && m.masked_bad == 0 && m.err <= tol,
                      "%s [%s] split %d: max|gpu-ref64| %.3g, max|lowp-ref64| %.3g, ratio %.3g, NaN %lld, "
                      "masked rows nonzero %lld (rows every %d)",
                      g->name, desc, splits, m.err, m.err_low, ratio, (long long)m.nans, (long long)m.masked_bad,
                      R->row_step);
    group_note(g, ok, ratio, desc);
    ok = tu_check(m.cpu_excess <= 2 * tol,
                  "%s [%s] split %d: |gpu-cpu| - eps|cpu| up to %.3g, over 2 x tolerance %.3g (max|gpu-cpu| %.3g)",
                  g->name, desc, splits, m.cpu_excess, 2 * tol, m.cpu_diff);
    group_note(g, ok, 0, desc);
    if (c->lse) {
        ok = tu_check(m.lse_bad == 0, "%s [%s] split %d: lse %lld bad against the CPU's, worst rel err %.3g",
                      g->name, desc, splits, (long long)m.lse_bad, m.lse_err);
        group_note(g, ok, 0, desc);
    }
    if (c->layout == LAYOUT_PADDED) {
        ok = tu_check(m.pad_bad == 0, "%s [%s] split %d: %lld out elements written outside the view", g->name,
                      desc, splits, (long long)m.pad_bad);
        group_note(g, ok, 0, desc);
    }
    if (c->s_new) {
        ok = tu_check(m.cache_bad == 0,
                      "%s [%s] split %d: cache after append differs from the CPU's in %lld elements (%lld of them "
                      "rotated features one ulp apart)",
                      g->name, desc, splits, (long long)m.cache_bad, (long long)m.cache_rot_ulp);
        group_note(g, ok, 0, desc);
    }
    return ratio;
}

/* Splits agree with the first split count: each is within the tolerance of ref64, so within twice it of
 * each other, plus one rounding of the output value (every row is compared; the tolerance comes from the
 * sampled ones, whose outputs may be smaller). */
static void check_agree(group *g, const prob *P, const refs *R, gpu_run *runs, int n, const char *desc) {
    const cfg *c = &P->c;
    double err_low = 0;
    int64_t rows = P->total_q * c->h_q * c->d_v;
    for (int64_t i = 0; i < rows; i++)
        if ((i / (c->h_q * c->d_v)) % R->row_step == 0) err_low = fmax(err_low, fabs(R->low[i] - R->out[i]));
    double tol = 2 * (2 * err_low + 1e-5);
    for (int s = 1; s < n; s++) {
        if (runs[s].st != FC_OK || runs[0].st != FC_OK) continue;
        double diff = 0;
        for (int b = 0; b < c->b; b++)
            for (int64_t r = 0; r < P->len_q[b]; r++)
                for (int h = 0; h < c->h_q; h++)
                    for (int e = 0; e < c->d_v; e++) {
                        int64_t o = out_off(P, b, r, h) + e;
                        double x = tu_load(runs[s].out, c->dt, o), y = tu_load(runs[0].out, c->dt, o);
                        double ex = fabs(x - y) - tu_eps(c->dt) * fmax(fabs(x), fabs(y));
                        diff = isnan(x) || isnan(y) ? INFINITY : fmax(diff, ex);
                    }
        int ok = tu_check(diff <= tol, "%s [%s]: splits %d and %d differ by %.3g beyond one rounding (tolerance %.3g)",
                          g->name, desc, c->splits[0], c->splits[s], diff, tol);
        group_note(g, ok, 0, desc);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Running a case                                                                                  */

static uint64_t g_seed = 4242;

/* FLASHC_GPU_QUICK=N: every N-th case of each group (N = 1 for any other value), small ones only
 * (compute-sanitizer is slow). */
static int quick_keeps(const group *g, const cfg *c) {
    return g->seen % g_quick == 0 && (double)c->s_q * c->s_k * c->b <= 70000 && c->s_k <= 2100;
}

static void run_case(group *g, const cfg *c) {
    g->seen++;
    g_seed++;
    if (g_quick && !quick_keeps(g, c)) return;
    char desc[240];
    describe(c, desc, sizeof desc);
    prob P;
    prob_build(&P, c, g_seed * 0x9e3779b97f4a7c15ull);
    g->cases++;
    /* pristine copies: poisoned outputs, caches before the append */
    unsigned char *out_poison = malloc(reg_bytes(&P.out)), *lse_poison = c->lse ? malloc(reg_bytes(&P.lse)) : NULL;
    memcpy(out_poison, reg_host(&P, &P.out), reg_bytes(&P.out));
    tu_poison(out_poison, c->dt, P.out.n);
    memcpy(reg_host(&P, &P.out), out_poison, reg_bytes(&P.out));
    if (lse_poison) {
        tu_poison(lse_poison, FC_FP32, P.lse.n);
        memcpy(reg_host(&P, &P.lse), lse_poison, reg_bytes(&P.lse));
    }
    unsigned char *k0 = malloc(reg_bytes(&P.kc)), *v0 = malloc(reg_bytes(&P.vc));
    memcpy(k0, reg_host(&P, &P.kc), reg_bytes(&P.kc));
    memcpy(v0, reg_host(&P, &P.vc), reg_bytes(&P.vc));
    fc_attn_args d = mirror(&P);

    gpu_run runs[MAX_SPLITS];
    int n_ok = 0, skipped = 0;
    for (int s = 0; s < c->nsplits; s++) {
        d.num_splits = c->splits[s];
        gpu_run_once(&P, &d, out_poison, lse_poison, k0, v0, &runs[s]);
        if (runs[s].st == FC_OK) n_ok++;
        else if (runs[s].st == FC_ERR_UNSUPPORTED) skipped = 1;
        else {
            tu_check(0, "%s [%s] split %d: %s", g->name, desc, c->splits[s], runs[s].msg);
            group_note(g, 0, 0, desc);
        }
    }
    if (skipped) {
        for (int s = 0; s < c->nsplits; s++)
            if (runs[s].st == FC_ERR_UNSUPPORTED) {
                group_skip(g, runs[s].msg, desc);
                break;
            }
    }
    if (n_ok > 0) {
        /* the CPU on the host copies (after the GPU ran: the host cache is the pristine one) */
        P.a.num_splits = 0;
        fc_status st = fc_attn_fwd(&P.a, NULL, 0, NULL);
        int ok = tu_check(st == FC_OK, "%s [%s]: CPU backend: %s: %s", g->name, desc, fc_status_string(st),
                          fc_last_error());
        group_note(g, ok, 0, desc);
        int64_t rows = P.total_q, n = rows * c->h_q * c->d_v;
        size_t nb = (size_t)(n > 0 ? n : 1) * sizeof(double), lb = (size_t)(rows > 0 ? rows : 1) * c->h_q * sizeof(double);
        refs R = {malloc(nb), malloc(nb), malloc(lb), malloc(lb), pick_row_step(&P)};
        if (ok) {
            ok = tu_check(run_refs(&P.a, &R) == 0, "%s [%s]: ref64 cannot read this case", g->name, desc);
            group_note(g, ok, 0, desc);
        }
        for (int s = 0; ok && s < c->nsplits; s++)
            if (runs[s].st == FC_OK) check_run(g, &P, &R, &runs[s], c->splits[s], out_poison, desc);
        if (ok) check_agree(g, &P, &R, runs, c->nsplits, desc);
        free(R.out); free(R.low); free(R.lse); free(R.lse_low);
    }
    for (int s = 0; s < c->nsplits; s++) gpu_run_free(&runs[s]);
    free(out_poison); free(lse_poison); free(k0); free(v0);
    prob_free(&P);
}

static void group_print(const group *g, double seconds) {
    printf("%-8s %4d cases %4d skipped %5d checks %3d failed  worst ratio %.3f  max|gpu-cpu| %.2e  (%.1fs)\n",
           g->name, g->cases, g->skipped, g->checks, g->failed, g->worst, g->worst_cpu_diff, seconds);
    if (g->worst > 1) printf("         worst ratio in: %s\n", g->worst_case);
    for (int i = 0; i < g->nskip_kinds; i++)
        printf("         SKIPPED %d x %s  (e.g. %s)\n", g->skips[i].count, g->skips[i].what, g->skips[i].example);
}

/* ---------------------------------------------------------------------------------------------- */
/* The sweep                                                                                       */

static const fc_dtype DTYPES[2] = {FC_BF16, FC_FP16};
/* d/d_v: the five head dims, and (192, 128) */
static const int DIMS[6][2] = {{64, 64}, {96, 96}, {128, 128}, {192, 192}, {256, 256}, {192, 128}};
static const int HEADS[3][2] = {{4, 4}, {8, 2}, {8, 1}}; /* MHA, GQA, MQA */
static const int PAIRS[][2] = {{1, 1},     {1, 3},     {3, 1},   {7, 33},   {64, 64},  {113, 203}, {128, 217},
                               {239, 1},   {1, 239},   {256, 256}, {513, 1027}, {65, 31}, {33, 7},  {108, 256}};
#define N_PAIRS ((int)(sizeof PAIRS / sizeof PAIRS[0]))

static void set_heads(cfg *c, int i) {
    c->h_q = HEADS[i % 3][0];
    c->h_k = HEADS[i % 3][1];
}

static void set_dims(cfg *c, int i) {
    c->d = DIMS[i % 6][0];
    c->d_v = DIMS[i % 6][1];
}

/* mask: 0 none, 1 causal, 2 local window, 3 causal with a left window. */
static void set_mask(cfg *c, int mask) {
    c->causal = mask == 1 || mask == 3;
    c->wl = mask == 2 ? 11 : mask == 3 ? 19 : -1;
    c->wr = mask == 2 ? 7 : -1;
}

static int split_of(int i) { return i % 3 == 0 ? 1 : i % 3 == 1 ? 3 : 0; }

/* The big pairs with one sequence (keeps the CPU side and the oracle fast). */
static void set_pair(cfg *c, int p) {
    c->s_q = PAIRS[p][0];
    c->s_k = PAIRS[p][1];
    if ((double)c->s_q * c->s_k > 100000) c->b = 1;
}

/* dtype x {MHA, GQA, MQA} x d x mask x softcap, every combination; seqlen pairs rotate, ALiBi and sinks
 * come and go. */
static void sweep_core(group *g) {
    int i = 0;
    for (int t = 0; t < 2; t++)
        for (int hh = 0; hh < 3; hh++)
            for (int di = 0; di < 6; di++)
                for (int sc = 0; sc < 2; sc++)
                    for (int mask = 0; mask < 4; mask++, i++) {
                        cfg c = cfg_base();
                        c.dt = DTYPES[t];
                        set_heads(&c, hh);
                        set_dims(&c, di);
                        c.softcap = sc ? 2.0f : 0;
                        set_mask(&c, mask);
                        set_pair(&c, i % N_PAIRS);
                        c.alibi = i % 5 == 2 ? 1 + (i / 5) % 2 : 0;
                        c.sinks = i % 7 == 3;
                        c.scale = i % 11 == 4 ? 0.37f : 0;
                        c.lse = i % 4 != 1;
                        c.splits[0] = split_of(i);
                        run_case(g, &c);
                    }
}

/* Every seqlen pair x causal x dtype, d and heads rotating: the tile edges of each length. */
static void sweep_seqlens(group *g) {
    int i = 0;
    for (int p = 0; p < N_PAIRS; p++)
        for (int causal = 0; causal < 2; causal++)
            for (int t = 0; t < 2; t++, i++) {
                cfg c = cfg_base();
                c.dt = DTYPES[t];
                set_heads(&c, i);
                set_dims(&c, i);
                c.causal = causal;
                set_pair(&c, p);
                c.splits[0] = split_of(i);
                run_case(g, &c);
            }
}

/* ALiBi ((h_q) and (b, h_q)) x sinks x mask x dtype. */
static void sweep_alibi_sinks(group *g) {
    static const int pairs[][2] = {{17, 17}, {5, 70}, {70, 5}, {1, 130}, {130, 257}};
    int i = 0;
    for (int t = 0; t < 2; t++)
        for (int alibi = 0; alibi < 3; alibi++)
            for (int sinks = 0; sinks < 2; sinks++)
                for (int mask = 0; mask < 4; mask++) {
                    if (!alibi && !sinks) continue;
                    cfg c = cfg_base();
                    c.dt = DTYPES[t];
                    set_heads(&c, i);
                    set_dims(&c, i);
                    c.alibi = alibi;
                    c.sinks = sinks;
                    set_mask(&c, mask);
                    c.softcap = i % 3 == 1 ? 2.0f : 0;
                    c.s_q = pairs[i % 5][0];
                    c.s_k = pairs[i % 5][1];
                    c.splits[0] = split_of(i);
                    i++;
                    run_case(g, &c);
                }
}

/* d_v != d: (192, 128), which the GPU supports, and pairs it may not (then SKIPPED). */
static void sweep_dv(group *g) {
    static const int dd[][2] = {{192, 128}, {192, 128}, {128, 64}, {64, 256}};
    int i = 0;
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 4; k++)
            for (int causal = 0; causal < 2; causal++, i++) {
                cfg c = cfg_base();
                c.dt = DTYPES[t];
                set_heads(&c, i);
                c.d = dd[k][0];
                c.d_v = dd[k][1];
                c.causal = causal;
                c.s_q = k == 1 ? 300 : i % 2 ? 37 : 91;
                c.s_k = k == 1 ? 411 : i % 2 ? 91 : 37;
                if (k == 1) c.b = 1;
                c.splits[0] = split_of(i);
                run_case(g, &c);
            }
}

/* Paged KV: page sizes 1, 3, 16, 64, 256 over a shuffled page table; dense and varlen queries. */
static void sweep_paged(group *g) {
    static const int sizes[5] = {1, 3, 16, 64, 256};
    int i = 0;
    for (int p = 0; p < 5; p++)
        for (int qv = 0; qv < 2; qv++)
            for (int mask = 0; mask < 2; mask++)
                for (int t = 0; t < 2; t++, i++) {
                    cfg c = cfg_base();
                    c.dt = DTYPES[t];
                    c.b = 3;
                    set_heads(&c, i);
                    set_dims(&c, i);
                    c.kv = KV_PAGED;
                    c.page_size = sizes[p];
                    c.seqused = 1 + (i % 2);
                    c.q_varlen = qv;
                    set_mask(&c, mask ? 3 : 0);
                    c.s_q = qv ? 20 : (i % 3 == 0 ? 1 : 13);
                    c.s_k = sizes[p] == 256 ? 700 : 300;
                    c.sinks = i % 5 == 2;
                    c.nsplits = 3, c.splits[0] = 1, c.splits[1] = 3, c.splits[2] = 0;
                    run_case(g, &c);
                }
}

/* Varlen q and/or k with empty sequences, seqused_k, every split count. */
static void sweep_varlen(group *g) {
    static const int modes[3][2] = {{1, KV_DENSE}, {0, KV_VARLEN}, {1, KV_VARLEN}};
    int i = 0;
    for (int m = 0; m < 3; m++)
        for (int used = 0; used < 3; used++)
            for (int mask = 0; mask < 3; mask++, i++) {
                cfg c = cfg_base();
                c.dt = DTYPES[i % 2];
                c.b = 5;
                set_heads(&c, i);
                set_dims(&c, i);
                c.q_varlen = modes[m][0];
                c.kv = modes[m][1];
                c.seqused = used;
                set_mask(&c, mask);
                c.s_q = i % 2 ? 37 : 150;
                c.s_k = i % 2 ? 161 : 130;
                c.lse = i % 4 != 3;
                c.nsplits = 3, c.splits[0] = 1, c.splits[1] = 3, c.splits[2] = 0;
                run_case(g, &c);
            }
}

/* Splits 1, 3, auto on decode and prefill shapes, each against the references and each other. */
static void sweep_splits(group *g) {
    for (int k = 0; k < 8; k++) {
        cfg c = cfg_base();
        c.dt = DTYPES[k % 2];
        c.nsplits = 3, c.splits[0] = 1, c.splits[1] = 3, c.splits[2] = 0;
        set_heads(&c, k);
        set_dims(&c, k + 2);
        switch (k % 4) {
        case 0: c.b = 1, c.s_q = 1, c.s_k = 3000; break;
        case 1: c.s_q = 128, c.s_k = 1500, c.causal = 1; break;
        case 2: c.b = 4, c.q_varlen = 1, c.kv = KV_VARLEN, c.s_q = 9, c.s_k = 900, c.seqused = 2; break;
        default: c.b = 3, c.kv = KV_PAGED, c.page_size = 16, c.s_q = 4, c.s_k = 1200, c.seqused = 1, c.sinks = 1; break;
        }
        if (k >= 4) c.wl = 300, c.wr = 0, c.alibi = 2, c.softcap = 2;
        run_case(g, &c);
    }
}

/* Decode: s_q 1 (and 4), h_q 32 / h_k 8, d 128, s_k up to 8k, batch up to 8; dense and paged 16. */
static void sweep_decode(group *g) {
    static const int sk[3] = {1000, 4097, 8192}, bs[3] = {1, 8, 3};
    int i = 0;
    for (int kv = 0; kv < 2; kv++)
        for (int s = 0; s < 3; s++)
            for (int t = 0; t < 2; t++, i++) {
                cfg c = cfg_base();
                c.dt = DTYPES[t];
                c.b = bs[(i + s) % 3];
                c.h_q = 32, c.h_k = 8, c.d = c.d_v = 128;
                c.s_q = i % 4 == 3 ? 4 : 1;
                c.causal = c.s_q > 1;
                c.s_k = sk[s];
                c.kv = kv ? KV_PAGED : KV_DENSE;
                c.seqused = kv ? 1 + (i % 2) : i % 2;
                c.nsplits = 3, c.splits[0] = 1, c.splits[1] = 3, c.splits[2] = 0;
                run_case(g, &c);
            }
}

/* Append with rotary (interleaved, half-split; rotary_dim d and d/2; fp32 and input-dtype tables)
 * into dense and paged caches: the device cache must equal the CPU's. */
static void sweep_append(group *g) {
    int i = 0;
    for (int cache = 0; cache < 3; cache++)
        for (int rot = 0; rot < 5; rot++)
            for (int sn = 0; sn < 2; sn++, i++) {
                cfg c = cfg_base();
                c.dt = DTYPES[i % 2];
                c.b = 3;
                set_heads(&c, i);
                set_dims(&c, i);
                c.kv = cache == 0 ? KV_DENSE : KV_PAGED;
                c.page_size = cache == 1 ? 16 : 3;
                c.s_k = 90 + 37 * (i % 3);
                c.s_new = sn ? 5 : 1;
                c.s_q = c.s_new;
                c.seqused = 1 + (i % 2);
                c.causal = i % 3 != 0;
                if (rot) {
                    c.rot_inter = rot <= 2;
                    c.rot_dim = rot % 2 ? c.d : c.d / 2;
                    c.rot_f32 = i % 2;
                }
                c.splits[0] = split_of(i);
                run_case(g, &c);
            }
}

/* Rows that see nothing (out 0, lse -inf or the sink), and cache rows past seqused_k holding NaN with
 * unused page-table entries -1: the kernels must not read them. */
static void sweep_masked(group *g) {
    for (int k = 0; k < 12; k++) {
        cfg c = cfg_base();
        c.dt = DTYPES[k % 2];
        set_heads(&c, k);
        set_dims(&c, k);
        switch (k % 6) {
        case 0: c.s_q = 40, c.s_k = 5, c.causal = 1; break;
        case 1: c.s_q = 40, c.s_k = 5, c.wl = 2, c.wr = 1; break;
        case 2: c.s_q = 5, c.s_k = 20, c.seqused = 2, c.causal = 1, c.b = 3; break;
        case 3: c.b = 3, c.s_q = 6, c.s_k = 50, c.kv = KV_VARLEN, c.causal = 1; break;
        case 4: c.s_q = 40, c.s_k = 5, c.causal = 1, c.sinks = 1; break;
        default: c.b = 3, c.s_q = 5, c.s_k = 150, c.seqused = 1, c.nan_unused = 1; break;
        }
        if (k >= 6 && k % 6 == 5) c.kv = KV_PAGED, c.page_size = k % 2 ? 16 : 1;
        if (k == 9) c.kv = KV_VARLEN, c.seqused = 1, c.nan_unused = 1, c.s_k = 150, c.b = 3;
        c.nsplits = 2, c.splits[0] = 1, c.splits[1] = 0;
        run_case(g, &c);
    }
}

/* Non-contiguous views: q/k/v slices of a packed qkv, padded strides (16-byte multiples). */
static void sweep_strides(group *g) {
    for (int i = 0; i < 8; i++) {
        cfg c = cfg_base();
        c.dt = DTYPES[i % 2];
        set_heads(&c, i);
        set_dims(&c, i % 5);
        c.causal = i % 2;
        c.s_q = c.s_k = i % 4 ? 45 : 130;
        if (i < 2) {
            c.layout = LAYOUT_PACKED;
        } else {
            c.layout = LAYOUT_PADDED;
            c.b = 3;
            switch (i % 3) {
            case 0: c.q_varlen = 1, c.kv = KV_VARLEN, c.seqused = 1; break;
            case 1: c.kv = KV_PAGED, c.page_size = 16, c.seqused = 1; break;
            default: c.kv = KV_PAGED, c.page_size = 5, c.s_new = 3, c.s_q = 3, c.rot_dim = 32, c.rot_inter = 1; break;
            }
        }
        c.splits[0] = i % 3 ? 0 : 1;
        run_case(g, &c);
    }
}

/* Random combinations of every axis at once (reproducible): catches interactions the sweeps miss. */
static void sweep_mixed(group *g) {
    static const int sq[6] = {1, 2, 5, 17, 64, 100}, sk[6] = {1, 3, 31, 64, 129, 250};
    static const int sizes[5] = {1, 3, 16, 64, 256}, splits[5] = {1, 3, 0, 2, 5};
    static const int heads[6][2] = {{2, 2}, {4, 2}, {3, 1}, {8, 1}, {6, 3}, {1, 1}};
    uint64_t r = 2025;
    for (int i = 0; i < 300; i++) {
        cfg c = cfg_base();
        c.dt = DTYPES[tu_randint(&r, 0, 1)];
        int hh = tu_randint(&r, 0, 5);
        c.h_q = heads[hh][0];
        c.h_k = heads[hh][1];
        set_dims(&c, tu_randint(&r, 0, 5));
        c.b = tu_randint(&r, 1, 5);
        c.s_q = sq[tu_randint(&r, 0, 5)];
        c.s_k = sk[tu_randint(&r, 0, 5)];
        set_mask(&c, tu_randint(&r, 0, 3));
        if (c.wr >= 0 && !c.causal) c.wl = tu_randint(&r, -1, 40), c.wr = tu_randint(&r, -1, 40);
        c.softcap = tu_randint(&r, 0, 2) ? 0 : 2.0f;
        c.scale = tu_randint(&r, 0, 4) ? 0 : 0.2f;
        c.alibi = tu_randint(&r, 0, 2);
        c.sinks = tu_randint(&r, 0, 3) == 0;
        c.lse = tu_randint(&r, 0, 3) != 0;
        c.kv = tu_randint(&r, 0, 2);
        c.page_size = sizes[tu_randint(&r, 0, 4)];
        c.q_varlen = tu_randint(&r, 0, 1);
        c.seqused = tu_randint(&r, 0, 2);
        if (c.kv != KV_VARLEN && !c.q_varlen && tu_randint(&r, 0, 3) == 0) {
            c.s_new = tu_randint(&r, 1, 4);
            if (c.s_k < c.s_new) c.s_k = c.s_new;
            if (tu_randint(&r, 0, 1)) {
                c.s_q = tu_randint(&r, 1, c.s_new); /* rotary: query positions >= 0 */
                c.rot_dim = tu_randint(&r, 0, 1) ? c.d : c.d / 2;
                c.rot_inter = tu_randint(&r, 0, 1);
                c.rot_f32 = tu_randint(&r, 0, 1);
            }
        }
        c.layout = tu_randint(&r, 0, 4) == 0 ? LAYOUT_PADDED : LAYOUT_CONTIG;
        c.nan_unused = tu_randint(&r, 0, 5) == 0;
        c.splits[0] = splits[tu_randint(&r, 0, 4)];
        run_case(g, &c);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* CUDA graph capture of a paged decode call with splits                                           */

static int graph_capture(const fc_attn_args *d, void *ws, size_t ws_bytes, cudaGraphExec_t *exec, fc_status *st,
                         char *msg, size_t n) {
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal);
    if (e != cudaSuccess) {
        snprintf(msg, n, "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
        return -1;
    }
    *st = fc_attn_fwd(d, ws, ws_bytes, g_stream);
    if (*st != FC_OK) snprintf(msg, n, "fc_attn_fwd under capture: %s: %s", fc_status_string(*st), fc_last_error());
    e = cudaStreamEndCapture(g_stream, &graph);
    if (*st != FC_OK) {
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        return -1;
    }
    if (e != cudaSuccess) {
        snprintf(msg, n, "cudaStreamEndCapture: %s", cudaGetErrorString(e));
        return -1;
    }
    e = cudaGraphInstantiate(exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        snprintf(msg, n, "cudaGraphInstantiate: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

/* Replays the graph after re-poisoning out/lse; 1 if out and lse equal the direct call's bytes. */
static int graph_replay_equal(prob *P, cudaGraphExec_t exec, const gpu_run *direct, const void *out_poison,
                              const void *lse_poison, char *msg, size_t n) {
    reg_upload(P, &P->out, out_poison);
    reg_upload(P, &P->lse, lse_poison);
    cudaError_t e = cudaGraphLaunch(exec, g_stream);
    if (e == cudaSuccess) e = dev_sync();
    if (e != cudaSuccess) {
        snprintf(msg, n, "cudaGraphLaunch: %s", cudaGetErrorString(e));
        return 0;
    }
    unsigned char *out = malloc(reg_bytes(&P->out)), *lse = malloc(reg_bytes(&P->lse));
    reg_download(P, &P->out, out);
    reg_download(P, &P->lse, lse);
    int same = !memcmp(out, direct->out, reg_bytes(&P->out)) && !memcmp(lse, direct->lse, reg_bytes(&P->lse));
    if (!same) snprintf(msg, n, "replay differs from the direct call");
    free(out);
    free(lse);
    return same;
}

static void sweep_graph(group *g) {
    if (g_fake) return;
    for (int k = 0; k < 2; k++) {
        cfg c = cfg_base();
        c.b = 4, c.s_q = 1, c.h_q = 32, c.h_k = 8, c.d = c.d_v = 128, c.s_k = 3000;
        c.kv = KV_PAGED, c.page_size = 16, c.seqused = 1;
        c.splits[0] = k ? 0 : 3;
        char desc[240];
        describe(&c, desc, sizeof desc);
        prob P;
        prob_build(&P, &c, ++g_seed * 0x9e3779b97f4a7c15ull);
        g->cases++;
        unsigned char *op = malloc(reg_bytes(&P.out)), *lp = malloc(reg_bytes(&P.lse));
        tu_poison(op, c.dt, P.out.n);
        tu_poison(lp, FC_FP32, P.lse.n);
        fc_attn_args d = mirror(&P);
        d.num_splits = c.splits[0];
        gpu_run direct;
        gpu_run_once(&P, &d, op, lp, NULL, NULL, &direct);
        if (direct.st == FC_ERR_UNSUPPORTED) {
            group_skip(g, direct.msg, desc);
        } else if (tu_check(direct.st == FC_OK, "graph [%s]: direct call: %s", desc, direct.msg)) {
            group_note(g, 1, 0, desc);
            size_t ws_bytes = 0;
            fc_attn_workspace_size(&d, &ws_bytes);
            void *ws = ws_bytes ? dev_alloc(ws_bytes) : NULL;
            cudaGraphExec_t exec = NULL;
            fc_status st = FC_OK;
            char msg[400] = "";
            int ok = graph_capture(&d, ws, ws_bytes, &exec, &st, msg, sizeof msg) == 0;
            if (!ok && st == FC_ERR_UNSUPPORTED) {
                group_skip(g, msg, desc);
            } else {
                tu_check(ok, "graph [%s]: capture: %s", desc, msg);
                group_note(g, ok, 0, desc);
                for (int rep = 0; ok && rep < 2; rep++) {
                    int same = graph_replay_equal(&P, exec, &direct, op, lp, msg, sizeof msg);
                    tu_check(same, "graph [%s]: replay %d: %s", desc, rep + 1, msg);
                    group_note(g, same, 0, desc);
                }
            }
            if (exec) cudaGraphExecDestroy(exec);
            dev_free(ws);
        } else {
            group_note(g, 0, 0, desc);
        }
        gpu_run_free(&direct);
        free(op);
        free(lp);
        prob_free(&P);
    }
}

/* ---------------------------------------------------------------------------------------------- */

typedef struct sweep {
    const char *name;
    void (*run)(group *);
} sweep;

/* 0 when a CUDA device is there (or FLASHC_GPU_FAKE stands in for one). */
static int setup_device(void) {
    if (g_fake) {
        printf("gpu_attn: FLASHC_GPU_FAKE=1: the CPU backend stands in for the GPU (harness self-test)\n");
        return 0;
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0 || !fc_cuda_available()) {
        printf("gpu_attn: no CUDA device (or flashc built without CUDA): GPU tests not run\n");
        return -1;
    }
    struct cudaDeviceProp prop;
    cuda_die(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    cuda_die(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    printf("gpu_attn: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    return 0;
}

int main(int argc, char **argv) {
    static const sweep sweeps[] = {
        {"core", sweep_core},     {"seqlens", sweep_seqlens}, {"alibi", sweep_alibi_sinks}, {"d_v", sweep_dv},
        {"paged", sweep_paged},   {"varlen", sweep_varlen},   {"splits", sweep_splits},     {"decode", sweep_decode},
        {"append", sweep_append}, {"masked", sweep_masked},   {"strides", sweep_strides},   {"mixed", sweep_mixed},
        {"graph", sweep_graph},
    };
    const char *only = argc > 1 ? argv[1] : NULL; /* optional: one group by name */
    g_quick = env_flag("FLASHC_GPU_QUICK") ? atoi(getenv("FLASHC_GPU_QUICK")) : 0;
    if (env_flag("FLASHC_GPU_QUICK") && g_quick < 2) g_quick = 1;
    g_fake = env_flag("FLASHC_GPU_FAKE");
    g_verbose = env_flag("FLASHC_GPU_VERBOSE");
    if (g_quick) g_ref_budget = 1e7;
    setvbuf(stdout, NULL, _IOLBF, 0);
    pool_init();
    if (setup_device()) return 2;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    fc_set_num_threads(cores > 16 ? 16 : cores > 0 ? (int)cores : 1);
    printf("gpu_attn: flashc %s, CPU threads %d", fc_version(), fc_get_num_threads());
    if (g_quick) printf(", quick sweep (every %d-th small case)", g_quick);
    printf("\n");
    double t0 = now_s();
    for (size_t i = 0; i < sizeof sweeps / sizeof sweeps[0]; i++) {
        if (only && strcmp(only, sweeps[i].name)) continue;
        group g;
        memset(&g, 0, sizeof g);
        g.name = sweeps[i].name;
        double t = now_s();
        sweeps[i].run(&g);
        group_print(&g, now_s() - t);
    }
    printf("worst ratio overall %.3f (pass <= 1); %d cases SKIPPED (unsupported by the CUDA backend, not passed); "
           "%.1fs\n", g_worst_ratio, g_total_skipped, now_s() - t0);
    if (!g_fake) cudaStreamDestroy(g_stream);
    return tu_finish();
}
