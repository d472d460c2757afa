/* flashc-bench.c — run attention shapes, time them, count TFLOP/s and GB/s, check against the float64 oracle. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flashc.h"
#include "../tests/ref64.h"
#include "../tests/testutil.h"

#ifdef FLASHC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---------------------------------------------------------------------------------------------- */
/* A benchmark case: one attention shape                                                           */

typedef struct bench_case {
    const char *name;
    int b, s_q, s_k, h_q, h_k, d, d_v;
    int causal, window_left, window_right;
    int page_size;           /* 0: dense KV */
    int splits;              /* 0: auto */
    float softcap;
    int alibi, sinks;
    fc_dtype dtype;
} bench_case;

typedef struct bench_opts {
    fc_device device;
    int iters, warmup;
    int check;               /* 1: compare sampled rows with the float64 oracle */
    int naive;               /* 1: also time the naive float64 loop (ref64) on the same shape */
    int json;
    int iters_set;           /* 1: --iters given (else the device's default: 5 CPU, 20 GPU) */
} bench_opts;

typedef struct bench_result {
    double ms, tflops, gbps, naive_ms;
    double max_err, err_ratio; /* NAN when not checked */
    fc_status status;
    int sets;                  /* GPU: input sets rotated through (K/V beyond L2) */
    int64_t nonfinite;         /* GPU: output elements left NaN/inf (every element is looked at) */
    char kernel[200];          /* what ran (fc_attn_describe) */
} bench_result;

static bench_case case_default(void) {
    bench_case c = {"custom", 1, 2048, 2048, 16, 16, 128, 128, 0, -1, -1, 0, 0, 0.0f, 0, 0, FC_BF16};
    return c;
}

/* Named shapes: the prefill and decode targets of docs/PERF.md. */
static const bench_case named_cases[] = {
    /* name            b   s_q    s_k    h_q h_k d    d_v  causal wl  wr  page splits softcap alibi sinks dtype */
    {"prefill-2k",      1, 2048,  2048,  16, 16, 128, 128, 0, -1, -1, 0,  0, 0, 0, 0, FC_BF16},
    {"prefill-2k-causal", 1, 2048, 2048, 16, 16, 128, 128, 1, -1, -1, 0, 0, 0, 0, 0, FC_BF16},
    {"prefill-gqa-1k",  2, 1024,  1024,  32, 8,  128, 128, 1, -1, -1, 0,  0, 0, 0, 0, FC_BF16},
    {"decode-8k-paged16", 8, 1,   8192,  32, 8,  128, 128, 0, -1, -1, 16, 0, 0, 0, 0, FC_BF16},
    {"decode-32k-paged16", 1, 1,  32768, 32, 8,  128, 128, 0, -1, -1, 16, 0, 0, 0, 0, FC_BF16},
    {"decode-8k-paged1", 8, 1,    8192,  32, 8,  128, 128, 0, -1, -1, 1,  0, 0, 0, 0, FC_BF16},
    /* the performance targets: paged decode, page 16, batch x context, h 32/8, d 128 */
#define DECODE(B, K, NAME, PS) {NAME, B, 1, K, 32, 8, 128, 128, 0, -1, -1, PS, 0, 0, 0, 0, FC_BF16}
    DECODE(1, 1024, "decode-p16-b1-1k", 16),     DECODE(1, 8192, "decode-p16-b1-8k", 16),
    DECODE(1, 32768, "decode-p16-b1-32k", 16),   DECODE(8, 1024, "decode-p16-b8-1k", 16),
    DECODE(8, 8192, "decode-p16-b8-8k", 16),     DECODE(8, 32768, "decode-p16-b8-32k", 16),
    DECODE(32, 1024, "decode-p16-b32-1k", 16),   DECODE(32, 8192, "decode-p16-b32-8k", 16),
    DECODE(32, 32768, "decode-p16-b32-32k", 16), DECODE(128, 1024, "decode-p16-b128-1k", 16),
    DECODE(128, 8192, "decode-p16-b128-8k", 16), DECODE(128, 32768, "decode-p16-b128-32k", 16),
    DECODE(8, 32768, "decode-p1-b8-32k", 1),     DECODE(8, 32768, "decode-p256-b8-32k", 256),
#undef DECODE
    /* prefill, d 128, h 16, 16k tokens in all: batch = 16k / seqlen */
#define PREFILL(S, C, NAME) {NAME, 16384 / S, S, S, 16, 16, 128, 128, C, -1, -1, 0, 0, 0, 0, 0, FC_BF16}
    PREFILL(2048, 0, "prefill-16k-s2k"),  PREFILL(2048, 1, "prefill-16k-s2k-causal"),
    PREFILL(4096, 0, "prefill-16k-s4k"),  PREFILL(4096, 1, "prefill-16k-s4k-causal"),
    PREFILL(8192, 0, "prefill-16k-s8k"),  PREFILL(8192, 1, "prefill-16k-s8k-causal"),
    PREFILL(16384, 0, "prefill-16k-s16k"), PREFILL(16384, 1, "prefill-16k-s16k-causal"),
#undef PREFILL
};
#define N_NAMED ((int)(sizeof named_cases / sizeof named_cases[0]))

static const char *demo_cases[] = {"prefill-2k", "prefill-2k-causal", "decode-8k-paged16"};

