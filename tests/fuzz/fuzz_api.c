/* fuzz_api.c — libFuzzer target over the public API: fc_attn_fwd (validation, CPU kernels, append,
 * rotary), fc_attn_workspace_size, fc_attn_describe, fc_plan_create / fc_plan_run and fc_merge_states, on arguments decoded from the fuzzer's bytes.
 *
 * Every tensor points to a heap block of its own sized exactly to the view's extent (max offset + 1
 * elements), so ASan sees any access outside a view. Shapes, strides, lengths and the contents of the
 * index tensors come from the bytes (hostile); float contents come from a generator seeded by them.
 * After each call the harness checks the API's contract and abort()s on a violation:
 *   - an error status: nothing written (every buffer equals its snapshot), the workspace size and the
 *     run agree, the message names an argument ("name: why"); never FC_ERR_INTERNAL;
 *   - FC_OK: the arguments satisfy the header's contract (else "accepted invalid"), only the output
 *     elements the call may write changed (out/lse rows of the sequences, the appended cache rows),
 *     written views do not overlap themselves, appended values equal k_new/v_new; with tame inputs,
 *     a row that sees a key (or a sink) has a finite lse and a finite out bounded by |v|, a row that
 *     sees none has out = 0 and lse = -inf. Keys no row can see hold NaN (poison).
 * Environment: FLASHC_FUZZ_SKIP=class,... stops generating (or checking) a known defect class so the
 * fuzzer digs past it (classes: see known_classes; "all" skips every one); FLASHC_FUZZ_VERBOSE=1 prints
 * each case; FLASHC_FUZZ_STRICT=1 also aborts when valid arguments (by the harness's reading) are rejected. */
#include <float.h>
#include <stdarg.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashc.h"
#include "testutil.h"

#define MEM_CAP (16 << 20)  /* bytes of all the tensors of one case */
#define WORK_CAP 4000000.0  /* multiply-adds (and element writes) of one case */
#define MAX_BUFS 24
#define VAL 2.0             /* q, k, v, k_new, v_new, out_partial values lie in [-VAL, VAL] */
#define GARBAGE 1.0e4       /* what hidden keys hold when the NaN poison is skipped */

/* ---------------------------------------------------------------------------------------------- */
/* Reading the fuzzer's bytes: every read succeeds; past the end it reads zeros.                   */

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static unsigned take8(reader *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

static uint32_t take32(reader *r) {
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) x |= (uint32_t)take8(r) << (8 * i);
    return x;
}

static uint64_t take64(reader *r) {
    uint64_t lo = take32(r);
    return lo | (uint64_t)take32(r) << 32;
}

/* One of n choices (n <= 256). */
static int pick(reader *r, int n) { return (int)(take8(r) % (unsigned)n); }

/* Integer in [lo, hi] (hi - lo < 2^32). */
static int64_t range(reader *r, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)((span <= 256 ? take8(r) : take32(r)) % span);
}

static const int64_t special_ints[] = {
    0, 1, -1, 2, -2, 63, 64, 65, 127, 128, 129, 255, 256, 65535, 65536, 1 << 20, 1 << 30,
    INT32_MAX, INT32_MAX - 1, INT32_MAX - 63, INT32_MAX - 127, (1LL << 31) - 64, INT32_MIN, INT32_MIN + 1,
    (int64_t)INT32_MAX + 1, 1LL << 32, (1LL << 32) + 1, 1LL << 62, INT64_MAX, INT64_MAX / 2, INT64_MIN,
};

/* A value a hostile caller might pass: a boundary case, a raw 32-bit or a raw 64-bit value. */
static int64_t hostile_int(reader *r) {
    int n = (int)(sizeof special_ints / sizeof special_ints[0]);
    int k = pick(r, n + 2);
    if (k < n) return special_ints[k];
    return k == n ? (int64_t)(int32_t)take32(r) : (int64_t)take64(r);
}

static int32_t hostile_i32(reader *r) { return (int32_t)hostile_int(r); }

static const float special_floats[] = {
    0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 30.0f, 1e-45f, 1e-40f, FLT_MIN, 1e-30f, 1e-20f, 1e-6f, 1e6f,
    1e20f, 1e30f, FLT_MAX, -FLT_MAX, INFINITY, -INFINITY, NAN,
};

