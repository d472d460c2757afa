/* attn.c — fc_cpu_attn_fwd: choose the split count, allocate everything, append, run the tiles on the
 * worker threads, merge the splits. */
#include <stdio.h>
#include <stdlib.h>

#include "cpu/cpu.h"

#define BM FC_CPU_BM
#define BK FC_CPU_BK

/* Tiles of sequence b: its s_q * group packed rows in tiles of BM, for each KV head. */
static int64_t tiles_of(const fc_problem *p, int b, int group) {
    int64_t rows = (int64_t)fc_seqlen_of(p, b).s_q * group;
    return (rows + BM - 1) / BM;
}

/* All tiles, or -1 if they are more than INT64_MAX / FC_MAX_SPLITS (work items = tiles * splits). */
static int64_t count_tiles(const fc_problem *p, int group) {
    int64_t n = 0, per;
    for (int b = 0; b < p->batch; b++)
        if (__builtin_mul_overflow(tiles_of(p, b, group), (int64_t)p->h_k, &per) || __builtin_add_overflow(n, per, &n) ||
            n > INT64_MAX / FC_MAX_SPLITS)
            return -1;
    return n;
}

static int longest_key_blocks(const fc_problem *p) {
    int64_t most = 0;
    for (int b = 0; b < p->batch; b++) {
        int s_k = fc_seqlen_of(p, b).s_k;
        if (s_k > most) most = s_k;
    }
    return (int)((most + BK - 1) / BK);
}

/* Last tiles first within each (sequence, KV head): under a causal mask they see the most keys. */
static void fill_tiles(const fc_problem *p, int group, fc_cpu_tile *tiles) {
    int64_t n = 0;
    for (int b = 0; b < p->batch; b++) {
        int64_t rows = (int64_t)fc_seqlen_of(p, b).s_q * group; /* < 2^30: api.c checks it */
        int64_t nt = tiles_of(p, b, group);
        for (int hk = 0; hk < p->h_k; hk++)
            for (int64_t t = nt - 1; t >= 0; t--) {
                int64_t m0 = t * BM;
                tiles[n++] = (fc_cpu_tile){b, hk, (int)m0, (int)(rows - m0 < BM ? rows - m0 : BM)};
            }
    }
}

static void run_item(void *ctx, int64_t item, int worker) {
    const fc_cpu_attn *a = ctx;
    a->run(a, &a->tiles[item / a->splits], (int)(item % a->splits), a->scratch + worker * a->scratch_floats);
}

static void merge_item(void *ctx, int64_t item, int worker) {
    const fc_cpu_attn *a = ctx;
    fc_cpu_merge_tile(a, &a->tiles[item]);
}

/* n floats, 64-byte aligned; NULL when n * 4 bytes does not fit in memory (size_t). */
static void *alloc_floats(size_t n) {
    if (n > (SIZE_MAX - 63) / sizeof(float)) return NULL;
    size_t bytes = ((n * sizeof(float)) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

/* a * b, or SIZE_MAX when it overflows (an allocation of that size fails). */
static size_t mul_size(size_t a, size_t b) {
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

static void free_run(fc_cpu_attn *a) {
    free((void *)a->tiles);
    free(a->scratch);
    free(a->part_out);
    free(a->part_lse);
}

/* Everything the run needs, before anything is written: nothing changes if this fails. */
static fc_status allocate_run(fc_cpu_attn *a, int workers) {
    const fc_problem *p = a->p;
    size_t tiles = mul_size(sizeof(fc_cpu_tile), (size_t)(a->n_tiles > 0 ? a->n_tiles : 1));
    a->tiles = tiles < SIZE_MAX ? malloc(tiles) : NULL;
    a->scratch = alloc_floats(mul_size(a->scratch_floats, (size_t)workers));
    size_t part = a->splits > 1 ? mul_size(mul_size((size_t)a->splits, (size_t)a->part_rows), (size_t)p->h_q) : 0;
    a->part_out = part ? alloc_floats(mul_size(part, (size_t)p->d_v)) : NULL;
    a->part_lse = part ? alloc_floats(part) : NULL;
    if (a->tiles && a->scratch && (!part || (a->part_out && a->part_lse))) return FC_OK;
    free_run(a);
    return fc_fail(FC_ERR_OUT_OF_MEMORY, "workspace", "cannot allocate the CPU scratch (%d workers, %d splits)",
                   workers, a->splits);
}

/* Threads for p: work too small to split (under ~1M multiply-adds, tens of microseconds) runs on the
 * calling thread: starting workers would cost more than they take off. */
static int plan_threads(const fc_problem *p) {
    double work = (double)p->total_q * p->h_q * ((double)longest_key_blocks(p) * BK) * (p->d + p->d_v);
    return work < (1 << 20) ? 1 : fc_get_num_threads();
}

int fc_cpu_splits(const fc_problem *p) {
    int64_t tiles = count_tiles(p, p->h_q / p->h_k);
    return tiles < 0 ? 1 : fc_plan_num_splits(p->num_splits, tiles, longest_key_blocks(p), plan_threads(p));
}

int fc_cpu_describe(const fc_problem *p, char *buf, size_t n) {
    int threads = plan_threads(p), splits = fc_cpu_splits(p);
    int64_t tiles = count_tiles(p, p->h_q / p->h_k);
    return snprintf(buf, n, "cpu: %lld tiles of %d packed query rows x %d-key blocks, %d split%s, %d thread%s, %s",
                    (long long)tiles, BM, BK, splits, splits == 1 ? "" : "s", threads, threads == 1 ? "" : "s",
                    fc_cpu_isa_chosen()->name);
}

fc_status fc_cpu_attn_fwd(const fc_problem *p) {
    fc_cpu_attn a = {0};
    a.p = p;
    a.group = p->h_q / p->h_k;
    a.run = fc_cpu_isa_chosen()->run;
    a.qscale = p->softcap > 0.0f ? 1.0f : p->scale;
    a.n_tiles = count_tiles(p, a.group);
    if (a.n_tiles < 0) return fc_fail(FC_ERR_OUT_OF_MEMORY, "workspace", "too many tiles of %d query rows to list", BM);
    a.part_rows = p->total_q;
    a.scratch_floats = fc_cpu_scratch_floats(p);
    int threads = plan_threads(p);
    a.splits = fc_plan_num_splits(p->num_splits, a.n_tiles, longest_key_blocks(p), threads);
    int64_t items = a.n_tiles * a.splits;
    int workers = items < threads ? (int)(items > 0 ? items : 1) : threads;

    fc_status st = allocate_run(&a, workers);
    if (st != FC_OK) return st;
    fill_tiles(p, a.group, (fc_cpu_tile *)a.tiles);

    if (p->k_new.data) fc_cpu_append(p, a.scratch);
    fc_cpu_parallel_for(items, workers, run_item, &a);
    if (a.splits > 1) fc_cpu_parallel_for(a.n_tiles, workers, merge_item, &a);
    free_run(&a);
    return FC_OK;
}