/* Named sets of shapes (--set): the performance targets. */
static int in_set(const char *set, const char *name) {
    if (!strcmp(set, "decode")) return !strncmp(name, "decode-p", 8);
    if (!strcmp(set, "prefill")) return !strncmp(name, "prefill-16k", 11);
    if (!strcmp(set, "perf")) return in_set("decode", name) || in_set("prefill", name);
    return 0;
}

static const bench_case *find_case(const char *name) {
    for (int i = 0; i < N_NAMED; i++)
        if (!strcmp(named_cases[i].name, name)) return &named_cases[i];
    return NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* Host buffers                                                                                     */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double rng_uniform(void) { /* xorshift64*, in [-1, 1) */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static void fill_random(void *p, int64_t n, fc_dtype dt) {
    for (int64_t i = 0; i < n; i++) {
        tu_store(p, dt, i, rng_uniform());
    }
}

/* Large arrays (GPU KV caches of many GB): blocks copied from a random pool at random offsets, at memcpy
 * speed. Still random and never all zeros; the blocks repeat values, which timing and checks don't mind. */
enum { POOL_N = 1 << 22, BLOCK_N = 4096 };

static void fill_random_fast(void *p, int64_t n, fc_dtype dt) {
    static void *pool[3];
    size_t es = fc_dtype_size(dt);
    if (!pool[dt]) {
        pool[dt] = malloc((size_t)POOL_N * es);
        if (!pool[dt]) { fprintf(stderr, "flashc-bench: out of memory\n"); exit(2); }
        fill_random(pool[dt], POOL_N, dt);
    }
    for (int64_t i = 0; i < n; i += BLOCK_N) {
        int64_t m = n - i < BLOCK_N ? n - i : BLOCK_N;
        int64_t from = (int64_t)((rng_uniform() + 1.0) * 0.5 * (POOL_N - BLOCK_N));
        memcpy((char *)p + (size_t)i * es, (char *)pool[dt] + (size_t)from * es, (size_t)m * es);
    }
}

static void *alloc_random(int64_t n, fc_dtype dt) {
    size_t es = fc_dtype_size(dt);
    void *p = malloc((size_t)n * es + 64);
    if (!p) { fprintf(stderr, "flashc-bench: out of memory (%lld elements)\n", (long long)n); exit(2); }
    if (n > 4 * (int64_t)POOL_N) fill_random_fast(p, n, dt);
    else fill_random(p, n, dt);
    return p;
}

typedef struct bench_buffers {
    void *q, *k, *v, *out;
    float *lse, *alibi, *sinks;
    int32_t *page_table, *seqused;
} bench_buffers;

/* Pages of every sequence, shuffled so the cache is read out of order as in a real server. */
static int32_t *make_page_table(int b, int pages_per_seq) {
    int64_t n = (int64_t)b * pages_per_seq;
    int32_t *t = malloc((size_t)n * sizeof *t);
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)((rng_uniform() + 1.0) * 0.5 * (double)(i + 1)) % (i + 1);
        int32_t tmp = t[i]; t[i] = t[j]; t[j] = tmp;
    }
    return t;
}

static void setup_args(const bench_case *c, const bench_opts *o, bench_buffers *buf, fc_attn_args *a) {
    fc_attn_args_init(a);
    a->device = o->device;
    int64_t q_n = (int64_t)c->b * c->s_q * c->h_q;
    buf->q = alloc_random(q_n * c->d, c->dtype);
    buf->out = alloc_random(q_n * c->d_v, c->dtype);
    buf->lse = malloc((size_t)q_n * sizeof(float));
    a->q = fc_tensor_4d(buf->q, c->dtype, c->b, c->s_q, c->h_q, c->d);
    a->out = fc_tensor_4d(buf->out, c->dtype, c->b, c->s_q, c->h_q, c->d_v);
    a->lse = fc_tensor_3d(buf->lse, FC_FP32, c->b, c->h_q, c->s_q);
    if (c->page_size > 0) {
        int pages_per_seq = (c->s_k + c->page_size - 1) / c->page_size;
        int64_t pages = (int64_t)c->b * pages_per_seq, rows = pages * c->page_size * c->h_k;
        buf->k = alloc_random(rows * c->d, c->dtype);
        buf->v = alloc_random(rows * c->d_v, c->dtype);
        buf->page_table = make_page_table(c->b, pages_per_seq);
        buf->seqused = malloc((size_t)c->b * sizeof(int32_t));
        for (int i = 0; i < c->b; i++) buf->seqused[i] = c->s_k;
        a->k = fc_tensor_4d(buf->k, c->dtype, pages, c->page_size, c->h_k, c->d);
        a->v = fc_tensor_4d(buf->v, c->dtype, pages, c->page_size, c->h_k, c->d_v);
        a->page_table = fc_tensor_2d(buf->page_table, FC_INT32, c->b, pages_per_seq);
        a->seqused_k = fc_tensor_1d(buf->seqused, FC_INT32, c->b);
    } else {
        int64_t rows = (int64_t)c->b * c->s_k * c->h_k;
        buf->k = alloc_random(rows * c->d, c->dtype);
        buf->v = alloc_random(rows * c->d_v, c->dtype);
        a->k = fc_tensor_4d(buf->k, c->dtype, c->b, c->s_k, c->h_k, c->d);
        a->v = fc_tensor_4d(buf->v, c->dtype, c->b, c->s_k, c->h_k, c->d_v);
    }
    if (c->alibi) {
        buf->alibi = malloc((size_t)c->h_q * sizeof(float));
        for (int h = 0; h < c->h_q; h++) buf->alibi[h] = powf(2.0f, -8.0f * (h + 1) / c->h_q);
        a->alibi_slopes = fc_tensor_1d(buf->alibi, FC_FP32, c->h_q);
    }
    if (c->sinks) {
        buf->sinks = malloc((size_t)c->h_q * sizeof(float));
        for (int h = 0; h < c->h_q; h++) buf->sinks[h] = (float)rng_uniform();
        a->sinks = fc_tensor_1d(buf->sinks, FC_FP32, c->h_q);
    }
    a->causal = c->causal;
    a->window_left = c->window_left;
    a->window_right = c->window_right;
    a->softcap = c->softcap;
    a->num_splits = c->splits;
}