static float hostile_float(reader *r) {
    int n = (int)(sizeof special_floats / sizeof special_floats[0]);
    int k = pick(r, n + 1);
    if (k < n) return special_floats[k];
    uint32_t u = take32(r);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---------------------------------------------------------------------------------------------- */
/* Known defect classes (issue 10) the harness can stop producing, and other switches.              */

enum { K_WINDOW, K_BIGLEN, K_CU_OVERFLOW, K_APPEND31, K_SOFTCAP, K_NANMASK, K_OVERLAP, K_MERGEPREC, K_COUNT };
static const char *known_classes[K_COUNT] = {
    "window",      /* windows near INT32_MAX: fc_key_range's diag + wr overflows (item 2) */
    "biglen",      /* key/query lengths near 2^31 (s_k + BK - 1 and kin) (item 2) */
    "cu_overflow", /* cu_seqlens far apart: cu[b+1] - cu[b] before the monotonic check (item 2) */
    "append31",    /* seqused_k + s_new past 2^31 (item 2) */
    "softcap",     /* scale / softcap overflows (item 3) */
    "nanmask",     /* NaN in keys no row sees reaches the output through 0 * NaN (item 3) */
    "overlap",     /* self-overlapping written views accepted (item 4) */
    "mergeprec",   /* merging partials with |lse| >~ 1e7: out = sum exp(lse_s - l) out_s, l rounded (new) */
};
static int skip_class[K_COUNT];
static int verbose;

static void read_switches(void) {
    const char *s = getenv("FLASHC_FUZZ_SKIP");
    for (int k = 0; s && k < K_COUNT; k++) {
        size_t n = strlen(known_classes[k]);
        for (const char *p = s; (p = strstr(p, known_classes[k])) != NULL; p += n)
            if ((p == s || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) skip_class[k] = 1;
        if (strcmp(s, "all") == 0) skip_class[k] = 1;
    }
    verbose = getenv("FLASHC_FUZZ_VERBOSE") != NULL;
}

static void violation(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_api: CONTRACT VIOLATION: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

/* ---------------------------------------------------------------------------------------------- */
/* Buffers: one exact heap block per tensor, its snapshot, and the bytes the call may change.       */

typedef struct fbuf {
    fc_tensor *t;
    const char *name;
    int written;    /* an output, or a cache the append writes */
    char *mem;      /* the block; t->data = mem + misalign */
    size_t bytes, misalign;
    int64_t elems;  /* elements the view reaches; -1: malformed view (the library must reject it) */
    char *snap;
    uint8_t *may;   /* written buffers: 1 for bytes the call may change */
    int overlap;    /* two written elements of the view share memory */
} fbuf;

typedef struct fcase {
    fbuf buf[MAX_BUFS];
    int n;
    size_t total;
    uint64_t rng;
} fcase;

static size_t esize(fc_dtype dt) { return dt == FC_BF16 || dt == FC_FP16 ? 2 : 4; }
static int is_float_dtype(fc_dtype dt) { return dt == FC_BF16 || dt == FC_FP16 || dt == FC_FP32; }

/* Element e of a bf16/fp16/fp32/int32 block as a double, and back; data may be misaligned. */
typedef union elem {
    float f;
    int32_t i;
    uint16_t h;
} elem;

/* memcpy of one element (constant sizes: the compiler makes them plain loads and stores). */
static void copy_elem(void *dst, const void *src, size_t es) {
    if (es == 2) memcpy(dst, src, 2);
    else memcpy(dst, src, 4);
}

static double get_val(const void *base, fc_dtype dt, int64_t e) {
    elem x;
    copy_elem(&x, (const char *)base + e * (int64_t)esize(dt), esize(dt));
    return tu_load(&x, dt, 0);
}

static void put_val(void *base, fc_dtype dt, int64_t e, double v) {
    elem x;
    tu_store(&x, dt, 0, v);
    copy_elem((char *)base + e * (int64_t)esize(dt), &x, esize(dt));
}

/* Elements view t reaches (max offset + 1), 0 when empty, -1 when malformed, -2 when over the cap. */
static int64_t view_elems(const fc_tensor *t) {
    if (t->ndim < 1 || t->ndim > FC_MAX_DIMS) return -1;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0 || t->stride[i] < 0) return -1;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return 0;
    __int128 off = 0;
    for (int i = 0; i < t->ndim; i++) off += (__int128)(t->shape[i] - 1) * t->stride[i];
    return off + 1 > MEM_CAP ? -2 : (int64_t)(off + 1);
}

/* Allocates the block behind *t (present tensors only). Returns 0 when the case is over the caps. */
static int alloc_buf(fcase *c, fc_tensor *t, const char *name, int written, size_t misalign) {
    if (!t->data) return 1;
    int64_t elems = view_elems(t);
    if (elems == -2) return 0;
    fbuf *b = &c->buf[c->n++];
    memset(b, 0, sizeof *b);
    b->t = t;
    b->name = name;
    b->written = written;
    b->elems = elems;
    b->misalign = misalign;
    b->bytes = (elems < 0 ? 16 : (size_t)elems * esize(t->dtype)) + misalign;
    c->total += b->bytes;
    if (c->total > MEM_CAP) return 0;
    b->mem = malloc(b->bytes ? b->bytes : 1);
    if (!b->mem) return 0;
    memset(b->mem, 0, b->bytes);
    t->data = b->mem + misalign;
    return 1;
}

static fbuf *find_buf(fcase *c, const fc_tensor *t) {
    for (int i = 0; i < c->n; i++)
        if (c->buf[i].t == t) return &c->buf[i];
    return NULL;
}

static void free_case(fcase *c) {
    for (int i = 0; i < c->n; i++) {
        free(c->buf[i].mem);
        free(c->buf[i].snap);
        free(c->buf[i].may);
    }
    c->n = 0;
}

/* Element offset of index idx in t, or -1 when outside the allocated view (never read there). */
static int64_t elem_at(fcase *c, const fc_tensor *t, const int64_t *idx) {
    fbuf *b = find_buf(c, t);
    if (!b || b->elems <= 0) return -1;
    int64_t off = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (idx[i] < 0 || idx[i] >= t->shape[i]) return -1;
        off += idx[i] * t->stride[i];
    }
    return off < b->elems ? off : -1;
}

/* Index tensors: int32 element (i) or (i, j); 0 when outside the view. */
static int get_i32(fcase *c, const fc_tensor *t, int64_t i, int64_t j, int32_t *v) {
    int64_t idx[2] = {i, j};
    if (t->dtype != FC_INT32 || t->ndim != (j < 0 ? 1 : 2)) return 0;
    int64_t off = elem_at(c, t, idx);
    if (off < 0) return 0;
    *v = (int32_t)get_val(t->data, FC_INT32, off);
    return 1;
}

static void put_i32(fcase *c, const fc_tensor *t, int64_t i, int64_t j, int32_t v) {
    int64_t idx[2] = {i, j};
    if (t->dtype != FC_INT32 || t->ndim != (j < 0 ? 1 : 2)) return;
    int64_t off = elem_at(c, t, idx);
    if (off >= 0) put_val(t->data, FC_INT32, off, v);
}

static double uniform(fcase *c, double lo, double hi) { return lo + (hi - lo) * tu_uniform(&c->rng); }

/* Encoded values uniform in [-VAL, VAL] per dtype, drawn once: filling picks from them. */
enum { POOL = 4096 };
static elem pool[3][POOL];

static void make_pools(void) {
    uint64_t rng = 1;
    for (int dt = 0; dt < 3; dt++)
        for (int i = 0; i < POOL; i++) tu_store(&pool[dt][i], (fc_dtype)dt, 0, VAL * (2.0 * tu_uniform(&rng) - 1.0));
}

/* Elements off .. off+n-1 of a float block: values from the pool. */
static void put_pool(fcase *c, void *base, fc_dtype dt, int64_t off, int64_t n) {
    size_t es = esize(dt);
    for (int64_t e = off; e < off + n; e++) copy_elem((char *)base + e * (int64_t)es, &pool[dt][tu_rng_next(&c->rng) % POOL], es);
}

/* Every element of a float buffer: uniform in [lo, hi] ([-VAL, VAL] from the pool), or x when lo == hi. */
static void fill_buf(fcase *c, const fc_tensor *t, double lo, double hi) {
    fbuf *b = find_buf(c, t);
    if (!b || b->elems <= 0 || !is_float_dtype(t->dtype)) return;
    if (lo == -VAL && hi == VAL) {
        put_pool(c, t->data, t->dtype, 0, b->elems);
        return;
    }
    elem x;
    tu_store(&x, t->dtype, 0, lo);
    for (int64_t e = 0; e < b->elems; e++) {
        if (lo != hi) tu_store(&x, t->dtype, 0, uniform(c, lo, hi));
        copy_elem((char *)t->data + e * (int64_t)esize(t->dtype), &x, esize(t->dtype));
    }
}

/* Marks element off (of a written buffer) as one the call may change; notes overlaps. */
static void may_write(fcase *c, const fc_tensor *t, int64_t off) {
    fbuf *b = find_buf(c, t);
    if (!b || !b->may || off < 0) return;
    size_t at = b->misalign + (size_t)off * esize(t->dtype);
    if (b->may[at]) b->overlap = 1;
    memset(b->may + at, 1, esize(t->dtype));
}

static void snapshot(fcase *c) {
    for (int i = 0; i < c->n; i++) {
        fbuf *b = &c->buf[i];
        b->snap = malloc(b->bytes ? b->bytes : 1);
        memcpy(b->snap, b->mem, b->bytes);
    }
}

/* The first buffer with a byte changed that was not allowed to change (all of them when !ok). */
static const char *changed_outside(fcase *c, int ok) {
    for (int i = 0; i < c->n; i++) {
        fbuf *b = &c->buf[i];
        if (memcmp(b->mem, b->snap, b->bytes) == 0) continue;
        for (size_t k = 0; k < b->bytes; k++)
            if (b->mem[k] != b->snap[k] && !(ok && b->may && b->may[k])) return b->name;
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* Layouts: the strides of a view of the shape already in t.                                       */

/* mode 0: contiguous; 1: padded strides; 2: the two middle dims swapped in memory (4D/3D);
 * 3: a zero stride (broadcast) on a dim other than the last; 4: a hostile stride on any dim. */
static void set_layout(fc_tensor *t, int mode, reader *r) {
    int nd = t->ndim, order[FC_MAX_DIMS] = {0, 1, 2, 3}; /* order[0] outermost in memory */
    if (mode == 2 && nd >= 3) {
        order[nd - 3] = nd - 2;
        order[nd - 2] = nd - 3;
    }
    int64_t step = 1;
    for (int k = nd - 1; k >= 0; k--) {
        int dim = order[k];
        t->stride[dim] = step;
        int64_t pad = mode == 1 && k < nd - 1 ? pick(r, 5) : 0;
        int64_t n = t->shape[dim] < 1 ? 1 : t->shape[dim] < MEM_CAP ? t->shape[dim] : MEM_CAP;
        step = step * n + pad;
        if (step > MEM_CAP) step = MEM_CAP;
    }
    if (mode == 3 && nd > 1) t->stride[pick(r, nd - 1)] = 0;
    if (mode == 4) {
        int dim = pick(r, nd);
        t->stride[dim] = hostile_int(r);
    }
}

static int read_layout_mode(reader *r) {
    static const int modes[8] = {0, 0, 0, 0, 1, 2, 3, 4};
    return modes[pick(r, 8)];
}

static fc_tensor make_tensor(fc_dtype dt, int nd, int64_t n0, int64_t n1, int64_t n2, int64_t n3, reader *r) {
    fc_tensor t = {(void *)1, dt, nd, {n0, n1, n2, n3}, {0, 0, 0, 0}};
    for (int i = nd; i < FC_MAX_DIMS; i++) t.shape[i] = 0;
    set_layout(&t, read_layout_mode(r), r);
    return t;
}

/* ---------------------------------------------------------------------------------------------- */
/* Hostile edits of one tensor before allocation: ndim, dtype, a shape, a stride, data NULL or      */
/* misaligned (returned: the byte offset to give data).                                             */

static size_t mutate_tensor(fc_tensor *t, reader *r) {
    int kind = pick(r, 7), dim = pick(r, FC_MAX_DIMS);
    switch (kind) {
    case 0: t->ndim = (int)range(r, -1, 6); break;
    case 1: { /* the first four dtypes and two unknown ones (FP8 caches are not in the model: a pair of
               * mutations making k and v both e4m3 would be a valid call the value checks cannot read) */
        static const int dts[6] = {FC_BF16, FC_FP16, FC_FP32, FC_INT32, 6, 7};
        t->dtype = (fc_dtype)dts[pick(r, 6)];
        break;
    }
    case 2: t->shape[dim] = hostile_int(r); break;
    case 3: t->stride[dim] = hostile_int(r); break;
    case 4: t->data = NULL; break;
    case 5: return 1 + (size_t)pick(r, 3);
    default: /* off by up to two */
        if (t->shape[dim] > INT64_MIN + 2 && t->shape[dim] < INT64_MAX - 2) t->shape[dim] += range(r, -2, 2);
        break;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Checking a status.                                                                              */

static const char *arg_names[] = {
    "args", "bytes", "device", "q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
    "max_seqlen_k", "seqused_k", "page_table", "k_new", "v_new", "rotary_cos", "rotary_sin",
    "rotary_interleaved", "softmax_scale", "softcap", "causal", "window_left", "window_right", "alibi_slopes",
    "sinks", "num_splits", "workspace", "out_partial", "lse_partial", NULL,
};

/* "name: why" (or "name[...") with name an argument of the call. */
static int names_an_argument(const char *msg) {
    size_t n = strcspn(msg, ":[ ");
    if (n == 0 || !msg[n] || !msg[n + 1]) return 0;
    for (int i = 0; arg_names[i]; i++)
        if (strlen(arg_names[i]) == n && strncmp(msg, arg_names[i], n) == 0) return 1;
    return 0;
}

static void check_error(fcase *c, fc_status st, const char *call) {
    if (st == FC_ERR_INTERNAL || st == FC_ERR_CUDA || st < 0 || st > FC_ERR_INTERNAL) violation(call, "status FC_ERR_INTERNAL, CUDA or unknown");
    const char *msg = fc_last_error();
    if (!names_an_argument(msg)) violation("error message does not start with an argument name", msg);
    const char *where = changed_outside(c, 0);
    if (where) violation("wrote on error", where);
}

/* ---------------------------------------------------------------------------------------------- */
/* The attention case.                                                                             */

typedef struct acase {
    fc_attn_args a;
    int b, h_q, h_k, d, d_v, kv_varlen, q_varlen, paged, s_new, page_size;
    int tame; /* scale, alibi slopes and sinks small and finite: the value checks apply */
} acase;

/* Where sequence b's rows and keys are, as the header defines them (64-bit). */
typedef struct seqinfo {
    int64_t q_row0, s_q, k_row0, s_cache, s_k;
} seqinfo;

/* The harness's reading of accepted arguments: the contract's checks on shapes and contents. */
typedef struct model {
    int ok;
    char why[160];
    int b;
    int64_t wl, wr;
    seqinfo *seq;
} model;

/* Marks the model invalid with the first reason given (printf-style, long long arguments). */
__attribute__((format(printf, 2, 3))) static int not_ok(model *m, const char *fmt, ...) {
    if (m->ok) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->why, sizeof m->why, fmt, ap);
        va_end(ap);
    }
    m->ok = 0;
    return 0;
}

static int head_dim_ok(int64_t d) { return d >= 8 && d <= 256 && d % 8 == 0; }

/* Rules every tensor follows: present, dtype, ndim, shapes in [0, 2^31), strides >= 0, aligned. */
static int data_ok(model *m, const fc_tensor *t, fc_dtype dt, int nd, size_t align) {
    if (!t->data) return not_ok(m, "required tensor absent");
    if (t->ndim != nd || t->dtype != dt) return not_ok(m, "ndim %lld or dtype %lld", (long long)(t->ndim), (long long)(t->dtype));
    for (int i = 0; i < nd; i++)
        if (t->shape[i] < 0 || t->shape[i] > INT32_MAX || t->stride[i] < 0)
            return not_ok(m, "shape or stride out of range in dim %lld (%lld)", (long long)i, (long long)(t->shape[i]));
    if ((uintptr_t)t->data % align) return not_ok(m, "misaligned data (alignment %lld)", (long long)align);
    int64_t off = 0, term; /* the offsets, up to the first empty dim, fit in int64 (api.c checks so) */
    for (int i = 0; i < nd && t->shape[i] > 0; i++)
        if (__builtin_mul_overflow(t->shape[i] - 1, t->stride[i], &term) || __builtin_add_overflow(off, term, &off))
            return not_ok(m, "offsets overflow int64 in dim %lld (stride %lld)", (long long)i, (long long)(t->stride[i]));
    return 1;
}

static int contiguous_ok(model *m, const fc_tensor *t) {
    int nd = t->ndim;
    if (t->stride[nd - 1] != 1 && t->shape[nd - 1] > 1) return not_ok(m, "last dim stride %lld (shape %lld)", (long long)(t->stride[nd - 1]), (long long)(t->shape[nd - 1]));
    return 1;
}

static int dims_ok(model *m, const fc_tensor *t, int nd, const int64_t *want) {
    for (int i = 0; i < nd; i++)
        if (want[i] >= 0 && t->shape[i] != want[i]) return not_ok(m, "shape[%lld] != %lld", (long long)i, (long long)(want[i]));
    return 1;
}

/* cu_seqlens: 0 first, non-decreasing, within `rows`; the lengths within max_len when max_len > 0. */
static int cu_ok(model *m, fcase *c, const fc_tensor *cu, int b, int64_t rows, int max_len, int64_t *row0,
                 int64_t *len) {
    int32_t prev = 0, x;
    if (!get_i32(c, cu, 0, -1, &prev) || prev != 0) return not_ok(m, "cu_seqlens[0] = %lld", (long long)prev);
    for (int i = 0; i < b; i++) {
        if (!get_i32(c, cu, i + 1, -1, &x)) return not_ok(m, "cu_seqlens unreadable at %lld", (long long)(i + 1));
        if (x < prev) return not_ok(m, "cu_seqlens decreases at %lld (%lld)", (long long)(i + 1), (long long)x);
        row0[i] = prev;
        len[i] = (int64_t)x - prev;
        if (max_len > 0 && len[i] > max_len) return not_ok(m, "length %lld > max_seqlen %lld", (long long)(len[i]), (long long)max_len);
        prev = x;
    }
    if (prev > rows) return not_ok(m, "cu_seqlens[b] = %lld > rows %lld", (long long)prev, (long long)rows);
    return 1;
}

/* Shapes as the header states them (the library validated them when it says FC_OK). */
static int attn_shapes_ok(model *m, const acase *k) {
    const fc_attn_args *a = &k->a;
    if (a->device != FC_DEVICE_CPU) return not_ok(m, "device %lld", (long long)(a->device));
    fc_dtype dt = a->q.dtype;
    if (!is_float_dtype(dt)) return not_ok(m, "q dtype %lld", (long long)dt);
    int qv = a->cu_seqlens_q.data != NULL, kvv = a->cu_seqlens_k.data != NULL, pg = a->page_table.data != NULL;
    int qn = qv ? 3 : 4, kn = kvv ? 3 : 4;
    size_t al = esize(dt);
    if (!data_ok(m, &a->q, dt, qn, al) || !contiguous_ok(m, &a->q)) return 0;
    if (!data_ok(m, &a->out, dt, qn, al) || !contiguous_ok(m, &a->out)) return 0;
    if (!data_ok(m, &a->k, dt, kn, al) || !contiguous_ok(m, &a->k)) return 0;
    if (!data_ok(m, &a->v, dt, kn, al) || !contiguous_ok(m, &a->v)) return 0;
    int64_t h_q = a->q.shape[qn - 2], d = a->q.shape[qn - 1], d_v = a->out.shape[qn - 1], h_k = a->k.shape[kn - 2];
    if (h_q < 1 || !head_dim_ok(d) || !head_dim_ok(d_v)) return not_ok(m, "h_q %lld or head dim %lld", (long long)h_q, (long long)d);
    if (h_k < 1 || h_q % h_k) return not_ok(m, "h_k %lld does not divide h_q %lld", (long long)h_k, (long long)h_q);
    for (int i = 0; i < qn - 1; i++)
        if (a->out.shape[i] != a->q.shape[i]) return not_ok(m, "out shape[%lld] %lld", (long long)i, (long long)(a->out.shape[i]));
    for (int i = 0; i < kn - 1; i++)
        if (a->v.shape[i] != a->k.shape[i]) return not_ok(m, "v shape[%lld] %lld", (long long)i, (long long)(a->v.shape[i]));
    if (a->k.shape[kn - 1] != d || a->v.shape[kn - 1] != d_v) return not_ok(m, "k/v head dims %lld %lld", (long long)(a->k.shape[kn - 1]), (long long)(a->v.shape[kn - 1]));
    if (qv && (a->cu_seqlens_q.shape[0] < 1 || a->max_seqlen_q < 0)) return not_ok(m, "cu_seqlens_q empty or max_seqlen_q negative");
    int64_t b = qv ? a->cu_seqlens_q.shape[0] - 1 : a->q.shape[0];
    if (qv && !data_ok(m, &a->cu_seqlens_q, FC_INT32, 1, 4)) return 0;
    if (qv && !contiguous_ok(m, &a->cu_seqlens_q)) return 0;
    if (pg && kvv) return not_ok(m, "paged and varlen k");
    if (kvv) {
        int64_t w[1] = {b + 1};
        if (!data_ok(m, &a->cu_seqlens_k, FC_INT32, 1, 4) || !contiguous_ok(m, &a->cu_seqlens_k) ||
            !dims_ok(m, &a->cu_seqlens_k, 1, w) || a->max_seqlen_k < 0)
            return 0;
    } else if (pg) {
        int64_t w[2] = {b, -1};
        if (!data_ok(m, &a->page_table, FC_INT32, 2, 4) || !contiguous_ok(m, &a->page_table) ||
            !dims_ok(m, &a->page_table, 2, w))
            return 0;
        if (a->k.shape[1] < 1 || !a->seqused_k.data) return not_ok(m, "page_size %lld, or no seqused_k", (long long)(a->k.shape[1]));
    } else if (a->k.shape[0] < b) { /* a dense cache may hold more sequences than the batch */
        return not_ok(m, "k batch %lld < %lld", (long long)(a->k.shape[0]), (long long)b);
    }
    if (a->seqused_k.data) {
        int64_t w[1] = {b};
        if (!data_ok(m, &a->seqused_k, FC_INT32, 1, 4) || !contiguous_ok(m, &a->seqused_k) || !dims_ok(m, &a->seqused_k, 1, w)) return 0;
    }
    if (a->lse.data) {
        int64_t wq[2] = {h_q, a->q.shape[0]}, wd[3] = {b, h_q, qv ? 0 : a->q.shape[1]};
        if (!data_ok(m, &a->lse, FC_FP32, qv ? 2 : 3, 4) || !dims_ok(m, &a->lse, qv ? 2 : 3, qv ? wq : wd)) return 0;
    }
    int kn_ = a->k_new.data != NULL, vn_ = a->v_new.data != NULL, rc = a->rotary_cos.data != NULL, rs = a->rotary_sin.data != NULL;
    if (kn_ != vn_ || rc != rs || (rc && !kn_)) return not_ok(m, "k_new/v_new/rotary presence %lld %lld", (long long)(kn_ * 2 + vn_), (long long)(rc * 2 + rs));
    if (kn_) {
        if (kvv || !a->seqused_k.data) return not_ok(m, "append needs a dense or paged cache and seqused_k");
        if (!data_ok(m, &a->k_new, dt, 4, al) || !contiguous_ok(m, &a->k_new)) return 0;
        if (!data_ok(m, &a->v_new, dt, 4, al) || !contiguous_ok(m, &a->v_new)) return 0;
        int64_t wk[4] = {b, -1, h_k, d}, wv[4] = {b, a->k_new.shape[1], h_k, d_v};
        if (!dims_ok(m, &a->k_new, 4, wk) || !dims_ok(m, &a->v_new, 4, wv)) return 0;
    }
    if (rc) {
        fc_dtype rdt = a->rotary_cos.dtype == FC_FP32 ? FC_FP32 : dt;
        if (!data_ok(m, &a->rotary_cos, rdt, 2, esize(rdt)) || !contiguous_ok(m, &a->rotary_cos)) return 0;
        if (!data_ok(m, &a->rotary_sin, rdt, 2, esize(rdt)) || !contiguous_ok(m, &a->rotary_sin)) return 0;
        int64_t w[2] = {a->rotary_cos.shape[0], a->rotary_cos.shape[1]};
        if (!dims_ok(m, &a->rotary_sin, 2, w) || a->rotary_sin.stride[0] != a->rotary_cos.stride[0]) return 0;
        if (w[1] < 1 || 2 * w[1] > d) return not_ok(m, "rotary_dim/2 = %lld, d = %lld", (long long)(w[1]), (long long)d);
    }
    float sc = a->softmax_scale, cap = a->softcap;
    if (!isfinite(sc) || !isfinite(cap) || cap < 0) return not_ok(m, "scale or softcap not finite");
    if (a->window_left < -1 || a->window_right < -1) return not_ok(m, "window %lld %lld", (long long)(a->window_left), (long long)(a->window_right));
    if (a->alibi_slopes.data) {
        int nd = a->alibi_slopes.ndim == 1 ? 1 : 2;
        int64_t w1[1] = {h_q}, w2[2] = {b, h_q};
        if (!data_ok(m, &a->alibi_slopes, FC_FP32, nd, 4) || !dims_ok(m, &a->alibi_slopes, nd, nd == 1 ? w1 : w2)) return 0;
    }
    if (a->sinks.data) {
        int64_t w[1] = {h_q};
        if (!data_ok(m, &a->sinks, FC_FP32, 1, 4) || !dims_ok(m, &a->sinks, 1, w)) return 0;
    }
    if (a->num_splits < 0 || a->num_splits > 128) return not_ok(m, "num_splits %lld", (long long)(a->num_splits));
    m->b = (int)b;
    return 1;
}

/* The contents rules and the per-sequence lengths (model m->seq). */
static int attn_contents_ok(model *m, fcase *c, const acase *k) {
    const fc_attn_args *a = &k->a;
    int b = m->b;
    int64_t *row0 = calloc((size_t)b + 1, sizeof(int64_t)), *len = calloc((size_t)b + 1, sizeof(int64_t));
    m->seq = calloc((size_t)b + 1, sizeof(seqinfo));
    int ok = row0 && len && m->seq;
    int64_t s_new = a->k_new.data ? a->k_new.shape[1] : 0;
    if (ok && a->cu_seqlens_q.data) ok = cu_ok(m, c, &a->cu_seqlens_q, b, a->q.shape[0], a->max_seqlen_q, row0, len);
    for (int i = 0; ok && i < b; i++) {
        m->seq[i].q_row0 = a->cu_seqlens_q.data ? row0[i] : 0;
        m->seq[i].s_q = a->cu_seqlens_q.data ? len[i] : a->q.shape[1];
    }
    if (ok && a->cu_seqlens_k.data) ok = cu_ok(m, c, &a->cu_seqlens_k, b, a->k.shape[0], a->max_seqlen_k, row0, len);
    for (int i = 0; ok && i < b; i++) {
        seqinfo *s = &m->seq[i];
        int64_t cap = a->page_table.data ? a->page_table.shape[1] * a->k.shape[1] : a->cu_seqlens_k.data ? len[i] : a->k.shape[1];
        s->k_row0 = a->cu_seqlens_k.data ? row0[i] : 0;
        s->s_cache = cap;
        if (a->seqused_k.data) {
            int32_t u;
            if (!get_i32(c, &a->seqused_k, i, -1, &u)) ok = not_ok(m, "seqused_k unreadable at %lld", (long long)i);
            else if (u < 0 || u + s_new > cap) ok = not_ok(m, "seqused_k + s_new = %lld > capacity %lld", (long long)(u + s_new), (long long)cap);
            s->s_cache = u;
        }
        s->s_k = s->s_cache + s_new;
        for (int64_t p = 0; ok && a->page_table.data && p < (s->s_k + a->k.shape[1] - 1) / a->k.shape[1]; p++) {
            int32_t pg;
            if (!get_i32(c, &a->page_table, i, p, &pg) || pg < 0 || pg >= a->k.shape[0])
                ok = not_ok(m, "page_table entry %lld is %lld", (long long)p, (long long)pg);
        }
        if (ok && a->rotary_cos.data && (s->s_k > a->rotary_cos.shape[0] || s->s_q > s->s_k))
            ok = not_ok(m, "rotary table %lld positions, sequence needs %lld (or s_q > s_k)", (long long)(a->rotary_cos.shape[0]), (long long)(s->s_k));
    }
    free(row0);
    free(len);
    return ok;
}

static void build_model(model *m, fcase *c, const acase *k) {
    memset(m, 0, sizeof *m);
    m->ok = 1;
    if (!attn_shapes_ok(m, k) || !attn_contents_ok(m, c, k)) {
        not_ok(m, "shape rule"); /* keeps the first reason when one was given */
        return;
    }
    m->wl = k->a.window_left;
    m->wr = k->a.causal ? 0 : k->a.window_right;
}

/* Keys [lo, hi] row i of sequence s sees (empty when hi < lo). */
static void visible_keys(const model *m, const seqinfo *s, int64_t i, int64_t *lo, int64_t *hi) {
    int64_t diag = i + s->s_k - s->s_q;
    *lo = m->wl >= 0 ? diag - m->wl : 0;
    *hi = m->wr >= 0 ? diag + m->wr : s->s_k - 1;
    if (*lo < 0) *lo = 0;
    if (*hi > s->s_k - 1) *hi = s->s_k - 1;
}

/* Element offset of key j (< s_k), head h, feature 0 of sequence b in cache view t; -1 if unknown. */
static int64_t key_offset(fcase *c, const acase *k, const model *m, int b, int64_t j, int64_t h, const fc_tensor *t) {
    const fc_attn_args *a = &k->a;
    const seqinfo *s = &m->seq[b];
    if (a->page_table.data) {
        int32_t page;
        if (!get_i32(c, &a->page_table, b, j / a->k.shape[1], &page)) return -1;
        int64_t idx[4] = {page, j % a->k.shape[1], h, 0};
        return elem_at(c, t, idx);
    }
    if (a->cu_seqlens_k.data) {
        int64_t idx[3] = {s->k_row0 + j, h, 0};
        return elem_at(c, t, idx);
    }
    int64_t idx[4] = {b, j, h, 0};
    return elem_at(c, t, idx);
}

static int64_t out_offset(fcase *c, const acase *k, const model *m, const fc_tensor *t, int b, int64_t i, int64_t h) {
    const seqinfo *s = &m->seq[b];
    if (k->a.cu_seqlens_q.data) {
        int64_t idx[3] = {s->q_row0 + i, h, 0};
        return elem_at(c, t, idx);
    }
    int64_t idx[4] = {b, i, h, 0};
    return elem_at(c, t, idx);
}

static int64_t lse_offset(fcase *c, const acase *k, const model *m, int b, int64_t i, int64_t h) {
    const seqinfo *s = &m->seq[b];
    if (k->a.cu_seqlens_q.data) {
        int64_t idx[2] = {h, s->q_row0 + i};
        return elem_at(c, &k->a.lse, idx);
    }
    int64_t idx[3] = {b, h, i};
    return elem_at(c, &k->a.lse, idx);
}

/* Cache keys no row sees hold NaN (or GARBAGE); the keys some row sees get values in [-VAL, VAL]. */
static void fill_keys(fcase *c, const acase *k, const model *m) {
    const fc_attn_args *a = &k->a;
    double hidden = skip_class[K_NANMASK] ? GARBAGE : NAN;
    fill_buf(c, &a->k, hidden, hidden);
    fill_buf(c, &a->v, hidden, hidden);
    for (int b = 0; b < m->b; b++) {
        const seqinfo *s = &m->seq[b];
        if (s->s_q == 0) continue;
        int64_t lo0, hi0, lo1, hi1;
        visible_keys(m, s, 0, &lo0, &hi0);
        visible_keys(m, s, s->s_q - 1, &lo1, &hi1);
        int64_t lo = lo0, hi = hi1 < s->s_cache - 1 ? hi1 : s->s_cache - 1; /* windows slide: one interval */
        for (int64_t j = lo; j <= hi; j++)
            for (int64_t h = 0; h < k->h_k; h++) {
                int64_t ko = key_offset(c, k, m, b, j, h, &a->k), vo = key_offset(c, k, m, b, j, h, &a->v);
                if (ko >= 0) put_pool(c, a->k.data, a->q.dtype, ko, k->d);
                if (vo >= 0) put_pool(c, a->v.data, a->q.dtype, vo, k->d_v);
            }
    }
}

/* out/lse rows of the sequences, and the appended cache rows: what the call may change. */
static void mark_writes(fcase *c, const acase *k, const model *m) {
    const fc_attn_args *a = &k->a;
    for (int b = 0; b < m->b; b++) {
        const seqinfo *s = &m->seq[b];
        for (int64_t i = 0; i < s->s_q; i++)
            for (int64_t h = 0; h < k->h_q; h++) {
                int64_t o = out_offset(c, k, m, &a->out, b, i, h);
                for (int64_t x = 0; o >= 0 && x < k->d_v; x++) may_write(c, &a->out, o + x);
                if (a->lse.data) may_write(c, &a->lse, lse_offset(c, k, m, b, i, h));
            }
        for (int64_t j = s->s_cache; j < s->s_k; j++)
            for (int64_t h = 0; h < k->h_k; h++) {
                int64_t ko = key_offset(c, k, m, b, j, h, &a->k), vo = key_offset(c, k, m, b, j, h, &a->v);
                for (int64_t x = 0; ko >= 0 && x < k->d; x++) may_write(c, &a->k, ko + x);
                for (int64_t x = 0; vo >= 0 && x < k->d_v; x++) may_write(c, &a->v, vo + x);
            }
    }
}

static int any_overlap(fcase *c) {
    for (int i = 0; i < c->n; i++)
        if (c->buf[i].overlap) return 1;
    return 0;
}

/* After FC_OK: each row's out and lse against what the semantics allow, and the appended rows. */
static void check_attn_values(fcase *c, const acase *k, const model *m) {
    const fc_attn_args *a = &k->a;
    fc_dtype dt = a->q.dtype;
    char msg[200];
    int rows_alias = find_buf(c, &a->out)->overlap || (a->lse.data && find_buf(c, &a->lse)->overlap);
    for (int b = 0; b < m->b && k->tame && !rows_alias; b++) {
        const seqinfo *s = &m->seq[b];
        for (int64_t i = 0; i < s->s_q; i++) {
            int64_t lo, hi;
            visible_keys(m, s, i, &lo, &hi);
            for (int64_t h = 0; h < k->h_q; h++) {
                int sees = hi >= lo || a->sinks.data;
                int64_t o = out_offset(c, k, m, &a->out, b, i, h);
                double lse = a->lse.data ? get_val(a->lse.data, FC_FP32, lse_offset(c, k, m, b, i, h)) : (sees ? 0 : -INFINITY);
                snprintf(msg, sizeof msg, "sequence %d row %lld head %lld: keys [%lld, %lld] of %lld, lse %g", b,
                         (long long)i, (long long)h, (long long)lo, (long long)hi, (long long)s->s_k, lse);
                if (sees && !isfinite(lse)) violation("a row that sees keys has a non-finite lse", msg);
                if (!sees && lse != -INFINITY) violation("a row that sees no key has lse != -inf", msg);
                size_t base = strlen(msg);
                for (int64_t x = 0; x < k->d_v; x++) {
                    double y = get_val(a->out.data, dt, o + x);
                    snprintf(msg + base, sizeof msg - base, ", out[%lld] = %g", (long long)x, y);
                    if (!sees && y != 0) violation("a row that sees no key has out != 0", msg);
                    if (!(fabs(y) <= VAL * (1 + 1.0 / 64))) violation("out is not finite or exceeds max |v|", msg);
                }
            }
        }
    }
    /* appended v rows equal v_new; k rows equal k_new unless rotated (then finite) */
    for (int b = 0; b < m->b && !any_overlap(c); b++) {
        const seqinfo *s = &m->seq[b];
        for (int64_t j = s->s_cache; j < s->s_k; j++)
            for (int64_t h = 0; h < k->h_k; h++) {
                int64_t ko = key_offset(c, k, m, b, j, h, &a->k), vo = key_offset(c, k, m, b, j, h, &a->v);
                int64_t ik[4] = {b, j - s->s_cache, h, 0};
                int64_t kn = elem_at(c, &a->k_new, ik), vn = elem_at(c, &a->v_new, ik);
                for (int64_t x = 0; x < k->d_v && vo >= 0 && vn >= 0; x++)
                    if (memcmp((char *)a->v.data + (vo + x) * esize(dt), (char *)a->v_new.data + (vn + x) * esize(dt), esize(dt)))
                        violation("appended v row differs from v_new", NULL);
                for (int64_t x = 0; x < k->d && ko >= 0 && kn >= 0; x++) {
                    double y = get_val(a->k.data, dt, ko + x), want = get_val(a->k_new.data, dt, kn + x);
                    if (a->rotary_cos.data ? !isfinite(y) : y != want) violation("appended k row differs from k_new", NULL);
                }
            }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Decoding an attention case from the bytes.                                                     */

enum { MAX_SEQ = 64 };

static int read_head_dim(reader *r) {
    static const int dims[8] = {64, 128, 96, 192, 256, 64, 40, -1};
    int d = dims[pick(r, 8)];
    return d >= 0 ? d : (int)range(r, 0, 300);
}

/* A length: mostly 0 .. typical, at times a tile edge, up to 1000, or (class biglen) near 2^31. */
static int64_t read_len(reader *r, int typical) {
    static const int64_t edges[8] = {63, 64, 65, 127, 128, 129, 255, 257};
    static const int64_t big[6] = {1 << 30, INT32_MAX, INT32_MAX - 1, INT32_MAX - 63, INT32_MAX - 64, (1LL << 31) - 128};
    int k = pick(r, 16);
    if (k < 13) return range(r, 0, typical);
    if (k == 13) return edges[pick(r, 8)];
    if (k == 14 || skip_class[K_BIGLEN]) return range(r, 0, 1000);
    return big[pick(r, 6)];
}

static void read_window(acase *k, reader *r) {
    fc_attn_args *a = &k->a;
    switch (pick(r, 8)) {
    case 2: a->causal = 1; break;
    case 3: a->window_left = (int)range(r, 0, 64); a->window_right = (int)range(r, 0, 64); break;
    case 4: a->causal = 1; a->window_left = (int)range(r, 0, 64); break;
    case 5: a->window_left = (int)range(r, 0, 300); break;
    case 6: a->window_right = (int)range(r, 0, 300); break;
    case 7:
        if (skip_class[K_WINDOW]) {
            a->window_left = (int)range(r, -1, 1000);
            a->window_right = (int)range(r, -1, 1000);
        } else {
            a->window_left = pick(r, 2) ? INT32_MAX - (int)range(r, 0, 300) : hostile_i32(r);
            a->window_right = pick(r, 2) ? INT32_MAX - (int)range(r, 0, 300) : hostile_i32(r);
        }
        break;
    default: break;
    }
}

/* Score options: scale, softcap, ALiBi, sinks, splits. Returns the fill modes of slopes and sinks. */
static void read_scores(acase *k, reader *r, int *alibi_mode, int *sink_mode) {
    fc_attn_args *a = &k->a;
    int s = pick(r, 8);
    a->softmax_scale = s < 5 ? 0.0f : s == 5 ? (float)range(r, 1, 100) / 100.0f : s == 6 ? hostile_float(r) : (float)range(r, 1, 1000);
    int cap = pick(r, 8);
    a->softcap = cap < 4 ? 0.0f : cap == 4 ? 30.0f : cap == 5 ? (float)range(r, 1, 50) : hostile_float(r);
    *alibi_mode = pick(r, 4);
    *sink_mode = pick(r, 4);
    int al = pick(r, 4), sk = pick(r, 4);
    if (al == 1) a->alibi_slopes = make_tensor(FC_FP32, 1, k->h_q, 0, 0, 0, r);
    if (al == 2) a->alibi_slopes = make_tensor(FC_FP32, 2, k->b, k->h_q, 0, 0, r);
    if (sk == 1) a->sinks = make_tensor(FC_FP32, 1, k->h_q, 0, 0, 0, r);
    int ns = pick(r, 8);
    a->num_splits = ns < 6 ? ns : ns == 6 ? 128 + pick(r, 2) : hostile_i32(r);
}

/* After the hostile edits: class softcap skipped, a softcap that scale / softcap overflows becomes 30;
 * the value checks apply when scale, slopes and sinks are tame. */
static void settle_scores(acase *k, int alibi_mode, int sink_mode) {
    fc_attn_args *a = &k->a;
    double scale = a->softmax_scale != 0.0f ? a->softmax_scale : 1.0 / sqrt(k->d > 0 ? k->d : 1);
    if (skip_class[K_SOFTCAP] && a->softcap > 0.0f && !(fabs(scale) / a->softcap <= 1e30)) a->softcap = 30.0f;
    double big = skip_class[K_MERGEPREC] ? 10 : 1e3; /* scores up to 1e4 or 1e6 */
    k->tame = isfinite(a->softmax_scale) && fabs(a->softmax_scale) <= big &&
              (!a->alibi_slopes.data || alibi_mode < (skip_class[K_MERGEPREC] ? 2 : 3)) && (!a->sinks.data || sink_mode < 3);
}

/* Intended contents of the index tensors, written once the blocks exist. */
typedef struct plan {
    int64_t q_len[MAX_SEQ], k_len[MAX_SEQ], used[MAX_SEQ];
    int32_t *pages; /* b x max_pages */
    int64_t max_pages;
    int max_seqlen_mode;
} plan;

/* Pages for each sequence: distinct (shuffled or in order) or drawn at random (shared slots). */
static int64_t assign_pages(acase *k, plan *pl, reader *r, uint64_t *rng) {
    int mode = pick(r, 4), unused = pick(r, 4);
    int64_t n = (int64_t)k->b * pl->max_pages, next = 0;
    pl->pages = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    for (int b = 0; b < k->b; b++) {
        int64_t need = (pl->used[b] + k->s_new + k->page_size - 1) / k->page_size;
        for (int64_t p = 0; p < pl->max_pages; p++)
            pl->pages[b * pl->max_pages + p] = p < need ? (int32_t)next++ : unused == 0 ? -1 : unused == 1 ? INT32_MAX : 0;
    }
    int64_t num_pages = next + pick(r, 3);
    for (int64_t i = 0; i < n; i++) {
        if (pl->pages[i] < 0 || pl->pages[i] == INT32_MAX) continue;
        if (mode == 2 && num_pages > 0) pl->pages[i] = (int32_t)(tu_rng_next(rng) % (uint64_t)num_pages);
    }
    if (mode == 0) /* shuffle the distinct pages among the used slots */
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(tu_rng_next(rng) % (uint64_t)(i + 1));
            int32_t t = pl->pages[i];
            if (t < 0 || t == INT32_MAX || pl->pages[j] < 0 || pl->pages[j] == INT32_MAX) continue;
            pl->pages[i] = pl->pages[j];
            pl->pages[j] = t;
        }
    return num_pages;
}

/* Queries, outputs, keys and values with their lengths. Returns 0 if the case is not worth running. */
static int read_layouts(acase *k, plan *pl, reader *r, uint64_t *rng) {
    fc_attn_args *a = &k->a;
    fc_dtype dt = a->q.dtype;
    k->q_varlen = pick(r, 2);
    int kv = pick(r, 3);
    static const int news[8] = {0, 0, 0, 0, 1, 2, 3, 7};
    k->s_new = news[pick(r, 8)];
    int64_t s_q = read_len(r, 40), total_q = 0, longest_k = 0;
    for (int b = 0; b < k->b; b++) {
        pl->q_len[b] = k->q_varlen ? read_len(r, 40) : s_q;
        pl->k_len[b] = read_len(r, 200);
        pl->used[b] = pl->k_len[b];
        total_q += pl->q_len[b];
        if (pl->k_len[b] > longest_k) longest_k = pl->k_len[b];
    }
    if (k->q_varlen) {
        total_q += pick(r, 3);
        a->q = make_tensor(dt, 3, total_q, k->h_q, k->d, 0, r);
        a->out = make_tensor(dt, 3, total_q, k->h_q, k->d_v, 0, r);
        a->cu_seqlens_q = make_tensor(FC_INT32, 1, k->b + 1, 0, 0, 0, r);
    } else {
        a->q = make_tensor(dt, 4, k->b, s_q, k->h_q, k->d, r);
        a->out = make_tensor(dt, 4, k->b, s_q, k->h_q, k->d_v, r);
    }
    if (pick(r, 2)) a->lse = k->q_varlen ? make_tensor(FC_FP32, 2, k->h_q, total_q, 0, 0, r) : make_tensor(FC_FP32, 3, k->b, k->h_q, s_q, 0, r);
    int seqused = pick(r, 4);
    if (kv == 0) { /* dense: capacity s_k, seqused optional (required to append) */
        int64_t s_k = longest_k + k->s_new + pick(r, 3);
        a->k = make_tensor(dt, 4, k->b, s_k, k->h_k, k->d, r);
        a->v = make_tensor(dt, 4, k->b, s_k, k->h_k, k->d_v, r);
        if (seqused || k->s_new) a->seqused_k = make_tensor(FC_INT32, 1, k->b, 0, 0, 0, r);
    } else if (kv == 1) { /* varlen: seqused optional, at most each length */
        int64_t total_k = pick(r, 3);
        for (int b = 0; b < k->b; b++) total_k += pl->k_len[b];
        a->k = make_tensor(dt, 3, total_k, k->h_k, k->d, 0, r);
        a->v = make_tensor(dt, 3, total_k, k->h_k, k->d_v, 0, r);
        a->cu_seqlens_k = make_tensor(FC_INT32, 1, k->b + 1, 0, 0, 0, r);
        if (seqused == 1) {
            a->seqused_k = make_tensor(FC_INT32, 1, k->b, 0, 0, 0, r);
            for (int b = 0; b < k->b; b++) pl->used[b] = pl->k_len[b] ? (int64_t)(tu_rng_next(rng) % (uint64_t)(pl->k_len[b] + 1)) : 0;
        }
    } else { /* paged: pages of page_size keys, seqused required */
        static const int sizes[9] = {16, 1, 3, 64, 5, 128, 2, -1, -2};
        k->page_size = sizes[pick(r, 9)];
        int huge = k->page_size == -2 && !skip_class[K_APPEND31]; /* pages of 2^24 .. 2^31-1 keys, caches near 2^31 */
        if (k->page_size < 0) k->page_size = (int)range(r, 1, 300);
        if (huge) {
            static const int big[3] = {1 << 24, 1 << 30, INT32_MAX};
            k->page_size = big[pick(r, 3)];
            for (int b = 0; b < k->b; b++) pl->used[b] = longest_k = INT32_MAX - range(r, 0, 8);
        }
        pl->max_pages = (longest_k + k->s_new + k->page_size - 1) / k->page_size + pick(r, 2);
        if ((double)k->b * pl->max_pages > MEM_CAP / 8) return 0;
        int64_t num_pages = assign_pages(k, pl, r, rng);
        a->k = make_tensor(dt, 4, num_pages, k->page_size, k->h_k, k->d, r);
        a->v = make_tensor(dt, 4, num_pages, k->page_size, k->h_k, k->d_v, r);
        if (huge) { /* every row of a page at one place: the blocks stay small */
            a->k.stride[0] = k->h_k * (int64_t)k->d, a->k.stride[1] = 0, a->k.stride[2] = k->d, a->k.stride[3] = 1;
            a->v.stride[0] = k->h_k * (int64_t)k->d_v, a->v.stride[1] = 0, a->v.stride[2] = k->d_v, a->v.stride[3] = 1;
        }
        a->page_table = make_tensor(FC_INT32, 2, k->b, pl->max_pages, 0, 0, r);
        a->seqused_k = make_tensor(FC_INT32, 1, k->b, 0, 0, 0, r);
        k->paged = 1;
    }
    k->kv_varlen = kv == 1;
    if (k->s_new) {
        a->k_new = make_tensor(dt, 4, k->b, k->s_new, k->h_k, k->d, r);
        a->v_new = make_tensor(dt, 4, k->b, k->s_new, k->h_k, k->d_v, r);
    }
    pl->max_seqlen_mode = pick(r, 4);
    return 1;
}

static void read_rotary(acase *k, const plan *pl, reader *r) {
    fc_attn_args *a = &k->a;
    int mode = pick(r, 4);
    if ((mode != 1 && mode != 2) || !k->s_new) return;
    a->rotary_interleaved = mode == 1;
    int64_t half = 1 + range(r, 0, k->d > 2 ? k->d / 2 - 1 : 0), need = 0;
    for (int b = 0; b < k->b; b++)
        if (pl->used[b] + k->s_new > need) need = pl->used[b] + k->s_new;
    int64_t max_pos = pick(r, 8) ? need + pick(r, 3) : range(r, 0, need);
    fc_dtype rdt = pick(r, 2) ? FC_FP32 : a->q.dtype;
    a->rotary_cos = make_tensor(rdt, 2, max_pos, half, 0, 0, r);
    a->rotary_sin = a->rotary_cos;
    if (pick(r, 8) == 0) set_layout(&a->rotary_sin, read_layout_mode(r), r);
}

/* The tensor fields, for hostile edits. */
static fc_tensor *attn_tensor(fc_attn_args *a, int i) {
    fc_tensor *all[] = {&a->q, &a->k, &a->v, &a->out, &a->lse, &a->cu_seqlens_q, &a->cu_seqlens_k, &a->seqused_k,
                        &a->page_table, &a->k_new, &a->v_new, &a->rotary_cos, &a->rotary_sin, &a->alibi_slopes, &a->sinks};
    return all[i % (int)(sizeof all / sizeof all[0])];
}

static void mutate_scalar(fc_attn_args *a, reader *r) {
    switch (pick(r, 10)) {
    case 0: a->max_seqlen_q = hostile_i32(r); break;
    case 1: a->max_seqlen_k = hostile_i32(r); break;
    case 2: if (!skip_class[K_WINDOW]) a->window_left = hostile_i32(r); break;
    case 3: if (!skip_class[K_WINDOW]) a->window_right = hostile_i32(r); break;
    case 4: a->num_splits = hostile_i32(r); break;
    case 5: a->causal = hostile_i32(r); break;
    case 6: a->rotary_interleaved = hostile_i32(r); break;
    case 7: a->device = (fc_device)hostile_i32(r); break;
    case 8: a->softmax_scale = hostile_float(r); break;
    default: a->softcap = hostile_float(r); break;
    }
}

/* A hostile edit of an index tensor's contents, applied after the plan's contents are written. */
typedef struct content_edit {
    int tensor, set;
    int64_t i, j;
    int32_t value;
} content_edit;

static content_edit read_content_edit(reader *r) {
    content_edit e = {0, 1, 0, 0, 0}; /* the reads one by one: an initializer's order is unspecified */
    e.tensor = pick(r, 4);
    int near = pick(r, 4) != 0; /* mostly the first entries: those a small batch reads */
    e.i = near ? range(r, 0, 8) : range(r, 0, 70);
    e.j = near ? range(r, 0, 8) : range(r, 0, 300);
    e.value = hostile_i32(r);
    if (e.tensor <= 1 && skip_class[K_CU_OVERFLOW] && (e.value > (1 << 29) || e.value < -(1 << 29))) e.value %= 1 << 29;
    if (e.tensor == 2 && skip_class[K_APPEND31] && e.value > (1 << 29)) e.value = 1 << 29;
    return e;
}

static void apply_content_edit(fcase *c, fc_attn_args *a, const content_edit *e) {
    const fc_tensor *t[4] = {&a->cu_seqlens_q, &a->cu_seqlens_k, &a->seqused_k, &a->page_table};
    if (e->set && t[e->tensor]->data) put_i32(c, t[e->tensor], e->i, e->tensor == 3 ? e->j : -1, e->value);
}

static void write_plan(fcase *c, acase *k, const plan *pl) {
    fc_attn_args *a = &k->a;
    int64_t cq = 0, ck = 0, longest_q = 0, longest_k = 0;
    put_i32(c, &a->cu_seqlens_q, 0, -1, 0);
    put_i32(c, &a->cu_seqlens_k, 0, -1, 0);
    for (int b = 0; b < k->b; b++) {
        cq += pl->q_len[b];
        ck += pl->k_len[b];
        if (pl->q_len[b] > longest_q) longest_q = pl->q_len[b];
        if (pl->k_len[b] > longest_k) longest_k = pl->k_len[b];
        put_i32(c, &a->cu_seqlens_q, b + 1, -1, (int32_t)cq);
        put_i32(c, &a->cu_seqlens_k, b + 1, -1, (int32_t)ck);
        put_i32(c, &a->seqused_k, b, -1, (int32_t)pl->used[b]);
        for (int64_t p = 0; pl->pages && p < pl->max_pages; p++) put_i32(c, &a->page_table, b, p, pl->pages[b * pl->max_pages + p]);
    }
    int mode = pl->max_seqlen_mode;
    if (a->cu_seqlens_q.data && mode) a->max_seqlen_q = (int)(mode == 1 ? longest_q : longest_q + 5);
    if (a->cu_seqlens_k.data && mode) a->max_seqlen_k = (int)(mode == 1 ? longest_k : longest_k + 5);
}

static double dim_or_0(const fc_tensor *t, int i) { return t->data && i >= 0 && i < t->ndim && i < FC_MAX_DIMS && t->shape[i] > 0 ? (double)t->shape[i] : 0.0; }

/* An upper bound of the multiply-adds, element writes and loop trips an accepted call can take. */
static double attn_work(const fc_attn_args *a) {
    int qn = a->q.ndim, kn = a->k.ndim;
    double batch = a->cu_seqlens_q.data ? dim_or_0(&a->cu_seqlens_q, 0) : dim_or_0(&a->q, 0);
    double rows = qn == 3 ? dim_or_0(&a->q, 0) : dim_or_0(&a->q, 0) * dim_or_0(&a->q, 1);
    double heads = dim_or_0(&a->q, qn - 2), dims = dim_or_0(&a->q, qn - 1) + dim_or_0(&a->out, qn - 1);
    double keys = a->page_table.data ? dim_or_0(&a->page_table, 1) * dim_or_0(&a->k, 1)
                : kn == 3 ? dim_or_0(&a->k, 0) : dim_or_0(&a->k, 1);
    double s_new = dim_or_0(&a->k_new, 1), pages = dim_or_0(&a->page_table, 0) * dim_or_0(&a->page_table, 1);
    return rows * heads * (keys + s_new + 64) * (dims + 1) + batch * (dim_or_0(&a->k, kn - 2) + 1) * (s_new * dims + 64) + pages;
}

/* Allocations of the case; 0 when over the memory cap. */
static int alloc_attn(fcase *c, acase *k, const size_t *misalign) {
    fc_attn_args *a = &k->a;
    static const char *names[] = {"q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "page_table",
                                  "k_new", "v_new", "rotary_cos", "rotary_sin", "alibi_slopes", "sinks"};
    for (int i = 0; i < 15; i++) {
        fc_tensor *t = attn_tensor(a, i);
        int written = t == &a->out || t == &a->lse || ((t == &a->k || t == &a->v) && a->k_new.data);
        if (!alloc_buf(c, t, names[i], written, misalign[i])) return 0;
        fbuf *b = find_buf(c, t);
        if (b && written) b->may = calloc(b->bytes ? b->bytes : 1, 1);
    }
    return 1;
}

/* Float contents: q, k_new, v_new in [-VAL, VAL]; k/v through fill_keys when the model holds. */
static void fill_attn(fcase *c, acase *k, const model *m, int alibi_mode, int sink_mode) {
    fc_attn_args *a = &k->a;
    fill_buf(c, &a->q, -VAL, VAL);
    fill_buf(c, &a->k_new, -VAL, VAL);
    fill_buf(c, &a->v_new, -VAL, VAL);
    fill_buf(c, &a->rotary_cos, -1, 1);
    fill_buf(c, &a->rotary_sin, -1, 1);
    fill_buf(c, &a->out, NAN, NAN);
    fill_buf(c, &a->lse, NAN, NAN);
    if (m->ok) {
        fill_keys(c, k, m);
    } else {
        fill_buf(c, &a->k, -VAL, VAL);
        fill_buf(c, &a->v, -VAL, VAL);
    }
    static const double slope_lo[3] = {0, -1, 0}, slope_hi[3] = {1, 1, 1000}, sink_hi[3] = {5, 100, 1000};
    if (alibi_mode < 3) fill_buf(c, &a->alibi_slopes, slope_lo[alibi_mode], slope_hi[alibi_mode]);
    if (sink_mode < 3) fill_buf(c, &a->sinks, -sink_hi[sink_mode], sink_hi[sink_mode]);
    int n = (int)(sizeof special_floats / sizeof special_floats[0]);
    const fc_tensor *hostile[2] = {alibi_mode == 3 ? &a->alibi_slopes : NULL, sink_mode == 3 ? &a->sinks : NULL};
    for (int t = 0; t < 2; t++) {
        fbuf *b = hostile[t] ? find_buf(c, hostile[t]) : NULL;
        for (int64_t e = 0; b && b->elems > 0 && hostile[t]->dtype == FC_FP32; e++) {
            if (e >= b->elems) break;
            put_val(hostile[t]->data, FC_FP32, e, special_floats[tu_rng_next(&c->rng) % (uint64_t)n]);
        }
    }
}

static void describe_tensor(const char *name, const fc_tensor *t) {
    if (!t->data) return;
    fprintf(stderr, "  %-13s dtype %d ndim %d shape [%lld %lld %lld %lld] stride [%lld %lld %lld %lld]\n", name, t->dtype,
            t->ndim, (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2], (long long)t->shape[3],
            (long long)t->stride[0], (long long)t->stride[1], (long long)t->stride[2], (long long)t->stride[3]);
}

static void describe_ints(fcase *c, const char *name, const fc_tensor *t) {
    if (!t->data || t->dtype != FC_INT32 || t->ndim < 1 || t->ndim > 2) return;
    fprintf(stderr, "  %s =", name);
    int64_t n1 = t->ndim == 2 ? t->shape[1] : 1;
    for (int64_t i = 0; i < t->shape[0] && i < 16; i++)
        for (int64_t j = 0; j < n1 && j < 16; j++) {
            int32_t v = 0;
            if (get_i32(c, t, i, t->ndim == 2 ? j : -1, &v)) fprintf(stderr, " %d", v);
            else fprintf(stderr, " ?");
        }
    fprintf(stderr, "\n");
}

static void describe_attn(fcase *c, const acase *k, const model *m) {
    const fc_attn_args *a = &k->a;
    static const char *names[] = {"q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "page_table",
                                  "k_new", "v_new", "rotary_cos", "rotary_sin", "alibi_slopes", "sinks"};
    fprintf(stderr, "attn: device %d threads %d scale %g softcap %g causal %d window (%d, %d) splits %d "
            "max_seqlen (%d, %d) rotary_interleaved %d tame %d\n", a->device, fc_get_num_threads(), (double)a->softmax_scale,
            (double)a->softcap, a->causal, a->window_left, a->window_right, a->num_splits, a->max_seqlen_q, a->max_seqlen_k,
            a->rotary_interleaved, k->tame);
    for (int i = 0; i < 15; i++) describe_tensor(names[i], attn_tensor((fc_attn_args *)a, i));
    describe_ints(c, "cu_seqlens_q", &a->cu_seqlens_q);
    describe_ints(c, "cu_seqlens_k", &a->cu_seqlens_k);
    describe_ints(c, "seqused_k", &a->seqused_k);
    describe_ints(c, "page_table", &a->page_table);
    fprintf(stderr, "  model: %s\n", m->ok ? "valid" : m->why);
}

/* One attention case: decode, allocate, fill, call fc_attn_workspace_size and fc_attn_fwd, check. */
static void run_attn(reader *r) {
    fcase c = {0};
    acase k = {0};
    plan pl = {0};
    model m = {0};
    fc_attn_args *a = &k.a;
    fc_attn_args_init(a);
    c.rng = take32(r);
    static const fc_dtype dts[8] = {FC_BF16, FC_FP16, FC_FP32, FC_BF16, FC_FP16, FC_FP32, FC_INT32, (fc_dtype)7};
    a->q.dtype = dts[pick(r, 8)];
    int dev = pick(r, 16);
    a->device = dev < 14 ? FC_DEVICE_CPU : dev == 14 ? FC_DEVICE_CUDA : (fc_device)hostile_i32(r);
    int bsel = pick(r, 32);
    k.b = bsel < 28 ? 1 + bsel % 4 : bsel == 28 ? 0 : (int)range(r, 5, MAX_SEQ);
    k.h_k = 1 + pick(r, 4);
    k.h_q = k.h_k * (1 + pick(r, 4));
    k.d = read_head_dim(r);
    k.d_v = pick(r, 2) ? k.d : read_head_dim(r);
    if (!read_layouts(&k, &pl, r, &c.rng)) goto done;
    read_rotary(&k, &pl, r);
    read_window(&k, r);
    int alibi_mode, sink_mode;
    read_scores(&k, r, &alibi_mode, &sink_mode);

    size_t misalign[15] = {0};
    content_edit edits[3] = {{0}};
    int n_edits = pick(r, 8) - 4;
    for (int e = 0; e < n_edits; e++) {
        int what = pick(r, 3), t = pick(r, 15);
        if (what == 0) misalign[t] += mutate_tensor(attn_tensor(a, t), r);
        else if (what == 1) mutate_scalar(a, r);
        else edits[e] = read_content_edit(r);
    }
    settle_scores(&k, alibi_mode, sink_mode);
    if (attn_work(a) > WORK_CAP || !alloc_attn(&c, &k, misalign)) goto done;
    write_plan(&c, &k, &pl);
    for (int e = 0; e < 3; e++) apply_content_edit(&c, a, &edits[e]);
    build_model(&m, &c, &k);
    fill_attn(&c, &k, &m, alibi_mode, sink_mode);
    if (m.ok) mark_writes(&c, &k, &m);
    if (verbose) describe_attn(&c, &k, &m);
    snapshot(&c);

    size_t ws = (size_t)0x5a5a5a5a;
    fc_status st_ws = fc_attn_workspace_size(a, &ws);
    char ws_msg[512];
    snprintf(ws_msg, sizeof ws_msg, "%s", fc_last_error());
    if (st_ws == FC_OK && ws != 0) violation("fc_attn_workspace_size on the CPU is not 0", NULL);
    if (st_ws != FC_OK) {
        check_error(&c, st_ws, "fc_attn_workspace_size");
        if (ws != (size_t)0x5a5a5a5a) violation("fc_attn_workspace_size wrote *bytes on error", NULL);
    }
    char text[160];
    fc_status st_d = fc_attn_describe(a, text, sizeof text);
    char d_msg[512];
    snprintf(d_msg, sizeof d_msg, "%s", fc_last_error());
    if (st_d != FC_OK) check_error(&c, st_d, "fc_attn_describe");
    else if (strncmp(text, "cpu: ", 5)) violation("fc_attn_describe: not a CPU plan", text);
    fc_plan *plan = NULL; /* fc_plan_create validates as fc_attn_fwd does; half the cases run through it */
    int via_plan = pick(r, 2); /* the last byte read: earlier reproducers decode as they did */
    fc_status st_p = fc_plan_create(a, &plan);
    if (st_p != st_d || (st_p != FC_OK && strcmp(d_msg, fc_last_error())))
        violation("fc_plan_create and fc_attn_describe disagree", fc_last_error());
    if (st_p != FC_OK && plan) violation("fc_plan_create failed but returned a plan", NULL);
    fc_status st = plan && via_plan ? fc_plan_run(plan, a, NULL, 0, NULL) : fc_attn_fwd(a, NULL, 0, NULL);
    fc_plan_destroy(plan);
    if (verbose) fprintf(stderr, "  -> %s%s: %s\n", plan && via_plan ? "(plan) " : "", fc_status_string(st), fc_last_error());
    if ((st_d != FC_OK && (st != st_d || strcmp(d_msg, fc_last_error()))) || (st_d == FC_OK && st == FC_ERR_INVALID_ARGUMENT))
        violation("fc_attn_fwd and fc_attn_describe disagree", d_msg);
    if (st_ws != FC_OK && (st != st_ws || strcmp(ws_msg, fc_last_error())))
        violation("fc_attn_fwd and fc_attn_workspace_size disagree", ws_msg);
    if (st != FC_OK) {
        check_error(&c, st, "fc_attn_fwd");
        if (m.ok && getenv("FLASHC_FUZZ_STRICT")) violation("rejected valid arguments", fc_last_error());
        goto done;
    }
    if (!m.ok) violation("accepted invalid arguments", m.why);
    const char *where = changed_outside(&c, 1);
    if (where) violation("changed memory it may not write", where);
    for (int i = 0; i < c.n && !skip_class[K_OVERLAP]; i++)
        if (c.buf[i].overlap) violation("accepted a written view that overlaps itself", c.buf[i].name);
    check_attn_values(&c, &k, &m);
done:
    free(pl.pages);
    free(m.seq);
    free_case(&c);
}

/* ---------------------------------------------------------------------------------------------- */
/* fc_merge_states.                                                                                */

typedef struct mcase {
    fc_merge_args a;
    int64_t n, rows, h, d_v;
    int lse_mode; /* 0 finite, 1 finite and -inf, 2 all -inf, 3 hostile (inf, NaN, huge), 4 large (1e8 + x) and -inf */
} mcase;

static fc_tensor *merge_tensor(fc_merge_args *a, int i) {
    fc_tensor *all[4] = {&a->out_partial, &a->lse_partial, &a->out, &a->lse};
    return all[i & 3];
}

/* The header's rules for fc_merge_states (the library validated them when it says FC_OK). */
static int merge_shapes_ok(model *m, const fc_merge_args *a) {
    if (a->device != FC_DEVICE_CPU) return not_ok(m, "device %lld", (long long)(a->device));
    const fc_tensor *op = &a->out_partial;
    if (!is_float_dtype(op->dtype) || !is_float_dtype(a->out.dtype)) return not_ok(m, "dtypes %lld %lld", (long long)(op->dtype), (long long)(a->out.dtype));
    if (!data_ok(m, op, op->dtype, 4, esize(op->dtype)) || !contiguous_ok(m, op)) return 0;
    if (!data_ok(m, &a->lse_partial, FC_FP32, 3, 4)) return 0;
    if (!data_ok(m, &a->out, a->out.dtype, 3, esize(a->out.dtype)) || !contiguous_ok(m, &a->out)) return 0;
    if (op->shape[0] < 1) return not_ok(m, "n = %lld", (long long)(op->shape[0]));
    if (!dims_ok(m, &a->lse_partial, 3, op->shape) || !dims_ok(m, &a->out, 3, op->shape + 1)) return 0;
    if (a->lse.data && (!data_ok(m, &a->lse, FC_FP32, 2, 4) || !dims_ok(m, &a->lse, 2, op->shape + 1))) return 0;
    return 1;
}

static float read_lse_value(fcase *c, int mode) {
    double u = tu_uniform(&c->rng);
    if (mode == 2 || (mode == 1 && u < 0.4)) return -INFINITY;
    if (mode == 3 && u < 0.3) return special_floats[tu_rng_next(&c->rng) % (sizeof special_floats / sizeof special_floats[0])];
    if (mode == 4) return u < 0.3 ? -INFINITY : (float)(1e8 + uniform(c, -30, 30));
    return (float)uniform(c, -30, 30);
}

/* lse_partial values by mode; out_partial in [-VAL, VAL], NaN where lse_s = -inf (never read). */
static void fill_merge(fcase *c, mcase *k, int shapes_ok) {
    fc_merge_args *a = &k->a;
    fill_buf(c, &a->out_partial, -VAL, VAL);
    fill_buf(c, &a->out, NAN, NAN);
    fill_buf(c, &a->lse, NAN, NAN);
    fbuf *lb = find_buf(c, &a->lse_partial);
    for (int64_t e = 0; lb && lb->elems > 0 && a->lse_partial.dtype == FC_FP32 && e < lb->elems; e++)
        put_val(a->lse_partial.data, FC_FP32, e, read_lse_value(c, k->lse_mode));
    for (int64_t r = 0; shapes_ok && r < k->rows; r++)
        for (int64_t h = 0; h < k->h; h++)
            for (int64_t s = 0; s < k->n; s++) {
                int64_t il[3] = {s, r, h}, io[4] = {s, r, h, 0};
                int64_t lo = elem_at(c, &a->lse_partial, il), oo = elem_at(c, &a->out_partial, io);
                if (lo < 0 || oo < 0 || get_val(a->lse_partial.data, FC_FP32, lo) != -INFINITY) continue;
                for (int64_t x = 0; x < k->d_v; x++) put_val(a->out_partial.data, a->out_partial.dtype, oo + x, NAN);
            }
    /* a NaN written where a finite partial shares the memory (aliased views) would be read: undo it */
    for (int64_t r = 0; shapes_ok && r < k->rows; r++)
        for (int64_t h = 0; h < k->h; h++)
            for (int64_t s = 0; s < k->n; s++) {
                int64_t il[3] = {s, r, h}, io[4] = {s, r, h, 0};
                int64_t lo = elem_at(c, &a->lse_partial, il), oo = elem_at(c, &a->out_partial, io);
                if (lo < 0 || oo < 0 || get_val(a->lse_partial.data, FC_FP32, lo) == -INFINITY) continue;
                for (int64_t x = 0; x < k->d_v; x++)
                    if (isnan(get_val(a->out_partial.data, a->out_partial.dtype, oo + x))) put_val(a->out_partial.data, a->out_partial.dtype, oo + x, 1.0);
            }
}

static void check_merge_values(fcase *c, const mcase *k) {
    const fc_merge_args *a = &k->a;
    if (k->lse_mode == 3 || find_buf(c, &a->out)->overlap || (a->lse.data && find_buf(c, &a->lse)->overlap)) return;
    char msg[160];
    for (int64_t r = 0; r < k->rows; r++)
        for (int64_t h = 0; h < k->h; h++) {
            double mx = -INFINITY;
            for (int64_t s = 0; s < k->n; s++) {
                int64_t il[3] = {s, r, h};
                double l = get_val(a->lse_partial.data, FC_FP32, elem_at(c, &a->lse_partial, il));
                if (l > mx) mx = l;
            }
            int64_t io[3] = {r, h, 0}, il[2] = {r, h};
            int64_t oo = elem_at(c, &a->out, io);
            double lse = a->lse.data ? get_val(a->lse.data, FC_FP32, elem_at(c, &a->lse, il)) : mx;
            snprintf(msg, sizeof msg, "row %lld head %lld: max lse_s %g, lse %g", (long long)r, (long long)h, mx, lse);
            if (mx == -INFINITY && lse != -INFINITY) violation("merge of all -inf partials has lse != -inf", msg);
            /* lse is a float: allow one rounding of it (half an ulp: 4 at |lse| ~ 1e8) beyond the exact bounds */
            double slack = 1e-3 + fabs(mx) * 0x1p-24;
            if (mx > -INFINITY && !(lse >= mx - slack && lse <= mx + log((double)k->n) + slack))
                violation("merged lse outside [max, max + log n]", msg);
            for (int64_t x = 0; x < k->d_v; x++) {
                double y = get_val(a->out.data, a->out.dtype, oo + x);
                if (mx == -INFINITY && y != 0) violation("merge of all -inf partials has out != 0", msg);
                if (!(fabs(y) <= VAL * (1 + 1.0 / 64))) violation("merged out is not finite or exceeds max |out_s|", msg);
            }
        }
}

static void run_merge(reader *r) {
    fcase c = {0};
    mcase k = {0};
    model m = {0};
    fc_merge_args *a = &k.a;
    memset(a, 0, sizeof *a);
    c.rng = take32(r);
    static const fc_dtype dts[8] = {FC_FP32, FC_BF16, FC_FP16, FC_FP32, FC_BF16, FC_FP16, FC_INT32, (fc_dtype)9};
    int dev = pick(r, 16);
    a->device = dev < 14 ? FC_DEVICE_CPU : dev == 14 ? FC_DEVICE_CUDA : (fc_device)hostile_i32(r);
    static const int dvs[8] = {64, 1, 3, 128, 256, 65, 300, -1};
    k.n = pick(r, 16) ? 1 + pick(r, 6) : hostile_int(r);
    k.rows = pick(r, 16) ? range(r, 0, 40) : read_len(r, 40);
    k.h = 1 + pick(r, 4);
    k.d_v = dvs[pick(r, 8)];
    if (k.d_v < 0) k.d_v = range(r, 0, 600);
    k.lse_mode = pick(r, skip_class[K_MERGEPREC] ? 4 : 5);
    fc_dtype op_dt = dts[pick(r, 8)], out_dt = dts[pick(r, 8)];
    a->out_partial = make_tensor(op_dt, 4, k.n, k.rows, k.h, k.d_v, r);
    a->lse_partial = make_tensor(FC_FP32, 3, k.n, k.rows, k.h, 0, r);
    a->out = make_tensor(out_dt, 3, k.rows, k.h, k.d_v, 0, r);
    if (pick(r, 2)) a->lse = make_tensor(FC_FP32, 2, k.rows, k.h, 0, 0, r);
    size_t misalign[4] = {0};
    int n_edits = pick(r, 8) - 5;
    for (int e = 0; e < n_edits; e++) {
        int t = pick(r, 4);
        misalign[t] += mutate_tensor(merge_tensor(a, t), r);
    }
    const fc_tensor *op = &a->out_partial;
    double work = dim_or_0(op, 0) * dim_or_0(op, 1) * dim_or_0(op, 2) * (dim_or_0(op, 3) + 1) + dim_or_0(&a->out, 0);
    if (work > WORK_CAP) goto done;
    static const char *names[4] = {"out_partial", "lse_partial", "out", "lse"};
    for (int i = 0; i < 4; i++) {
        fc_tensor *t = merge_tensor(a, i);
        if (!alloc_buf(&c, t, names[i], i >= 2, misalign[i])) goto done;
        fbuf *b = find_buf(&c, t);
        if (b && i >= 2) b->may = calloc(b->bytes ? b->bytes : 1, 1);
    }
    m.ok = 1;
    int shapes_ok = merge_shapes_ok(&m, a);
    if (!shapes_ok) not_ok(&m, "shape rule");
    if (shapes_ok) { /* the model's sizes are the tensors' */
        k.n = op->shape[0]; k.rows = op->shape[1]; k.h = op->shape[2]; k.d_v = op->shape[3];
    }
    fill_merge(&c, &k, shapes_ok);
    for (int64_t r0 = 0; shapes_ok && r0 < k.rows; r0++)
        for (int64_t h = 0; h < k.h; h++) {
            int64_t io[3] = {r0, h, 0}, il[2] = {r0, h};
            int64_t oo = elem_at(&c, &a->out, io);
            for (int64_t x = 0; oo >= 0 && x < k.d_v; x++) may_write(&c, &a->out, oo + x);
            if (a->lse.data) may_write(&c, &a->lse, elem_at(&c, &a->lse, il));
        }
    if (verbose) {
        fprintf(stderr, "merge: device %d threads %d lse_mode %d model %s\n", a->device, fc_get_num_threads(), k.lse_mode, m.ok ? "valid" : m.why);
        for (int i = 0; i < 4; i++) describe_tensor(names[i], merge_tensor(a, i));
    }
    snapshot(&c);
    fc_status st = fc_merge_states(a, NULL);
    if (verbose) fprintf(stderr, "  -> %s: %s\n", fc_status_string(st), fc_last_error());
    if (st != FC_OK) {
        check_error(&c, st, "fc_merge_states");
        if (m.ok && getenv("FLASHC_FUZZ_STRICT")) violation("rejected valid arguments", fc_last_error());
        goto done;
    }
    if (!m.ok) violation("fc_merge_states accepted invalid arguments", m.why);
    const char *where = changed_outside(&c, 1);
    if (where) violation("fc_merge_states changed memory it may not write", where);
    for (int i = 0; i < c.n && !skip_class[K_OVERLAP]; i++)
        if (c.buf[i].overlap) violation("fc_merge_states accepted a written view that overlaps itself", c.buf[i].name);
    check_merge_values(&c, &k);
done:
    free_case(&c);
}

/* ---------------------------------------------------------------------------------------------- */
/* Entry points.                                                                                   */

/* The calls that take no tensors: NULL arguments, thread counts. */
static void run_small(reader *r) {
    fc_attn_args a;
    fc_attn_args_init(&a);
    size_t bytes = 7;
    fc_status st;
    switch (pick(r, 4)) {
    case 0: st = fc_attn_fwd(NULL, NULL, 0, NULL); break;
    case 1: st = fc_attn_workspace_size(NULL, &bytes); break;
    case 2: st = fc_attn_workspace_size(&a, NULL); break;
    default: st = fc_merge_states(NULL, NULL); break;
    }
    if (st == FC_OK || !names_an_argument(fc_last_error()) || bytes != 7) violation("NULL arguments accepted or unnamed", fc_last_error());
    int n = hostile_i32(r);
    st = fc_set_num_threads(n);
    if ((st == FC_OK) != (n >= 0)) violation("fc_set_num_threads status", NULL);
    if (fc_get_num_threads() < 1) violation("fc_get_num_threads < 1", NULL);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    read_switches();
    make_pools();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    fc_set_num_threads(1 + pick(&r, 3));
    int op = pick(&r, 16);
    if (op < 12) run_attn(&r);
    else if (op < 15) run_merge(&r);
    else run_small(&r);
    return 0;
}
