/* problem.h — the attention tests' random cases (test_cpu, gpu_attn): config, host build, references, groups. */
#ifndef FLASHC_TESTS_PROBLEM_H
#define FLASHC_TESTS_PROBLEM_H

#include "testutil.h"

enum { KV_DENSE, KV_VARLEN, KV_PAGED };
enum { LAYOUT_CONTIG, LAYOUT_PADDED, LAYOUT_PACKED };
enum { MAX_BATCH = 8, MAX_ALLOCS = 40, MAX_SPLITS = 4, MAX_SKIP_KINDS = 24 };

/* One test case: shapes, layouts and options. s_k is the key length of dense KV, the longest
 * sequence of varlen KV, the capacity of each sequence of paged KV. */
typedef struct cfg {
    fc_dtype dt;
    int b, s_q, s_k, h_q, h_k, d, d_v;
    int causal, wl, wr;
    float softcap, scale;
    int alibi;      /* 0 none, 1 (h_q), 2 (b, h_q) */
    int sinks, lse; /* 1: given */
    int q_varlen, kv, page_size;
    int seqused;    /* 0 none (paged/append: full), 1 random, 2 random with sequence 0 at 0 */
    int layout;     /* LAYOUT_*: padded strides (padding NaN), or q/k/v slices of a packed qkv */
    int nan_unused; /* cache rows past seqused_k hold NaN; unused page-table entries are -1 */
    int s_new, rot_dim, rot_inter, rot_f32;
    int nsplits, splits[MAX_SPLITS];
    int threads;    /* > 0: fc_set_num_threads for this case (test_cpu) */
    int fp8;        /* k/v cache: 0 the dtype of q, 1 e4m3, 2 e5m2 */
    int fp8_q;      /* 1: q too in the cache's fp8 format (FP8 attention; out in dt) */
    int descale;    /* fp8: 0 none, 1 k/v_descale (b, h_k), 2 one value broadcast (zero strides) */
    int kv_index;   /* dense caches: bit 1 kv_batch_idx (a cache of b + 1 rows, in reverse), bit 2 kv_leftpad */
} cfg;

/* (d, d_v) pairs off the kernel set (multiples of 8: CUDA runs them on the next kernel up), for the
 * odd_dims sweeps of test_cpu and gpu_attn. */
enum { N_ODD_DIMS = 12 };
__attribute__((unused)) static const int ODD_DIMS[N_ODD_DIMS][2] = {
    {8, 8}, {40, 40}, {72, 72}, {120, 120}, {136, 136}, {200, 200}, {248, 248}, {72, 40}, {8, 256}, {256, 8},
    {184, 128}, {80, 96}};

/* The dtype of the case's k and v. */
static inline fc_dtype cfg_kv_dtype(const cfg *c) { return c->fp8 == 1 ? FC_E4M3 : c->fp8 == 2 ? FC_E5M2 : c->dt; }
static inline fc_dtype cfg_q_dtype(const cfg *c) { return c->fp8_q ? cfg_kv_dtype(c) : c->dt; }

/* How a program builds its cases: what the CPU backend's tests and the CUDA backend's differ in. */
typedef struct prob_opts {
    int pad;        /* extra elements of a padded stride and at a padded tensor's end; 0: odd amounts
                     * (2 + k for dimension k, 5 at the end); 8: 16-byte multiples of bf16/fp16 */
    int pad_all;    /* padded layouts pad lse and the rotary tables too, and LAYOUT_PACKED pads out;
                     * else only q, k, v, out (and the page table) of LAYOUT_PADDED */
    int max_seqlen; /* varlen: max_seqlen_q / max_seqlen_k given (else 0: the library computes them) */
    int fast_fill;  /* bf16/fp16 values from a pre-encoded pool, cache rows written once (large caches) */
} prob_opts;

/* A host allocation and, where the program mirrors it to a device (gpu_attn), that copy. */
typedef struct buf {
    void *host, *dev;
    size_t bytes;
} buf;

/* A region of elements (out, lse, caches): one whole buffer. */
typedef struct region {
    int buf;
    fc_dtype dt;
    int64_t n;
} region;

/* A built case: host arguments, buffers and the per-sequence lengths. */
typedef struct prob {
    cfg c;
    const prob_opts *o;
    fc_attn_args a;
    buf mem[MAX_ALLOCS];
    int nmem;
    uint64_t rng;
    int64_t total_q, q_row0[MAX_BATCH];
    int len_q[MAX_BATCH], cap[MAX_BATCH], s_cache[MAX_BATCH];
    int kv_row[MAX_BATCH], pad[MAX_BATCH]; /* dense: the cache row of each sequence, its first key's row */
    region out, lse, kc, vc;
    unsigned char *k_snap, *v_snap; /* the caches as built (before any append) */
    double vmax;                    /* largest finite |v| of the cache and v_new (the scale of out) */
} prob;