static void free_buffers(bench_buffers *b) {
    free(b->q); free(b->k); free(b->v); free(b->out); free(b->lse);
    free(b->alibi); free(b->sinks); free(b->page_table); free(b->seqused);
}

/* ---------------------------------------------------------------------------------------------- */
/* Counting and timing                                                                              */

/* Visible (query, key) pairs of one head of one sequence under the case's mask. */
static double visible_pairs(const bench_case *c) {
    int wl = c->window_left, wr = c->causal ? 0 : c->window_right, off = c->s_k - c->s_q;
    double pairs = 0;
    for (int i = 0; i < c->s_q; i++) {
        long lo = wl >= 0 ? i + off - wl : 0, hi = wr >= 0 ? i + off + wr : c->s_k - 1;
        if (lo < 0) lo = 0;
        if (hi > c->s_k - 1) hi = c->s_k - 1;
        if (hi >= lo) pairs += (double)(hi - lo + 1);
    }
    return pairs;
}

/* FLOPs: 2 per multiply-add in Q·K^T (d) and P·V (d_v), over visible pairs. */
static double case_flops(const bench_case *c) { return 2.0 * visible_pairs(c) * (c->d + c->d_v) * c->h_q * c->b; }

/* Bytes of K and V read once (docs/PERF.md's count: what bounds decode). */
static double case_bytes(const bench_case *c) {
    double es = (double)fc_dtype_size(c->dtype);
    return es * (double)c->b * c->s_k * c->h_k * (c->d + c->d_v);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median wall time of o->iters runs after o->warmup runs; status of the first failure, if any. */
static fc_status time_runs(const fc_attn_args *a, const bench_opts *o, double *median_ms) {
    for (int i = 0; i < o->warmup; i++) {
        fc_status st = fc_attn_fwd(a, NULL, 0, NULL);
        if (st != FC_OK) return st;
    }
    double *t = malloc((size_t)o->iters * sizeof *t);
    for (int i = 0; i < o->iters; i++) {
        double t0 = now_ms();
        fc_status st = fc_attn_fwd(a, NULL, 0, NULL);
        t[i] = now_ms() - t0;
        if (st != FC_OK) { free(t); return st; }
    }
    qsort(t, (size_t)o->iters, sizeof *t, cmp_double);
    *median_ms = t[o->iters / 2];
    free(t);
    return FC_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Checking against the oracle (a sample of rows: every row_step-th)                                */

/* FlashAttention's rule on the sampled rows: ratio = max|out-ref| / (2 max|ref_lowp-ref| + 1e-5). */
static void check_case(const bench_case *c, const fc_attn_args *a, bench_result *r) {
    int64_t rows = ref64_total_q(a), n = rows * c->h_q * c->d_v;
    int row_step = (int)(rows / 16 > 1 ? rows / 16 : 1);
    double *ref = malloc((size_t)n * sizeof *ref), *low = malloc((size_t)n * sizeof *low);
    double *lse = malloc((size_t)rows * c->h_q * sizeof *lse), *lse_low = malloc((size_t)rows * c->h_q * sizeof *lse);
    if (ref64_pair(a, row_step, ref, lse, low, lse_low, NULL)) {
        r->max_err = r->err_ratio = NAN;
    } else {
        double err = 0, err_low = 0;
        for (int64_t row = 0; row < rows; row += row_step)
            for (int64_t i = row * c->h_q * c->d_v; i < (row + 1) * c->h_q * c->d_v; i++) {
                double e = fabs(tu_load(a->out.data, c->dtype, i) - ref[i]);
                if (!(e <= err)) err = e; /* NaN propagates */
                double el = fabs(low[i] - ref[i]);
                if (el > err_low) err_low = el;
            }
        r->max_err = err;
        r->err_ratio = err / (2 * err_low + 1e-5);
    }
    free(ref); free(low); free(lse); free(lse_low);
}

static double time_naive(const fc_attn_args *a, int64_t rows, int h_q, int d_v) {
    double *ref = malloc((size_t)rows * h_q * d_v * sizeof *ref), *lse = malloc((size_t)rows * h_q * sizeof *lse);
    double t0 = now_ms();
    ref64_attn(a, 1, 0, ref, lse);
    double ms = now_ms() - t0;
    free(ref); free(lse);
    return ms;
}

/* ---------------------------------------------------------------------------------------------- */
/* The CUDA path: device copies of the inputs, sets rotated beyond L2, cudaEvent timing             */

#ifdef FLASHC_HAVE_CUDA
static cudaStream_t g_stream;
static size_t g_l2_bytes;

static void cuda_or_die(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "flashc-bench: %s: %s\n", what, cudaGetErrorString(e));
    exit(2);
}
#define CK(call) cuda_or_die((call), #call)

/* The stream and the device's L2 size; one line about the device (not with --json). */
static void cuda_init(const bench_opts *o) {
    static int done;
    if (done) return;
    done = 1;
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    g_l2_bytes = (size_t)prop.l2CacheSize;
    if (!o->json)
        printf("GPU: %s, %d SMs, L2 %.0f MB; timing: cudaEvents on a stream, median of %d samples after %d warm-up\n",
               prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6, o->iters, o->warmup);
}

/* Bytes spanned by a contiguous tensor (0 when absent). */
static size_t tensor_bytes(const fc_tensor *t) {
    if (!t->data) return 0;
    return (size_t)(t->shape[0] * t->stride[0]) * fc_dtype_size(t->dtype);
}

static void *dev_alloc(size_t n) {
    void *p = NULL;
    CK(cudaMalloc(&p, n ? n : 256));
    return p;
}

/* One set of device inputs. q, k, v differ between sets (so that rotating through them reads memory
 * the L2 does not hold); out, lse, page table, seqused, ALiBi, sinks belong to set 0 and are shared. */
typedef struct dev_set {
    fc_attn_args a;
} dev_set;

/* Every tensor of a (host) copied to the device: set 0. */
static void dev_set_first(const fc_attn_args *host, dev_set *s) {
    s->a = *host;
    s->a.device = FC_DEVICE_CUDA;
    fc_tensor *t[] = {&s->a.q, &s->a.k, &s->a.v, &s->a.out, &s->a.lse, &s->a.page_table, &s->a.seqused_k,
                      &s->a.alibi_slopes, &s->a.sinks};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (!t[i]->data) continue;
        size_t n = tensor_bytes(t[i]);
        void *d = dev_alloc(n);
        CK(cudaMemcpy(d, t[i]->data, n, cudaMemcpyHostToDevice));
        t[i]->data = d;
    }
}

/* Set s: fresh q, k, v (device copies of set 0's), the rest shared with set 0. */
static void dev_set_more(const dev_set *first, dev_set *s) {
    s->a = first->a;
    fc_tensor *t[] = {&s->a.q, &s->a.k, &s->a.v};
    for (int i = 0; i < 3; i++) {
        size_t n = tensor_bytes(t[i]);
        void *d = dev_alloc(n);
        CK(cudaMemcpy(d, t[i]->data, n, cudaMemcpyDeviceToDevice));
        t[i]->data = d;
    }
}

static void dev_sets_free(dev_set *sets, int n) {
    for (int s = 0; s < n; s++) {
        fc_tensor *t[] = {&sets[s].a.q, &sets[s].a.k, &sets[s].a.v, &sets[s].a.out, &sets[s].a.lse,
                          &sets[s].a.page_table, &sets[s].a.seqused_k, &sets[s].a.alibi_slopes, &sets[s].a.sinks};
        int count = s == 0 ? (int)(sizeof t / sizeof t[0]) : 3;
        for (int i = 0; i < count; i++)
            if (t[i]->data) CK(cudaFree(t[i]->data));
    }
}

/* Enough sets that one pass over them reads at least 4x the L2 (1 for large shapes; at most 256). */
static int sets_needed(const fc_attn_args *a) {
    double per = (double)(tensor_bytes(&a->q) + tensor_bytes(&a->k) + tensor_bytes(&a->v));
    double want = ceil(4.0 * (double)g_l2_bytes / (per > 0 ? per : 1));
    return want < 1 ? 1 : want > 256 ? 256 : (int)want;
}

#ifdef FC_TRACE
void fc_cuda_trace_print(void);
#endif
/* Median over o->iters samples of (event time of one pass over the sets) / sets, after o->warmup passes. */
static fc_status time_cuda(const dev_set *sets, int nsets, void *ws, size_t ws_bytes, const bench_opts *o,
                           double *median_ms) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double *t = malloc((size_t)o->iters * sizeof *t);
    fc_status st = FC_OK;
    for (int i = -o->warmup; i < o->iters && st == FC_OK; i++) {
        CK(cudaEventRecord(e0, g_stream));
        for (int s = 0; s < nsets && st == FC_OK; s++) st = fc_attn_fwd(&sets[s].a, ws, ws_bytes, g_stream);
        CK(cudaEventRecord(e1, g_stream));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 0) t[i] = ms / nsets;
    }
    if (st == FC_OK) {
        qsort(t, (size_t)o->iters, sizeof *t, cmp_double);
        *median_ms = t[o->iters / 2];
    }
#ifdef FC_TRACE
    fc_cuda_trace_print(); /* the last call's per-CTA timeline (a -DFC_TRACE build) */
#endif
    free(t);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return st;
}