cfg cfg_base(void);
void describe(const cfg *c, char *s, size_t n);
/* mask: 0 none, 1 causal, 2 local window, 3 causal with a left window. */
void set_mask(cfg *c, int mask);
/* Random draws of every axis but dtype, heads and head dims (the mixed sweeps). */
void mix_axes(cfg *c, uint64_t *r);

void prob_build(prob *P, const cfg *c, const prob_opts *o, uint64_t seed);
/* n random normal values of dt into p (bf16/fp16: drawn from a pre-encoded pool, fast on large tensors). */
void fill_random(void *p, fc_dtype dt, int64_t n, uint64_t *rng);
void prob_free(prob *P); /* host memory only: the program frees its device copies first */
void *reg_host(const prob *P, const region *r);
size_t reg_bytes(const region *r);
/* Caches back to the snapshots, out and lse to NaN (the poison). */
void prob_restore_cache(prob *P);
void prob_poison_out(prob *P);

/* Element offsets: key row j of sequence b, head h in cache tensor t; query row r of sequence b in out, lse. */
int64_t kv_off(const prob *P, const fc_tensor *t, int b, int64_t j, int h);
int64_t out_off(const prob *P, int b, int64_t r, int h);
int64_t lse_off(const prob *P, int b, int64_t r, int h);
/* Elements of region r outside the view t whose bytes in got differ from poison (one element's bytes). */
int64_t padding_touched(const region *r, const fc_tensor *t, const void *got, const void *poison);

/* ref64 both ways (float64; the kernels' rounding steps) on every row_step-th global query row. */
typedef struct refs {
    double *out, *low, *lse, *lse_low;
    double *slack;                   /* ref64_pair's FP8 MMA slack: (total_q, h_q, d_v + 1), sampled rows */
    double slack_max, lse_slack_max; /* their largest over the sampled rows (0 without FP8 attention) */
    int64_t slack_n;                 /* total_q h_q */
    int row_step, h_q, d_v;
} refs;

refs refs_new(const prob *P, int row_step);
int refs_run(const fc_attn_args *a, refs *R); /* the two in parallel; 0, or -1 where ref64 cannot read a */
/* The FP8 MMA's slack of out element e (< d_v) or of the lse (e = d_v) of global row `row`, head h: ref64's
 * bound where the row is sampled, else the largest bound of the sampled rows (the last row of every
 * sequence, which sees the most keys, is among them). 0 without FP8 attention. */
double refs_slack(const refs *R, int sampled, int64_t row, int h, int e);
double refs_err_low(const prob *P, const refs *R); /* max |low - out| over the sampled rows */
void refs_free(refs *R);
/* FlashAttention's rule, as the tests apply it: over the sampled elements,
 *     max (|out - ref64| - half a step of out's dtype at that value) <= 2 max|ref_lowp - ref64| + 1e-5,
 * i.e. the value the kernel computed before its final store is within FlashAttention's bound; the store
 * may round it either way (tu_err_beyond_rounding). Without that, the bound (which counts ref_lowp's own
 * output rounding once) is below one step of bf16 / fp16 where |out| > 1 and the tolerance is small, and
 * a correct kernel whose fp32 sum lies on the other side of a midpoint fails (gpu_random seeds 5901,
 * 8018). FlashAttention-3's tests allow more: 2 max|(o + 0.3) - 0.3 - o| over the whole output. */
double tol_of(double err_low); /* 2 max|ref_lowp - ref64| + 1e-5 */
/* The row step of refs_new that keeps ref64's work near budget multiply-adds (at least 8 rows; odd). */
int refs_row_step(const prob *P, double budget);

/* The cache after an append against flashc.h's statement of it: the appended rows hold v_new exactly and
 * k_new rotated at its positions (within a rounding of the float64 rotation), every other byte as built.
 * Returns the number of bad elements. */
int64_t prob_cache_bad(const prob *P);

/* Per-group statistics: one line of output per group. */
typedef struct skip_kind {
    char what[160];
    int count;
    char example[200];
} skip_kind;

typedef struct group {
    const char *name;
    int cases, checks, failed;
    double worst;
    char worst_case[320];
    /* gpu_attn: cases seen (also those FLASHC_GPU_QUICK passes over), unsupported ones by message */
    int seen, skipped;
    double worst_cpu_diff;
    skip_kind skips[MAX_SKIP_KINDS];
    int nskip_kinds;
} group;

void worst_update(double *worst, double ratio); /* NaN counts as infinite */
void group_note(group *g, int ok, double ratio, const char *desc);

typedef struct sweep {
    const char *name;
    void (*run)(group *);
} sweep;

double now_s(void);
/* Runs each sweep (only the one named only, if not NULL) as a group, printing it with print. */
void run_sweeps(const sweep *s, size_t n, const char *only, void (*print)(const group *g, double seconds));

#endif /* FLASHC_TESTS_PROBLEM_H */