/* The first (up to) two sequences of a dense or paged problem: what the oracle checks on the GPU path
 * (its cost grows with every sequence's whole cache). */
static fc_attn_args first_sequences(const fc_attn_args *a, int b) {
    fc_attn_args s = *a;
    int n = b < 2 ? b : 2;
    s.q.shape[0] = s.out.shape[0] = n;
    if (s.lse.data) s.lse.shape[0] = n;
    if (s.page_table.data) {
        s.page_table.shape[0] = n;
        s.seqused_k.shape[0] = n;
    } else {
        s.k.shape[0] = s.v.shape[0] = n;
    }
    if (s.alibi_slopes.data && s.alibi_slopes.ndim == 2) s.alibi_slopes.shape[0] = n;
    s.device = FC_DEVICE_CPU;
    return s;
}

/* One more run on set 0 with out/lse poisoned (NaN), copied back: every element must be finite, and
 * the first sequences are checked against the oracle. */
static void check_cuda(const bench_case *c, const fc_attn_args *host, const dev_set *s0, void *ws, size_t ws_bytes,
                       bench_result *r) {
    size_t ob = tensor_bytes(&host->out), lb = tensor_bytes(&host->lse);
    CK(cudaMemsetAsync(s0->a.out.data, 0xff, ob, g_stream));
    if (lb) CK(cudaMemsetAsync(s0->a.lse.data, 0xff, lb, g_stream));
    r->status = fc_attn_fwd(&s0->a, ws, ws_bytes, g_stream);
    CK(cudaStreamSynchronize(g_stream));
    if (r->status != FC_OK) return;
    CK(cudaMemcpy(host->out.data, s0->a.out.data, ob, cudaMemcpyDeviceToHost));
    if (lb) CK(cudaMemcpy(host->lse.data, s0->a.lse.data, lb, cudaMemcpyDeviceToHost));
    int64_t n = (int64_t)(ob / fc_dtype_size(c->dtype));
    r->nonfinite = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(tu_load(host->out.data, c->dtype, i))) r->nonfinite++;
    fc_attn_args sub = first_sequences(host, c->b);
    check_case(c, &sub, r);
    if (r->nonfinite) r->err_ratio = INFINITY;
}

static bench_result run_case_cuda(const bench_case *c, const bench_opts *o) {
    bench_result r = {NAN, NAN, NAN, NAN, NAN, NAN, FC_OK, 0, 0, ""};
    cuda_init(o);
    bench_buffers buf = {0};
    fc_attn_args a;
    setup_args(c, o, &buf, &a);
    int nsets = sets_needed(&a);
    dev_set *sets = calloc((size_t)nsets, sizeof *sets);
    dev_set_first(&a, &sets[0]);
    for (int s = 1; s < nsets; s++) dev_set_more(&sets[0], &sets[s]);
    CK(cudaDeviceSynchronize());
    r.sets = nsets;
    size_t ws_bytes = 0;
    void *ws = NULL;
    r.status = fc_attn_workspace_size(&sets[0].a, &ws_bytes);
    if (r.status == FC_OK) r.status = fc_attn_describe(&sets[0].a, r.kernel, sizeof r.kernel);
    if (r.status == FC_OK && ws_bytes) ws = dev_alloc(ws_bytes);
    if (r.status == FC_OK) r.status = time_cuda(sets, nsets, ws, ws_bytes, o, &r.ms);
    if (r.status == FC_OK) {
        r.tflops = case_flops(c) / (r.ms * 1e-3) / 1e12;
        r.gbps = case_bytes(c) / (r.ms * 1e-3) / 1e9;
        if (o->check) check_cuda(c, &a, &sets[0], ws, ws_bytes, &r);
        if (o->naive && r.status == FC_OK) r.naive_ms = time_naive(&a, ref64_total_q(&a), c->h_q, c->d_v);
    }
    if (ws) CK(cudaFree(ws));
    dev_sets_free(sets, nsets);
    free(sets);
    free_buffers(&buf);
    return r;
}

/* 1 if the CUDA forward runs: a tiny probe (b 1, s_q 1, s_k 16, h 1, d 64, bf16). Otherwise 0, with the
 * reason in why. */
static int cuda_forward_works(char *why, size_t n) {
    if (!fc_cuda_available()) {
        snprintf(why, n, "no CUDA device");
        return 0;
    }
    size_t qb = 64 * 2, kb = 16 * 64 * 2;
    void *q = dev_alloc(qb), *k = dev_alloc(kb), *v = dev_alloc(kb), *out = dev_alloc(qb), *ws = NULL;
    CK(cudaMemset(q, 0x3c, qb)); /* 0x3c3c: about 0.0115 in bf16 */
    CK(cudaMemset(k, 0x3c, kb));
    CK(cudaMemset(v, 0x3c, kb));
    fc_attn_args a;
    fc_attn_args_init(&a);
    a.device = FC_DEVICE_CUDA;
    a.q = fc_tensor_4d(q, FC_BF16, 1, 1, 1, 64);
    a.k = fc_tensor_4d(k, FC_BF16, 1, 16, 1, 64);
    a.v = fc_tensor_4d(v, FC_BF16, 1, 16, 1, 64);
    a.out = fc_tensor_4d(out, FC_BF16, 1, 1, 1, 64);
    size_t ws_bytes = 0;
    fc_status st = fc_attn_workspace_size(&a, &ws_bytes);
    if (st == FC_OK && ws_bytes) ws = dev_alloc(ws_bytes);
    if (st == FC_OK) st = fc_attn_fwd(&a, ws, ws_bytes, NULL);
    if (st != FC_OK) snprintf(why, n, "%s: %s", fc_status_string(st), fc_last_error());
    cudaError_t e = cudaDeviceSynchronize();
    if (st == FC_OK && e != cudaSuccess) snprintf(why, n, "%s", cudaGetErrorString(e));
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(out); cudaFree(ws);
    return st == FC_OK && e == cudaSuccess;
}
#else
static void cuda_init(const bench_opts *o) {}

static bench_result run_case_cuda(const bench_case *c, const bench_opts *o) {
    bench_result r = {NAN, NAN, NAN, NAN, NAN, NAN, FC_ERR_NO_DEVICE, 0, 0, ""};
    return r;
}

static int cuda_forward_works(char *why, size_t n) {
    snprintf(why, n, "this flashc-bench was built without CUDA");
    return 0;
}
#endif

static bench_result run_case(const bench_case *c, const bench_opts *o) {
    if (o->device == FC_DEVICE_CUDA) return run_case_cuda(c, o);
    bench_result r = {NAN, NAN, NAN, NAN, NAN, NAN, FC_OK, 0, 0, ""};
    bench_buffers buf = {0};
    fc_attn_args a;
    setup_args(c, o, &buf, &a);
    r.status = fc_attn_describe(&a, r.kernel, sizeof r.kernel);
    if (r.status == FC_OK) r.status = time_runs(&a, o, &r.ms);
    if (r.status == FC_OK) {
        r.tflops = case_flops(c) / (r.ms * 1e-3) / 1e12;
        r.gbps = case_bytes(c) / (r.ms * 1e-3) / 1e9;
        if (o->check) check_case(c, &a, &r);
        if (o->naive) r.naive_ms = time_naive(&a, ref64_total_q(&a), c->h_q, c->d_v);
    }
    free_buffers(&buf);
    return r;
}

/* ---------------------------------------------------------------------------------------------- */
/* Output                                                                                           */

static const char *dtype_str(fc_dtype dt) { return dt == FC_BF16 ? "bf16" : dt == FC_FP16 ? "fp16" : "fp32"; }

static void print_header(const bench_opts *o) {
    if (o->json) return;
    printf("%-24s %-4s %4s %6s %6s %4s %4s %4s %4s %6s %9s %9s %8s %10s %8s %5s\n", "case", "dev", "b", "s_q", "s_k", "h_q",
           "h_k", "d", "page", "causal", "ms", "TFLOP/s", "GB/s", "max_err", "ratio", "check");
}

/* x in fmt, or null when it is not finite (JSON has no NaN). */
static const char *json_num(char *buf, const char *fmt, double x) {
    if (isfinite(x)) snprintf(buf, 32, fmt, x);
    else snprintf(buf, 32, "null");
    return buf;
}

/* The check of a run against the float64 oracle: "pass" (ratio <= 1), "FAIL", or "-" (--no-check). */
static const char *check_word(const bench_opts *o, const bench_result *r) {
    if (!o->check) return "-";
    return r->err_ratio <= 1.0 ? "pass" : "FAIL";
}

static void print_result(const bench_case *c, const bench_opts *o, const bench_result *r) {
    const char *dev = o->device == FC_DEVICE_CUDA ? "cuda" : "cpu";
    if (r->status != FC_OK) {
        if (o->json)
            printf("{\"case\":\"%s\",\"device\":\"%s\",\"status\":\"%s\",\"error\":\"%s\"}\n", c->name, dev,
                   fc_status_string(r->status), fc_last_error());
        else
            printf("%-24s %-4s failed: %s: %s\n", c->name, dev, fc_status_string(r->status), fc_last_error());
        return;
    }
    if (o->json) {
        char err[32], ratio[32], naive[32];
        printf("{\"case\":\"%s\",\"device\":\"%s\",\"dtype\":\"%s\",\"b\":%d,\"s_q\":%d,\"s_k\":%d,\"h_q\":%d,\"h_k\":%d,"
               "\"d\":%d,\"d_v\":%d,\"page_size\":%d,\"causal\":%d,\"ms\":%.4f,\"tflops\":%.6f,\"gbps\":%.3f,"
               "\"max_err\":%s,\"err_ratio\":%s,\"check\":\"%s\",\"naive_ms\":%s,\"sets\":%d,\"nonfinite\":%lld,"
               "\"kernel\":\"%s\"}\n",
               c->name, dev, dtype_str(c->dtype), c->b, c->s_q, c->s_k, c->h_q, c->h_k, c->d, c->d_v, c->page_size,
               c->causal, r->ms, r->tflops, r->gbps, json_num(err, "%.3e", r->max_err),
               json_num(ratio, "%.4f", r->err_ratio), check_word(o, r), json_num(naive, "%.2f", r->naive_ms), r->sets,
               (long long)r->nonfinite, r->kernel);
        return;
    }
    printf("%-24s %-4s %4d %6d %6d %4d %4d %4d %4d %6d %9.4f %9.4f %8.2f %10.2e %8.3f %5s\n", c->name, dev, c->b, c->s_q,
           c->s_k, c->h_q, c->h_k, c->d, c->page_size, c->causal, r->ms, r->tflops, r->gbps, r->max_err, r->err_ratio,
           check_word(o, r));
    printf("%-24s %s\n", "", r->kernel);
    if (r->nonfinite)
        printf("%-20s %lld output elements not finite (left unwritten, or NaN)\n", "", (long long)r->nonfinite);
    if (o->naive && !isnan(r->naive_ms))
        printf("%-24s naive float64 loop: %.1f ms = %.3f GFLOP/s (flashc %.1fx faster)\n", "", r->naive_ms,
               case_flops(c) / (r->naive_ms * 1e-3) / 1e9, r->naive_ms / r->ms);
}

/* ---------------------------------------------------------------------------------------------- */
/* Command line                                                                                     */

static void usage(void) {
    printf("usage: flashc-bench [options]\n"
           "  --demo                 the demo set (GPU if present, else CPU)\n"
           "  --shape NAME           a named shape (--list shows them); repeatable\n"
           "  --sweep                every named shape\n"
           "  --set decode|prefill|perf   the performance targets: paged decode, 16k-token prefill, both\n"
           "  --list                 list named shapes\n"
           "  --b N --sq N --sk N --hq N --hk N --d N --dv N   a custom shape\n"
           "  --dtype bf16|fp16|fp32 --causal --window L,R --softcap C --alibi --sinks\n"
           "  --page-size N          paged KV cache with this page size (0: dense)\n"
           "  --splits N             num_splits (0: auto)\n"
           "  --device cpu|cuda      backend (default: cpu); cuda: device buffers, cudaEvent timing, input\n"
           "                         sets rotated so K/V exceed the L2, oracle check of the first 2 sequences\n"
           "  --iters N --warmup N   timing (default 5, 1 on the CPU; 20, 3 on the GPU)\n"
           "  --no-check             skip the float64 oracle check\n"
           "  --naive                also time the naive float64 loop on the shape\n"
           "  --threads N            CPU worker threads\n"
           "  --json                 one JSON object per line\n"
           "GB/s counts K and V read once; TFLOP/s counts 2 FLOPs per multiply-add of QK^T and PV over visible pairs.\n");
}

static fc_dtype parse_dtype(const char *s) {
    if (!strcmp(s, "fp16")) return FC_FP16;
    if (!strcmp(s, "fp32")) return FC_FP32;
    if (!strcmp(s, "bf16")) return FC_BF16;
    fprintf(stderr, "flashc-bench: unknown dtype %s\n", s);
    exit(2);
}

static const char *need_value(int argc, char **argv, int i) {
    if (i + 1 >= argc) { fprintf(stderr, "flashc-bench: %s needs a value\n", argv[i]); exit(2); }
    return argv[i + 1];
}

/* The value of option `opt` as an int in [lo, hi]: the whole text a decimal number, else exit 2. */
static int parse_int(const char *opt, const char *text, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(text, &end, 10);
    if (end == text || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "flashc-bench: %s: \"%s\" is not an integer in [%ld, %ld]\n", opt, text, lo, hi);
        exit(2);
    }
    return (int)x;
}

/* The value of option `opt` as a finite float: the whole text a number, else exit 2. */
static float parse_float(const char *opt, const char *text) {
    char *end;
    errno = 0;
    double x = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(x) || fabs(x) > 3.4e38) {
        fprintf(stderr, "flashc-bench: %s: \"%s\" is not a finite number\n", opt, text);
        exit(2);
    }
    return (float)x;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a row at a time, also into a pipe (a long run shows as it goes) */
    bench_opts o = {FC_DEVICE_CPU, 5, 1, 1, 0, 0, 0};
    int warmup_set = 0;
    bench_case custom = case_default();
    const bench_case *list[64];
    int n = 0, custom_set = 0, demo = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
#define VAL (need_value(argc, argv, i++))
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) { usage(); return 0; }
        else if (!strcmp(arg, "--list")) { for (int j = 0; j < N_NAMED; j++) printf("%s\n", named_cases[j].name); return 0; }
        else if (!strcmp(arg, "--demo")) demo = 1;
        else if (!strcmp(arg, "--sweep")) { for (int j = 0; j < N_NAMED && n < 64; j++) list[n++] = &named_cases[j]; }
        else if (!strcmp(arg, "--set")) {
            const char *set = VAL;
            int found = 0;
            for (int j = 0; j < N_NAMED && n < 64; j++)
                if (in_set(set, named_cases[j].name)) { list[n++] = &named_cases[j]; found = 1; }
            if (!found) { fprintf(stderr, "flashc-bench: unknown set %s (decode, prefill, perf)\n", set); return 2; }
        }
        else if (!strcmp(arg, "--shape")) {
            const char *name = VAL;
            const bench_case *c = find_case(name);
            if (!c) { fprintf(stderr, "flashc-bench: unknown shape %s (see --list)\n", name); return 2; }
            if (n < 64) list[n++] = c;
        }
        else if (!strcmp(arg, "--b")) { custom.b = parse_int(arg, VAL, 1, INT_MAX); custom_set = 1; }
        else if (!strcmp(arg, "--sq")) { custom.s_q = parse_int(arg, VAL, 0, INT_MAX); custom_set = 1; }
        else if (!strcmp(arg, "--sk")) { custom.s_k = parse_int(arg, VAL, 0, INT_MAX); custom_set = 1; }
        else if (!strcmp(arg, "--hq")) { custom.h_q = parse_int(arg, VAL, 1, INT_MAX); custom_set = 1; }
        else if (!strcmp(arg, "--hk")) { custom.h_k = parse_int(arg, VAL, 1, INT_MAX); custom_set = 1; }
        else if (!strcmp(arg, "--d")) { custom.d = custom.d_v = parse_int(arg, VAL, 1, INT_MAX); custom_set = 1; }
        else if (!strcmp(arg, "--dv")) { custom.d_v = parse_int(arg, VAL, 1, INT_MAX); custom_set = 1; }
        else if (!strcmp(arg, "--dtype")) { custom.dtype = parse_dtype(VAL); custom_set = 1; }
        else if (!strcmp(arg, "--causal")) { custom.causal = 1; custom_set = 1; }
        else if (!strcmp(arg, "--window")) {
            char extra;
            if (sscanf(VAL, "%d,%d%c", &custom.window_left, &custom.window_right, &extra) != 2) {
                fprintf(stderr, "flashc-bench: --window takes L,R (two integers)\n"); return 2;
            }
            custom_set = 1;
        }
        else if (!strcmp(arg, "--softcap")) { custom.softcap = parse_float(arg, VAL); custom_set = 1; }
        else if (!strcmp(arg, "--alibi")) { custom.alibi = 1; custom_set = 1; }
        else if (!strcmp(arg, "--sinks")) { custom.sinks = 1; custom_set = 1; }
        else if (!strcmp(arg, "--page-size")) { custom.page_size = parse_int(arg, VAL, 0, INT_MAX); custom_set = 1; }
        else if (!strcmp(arg, "--splits")) { custom.splits = parse_int(arg, VAL, 0, INT_MAX); custom_set = 1; }
        else if (!strcmp(arg, "--device")) {
            const char *d = VAL;
            if (!strcmp(d, "cuda")) o.device = FC_DEVICE_CUDA;
            else if (strcmp(d, "cpu")) { fprintf(stderr, "flashc-bench: unknown device %s\n", d); return 2; }
        }
        else if (!strcmp(arg, "--iters")) { o.iters = parse_int(arg, VAL, 1, INT_MAX); o.iters_set = 1; }
        else if (!strcmp(arg, "--warmup")) { o.warmup = parse_int(arg, VAL, 0, INT_MAX); warmup_set = 1; }
        else if (!strcmp(arg, "--no-check")) o.check = 0;
        else if (!strcmp(arg, "--naive")) o.naive = 1;
        else if (!strcmp(arg, "--json")) o.json = 1;
        else if (!strcmp(arg, "--threads")) {
            if (fc_set_num_threads(parse_int(arg, VAL, 0, INT_MAX)) != FC_OK) { fprintf(stderr, "flashc-bench: %s\n", fc_last_error()); return 2; }
        }
        else { fprintf(stderr, "flashc-bench: unknown option %s (see --help)\n", arg); return 2; }
#undef VAL
    }
    char why[400] = "";
    if (o.device == FC_DEVICE_CUDA) {
#ifndef FLASHC_HAVE_CUDA
        fprintf(stderr, "flashc-bench: --device cuda: this flashc-bench was built without CUDA (nvcc not found)\n");
        return 2;
#endif
        if (!fc_cuda_available()) {
            fprintf(stderr, "flashc-bench: --device cuda: no CUDA device visible, or flashc built without CUDA\n");
            return 2;
        }
    }
    if (demo) {
        if (cuda_forward_works(why, sizeof why)) {
            o.device = FC_DEVICE_CUDA;
        } else {
            if (fc_cuda_available() && !o.json)
                printf("(a GPU is present, but the CUDA forward answered \"%s\": the demo runs on the CPU)\n", why);
            if (!o.iters_set) o.iters = 3;
        }
        for (int j = 0; j < (int)(sizeof demo_cases / sizeof *demo_cases); j++) list[n++] = find_case(demo_cases[j]);
    }
    if (o.device == FC_DEVICE_CUDA) {
        if (!o.iters_set) o.iters = 20;
        if (!warmup_set) o.warmup = 3;
    }
    if (o.iters < 1) o.iters = 1;
    if (o.warmup < 0) o.warmup = 0;
    if (custom_set || n == 0) list[n++] = &custom;
    if (!o.json && o.device == FC_DEVICE_CPU)
        printf("flashc %s, CPU threads %d, timing: median of %d after %d warm-up\n", fc_version(), fc_get_num_threads(),
               o.iters, o.warmup);
    if (!o.json && o.device == FC_DEVICE_CUDA) printf("flashc %s\n", fc_version());
    if (o.device == FC_DEVICE_CUDA) cuda_init(&o);
    print_header(&o);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        bench_result r = run_case(list[i], &o);
        print_result(list[i], &o, &r);
        failed |= r.status != FC_OK || (o.check && !(r.err_ratio <= 1.0));
    }
    return failed ? 1 : 0;
}
