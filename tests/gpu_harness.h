/* gpu_harness.h — the GPU tests' shared harness: device mirror of a prob, one GPU run, comparison, checks. */
/*
 * Included by gpu_attn.c, gpu_random.c and gpu_big.c (device access only); static functions, so no
 * Makefile rule is needed. A case built on the host (problem.h) is mirrored to the device (mirror), run
 * there with NaN-poisoned outputs on a non-default stream (gpu_run_once), then compared with the CPU
 * backend's result on the host copies and with ref64 on sampled rows (compare, check_run, check_agree).
 *
 * Environment read by harness_init:
 *   FLASHC_GPU_QUICK=N    a reduced run for compute-sanitizer (what "reduced" means is the program's)
 *   FLASHC_GPU_FAKE=1     the CPU backend stands in for the GPU (tests the harness without a GPU)
 *   FLASHC_GPU_VERBOSE=1  list every skipped case
 *   FLASHC_GPU_UNINIT_WS=1  workspaces straight from cudaMalloc, never written by the test (under
 *                         compute-sanitizer initcheck: a read of workspace the library did not write
 *                         is then reported); otherwise they are poisoned with 0xff bytes (NaN)
 */
#ifndef FLASHC_GPU_HARNESS_H
#define FLASHC_GPU_HARNESS_H

#include <unistd.h>

#include "gpu_util.h"
#include "problem.h"
#include "ref64.h"

/* ---------------------------------------------------------------------------------------------- */
/* Options and device access (real CUDA, or the CPU backend standing in for it with FLASHC_GPU_FAKE) */

static int g_quick, g_fake, g_verbose, g_uninit_ws;
static unsigned g_runs; /* GPU runs so far: every third goes through fc_plan_create / fc_plan_run */
static cudaStream_t g_stream;
static double g_ref_budget = 1.5e8; /* float64 multiply-adds per ref64 call (rows are sampled to fit) */

static inline int env_flag(const char *name) {
    const char *s = getenv(name);
    return s && *s && strcmp(s, "0") != 0;
}

/* Device memory (host memory when faked), contents undefined: the mirror uploads every byte of it. */
static inline void *dev_alloc(size_t bytes) {
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

/* A workspace: poisoned (flashc may not rely on its contents), or left unwritten with
 * FLASHC_GPU_UNINIT_WS. cudaMemset runs on the legacy stream, which does not order with g_stream
 * (non-blocking): wait for it. */
static inline void *dev_alloc_ws(size_t bytes) {
    void *p = dev_alloc(bytes);
    if (g_fake || g_uninit_ws) return p;
    cuda_die(cudaMemset(p, 0xff, bytes ? bytes : 256), "cudaMemset");
    cuda_die(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return p;
}

static inline void dev_free(void *p) {
    if (!p) return;
    if (g_fake) free(p);
    else cuda_die(cudaFree(p), "cudaFree");
}

static inline void to_dev(void *dst, const void *src, size_t bytes) {
    if (g_fake) {
        memcpy(dst, src, bytes);
        return;
    }
    cuda_die(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_stream), "cudaMemcpyAsync H2D");
    cuda_die(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
}

static inline void to_host(void *dst, const void *src, size_t bytes) {
    if (g_fake) {
        memcpy(dst, src, bytes);
        return;
    }
    cuda_die(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_stream), "cudaMemcpyAsync D2H");
    cuda_die(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
}

/* Waits for the stream; a kernel fault shows here. */
static inline cudaError_t dev_sync(void) {
    if (g_fake) return cudaSuccess;
    cudaError_t e = cudaStreamSynchronize(g_stream);
    return e != cudaSuccess ? e : cudaGetLastError();
}

static inline fc_device gpu_device(void) { return g_fake ? FC_DEVICE_CPU : FC_DEVICE_CUDA; }

/* The CUDA backend's layouts: padding in 16-byte multiples of q, k, v, out only; max_seqlen given. Large
 * caches: fast fills. */
__attribute__((unused)) static const prob_opts OPTS = {.pad = 8, .pad_all = 0, .max_seqlen = 1, .fast_fill = 1};

static double g_worst_ratio;
static int g_total_skipped;

/* Reads the environment, finds the device (prints what stands in for it), sets the CPU backend's
 * threads (all cores, at most 16). Returns 0, or -1 when there is no CUDA device (exit 2). */
static inline int harness_init(const char *prog) {
    const char *quick = getenv("FLASHC_GPU_QUICK");
    g_quick = env_flag("FLASHC_GPU_QUICK") ? atoi(quick) : 0;
    if (env_flag("FLASHC_GPU_QUICK") && g_quick < 2) g_quick = 1;
    g_fake = env_flag("FLASHC_GPU_FAKE");
    g_verbose = env_flag("FLASHC_GPU_VERBOSE");
    g_uninit_ws = env_flag("FLASHC_GPU_UNINIT_WS");
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (g_fake) {
        printf("%s: FLASHC_GPU_FAKE=1: the CPU backend stands in for the GPU (harness self-test)\n", prog);
    } else if (!cuda_device_present() || !fc_cuda_available()) {
        printf("%s: no CUDA device (or flashc built without CUDA): GPU tests not run\n", prog);
        return -1;
    } else {
        struct cudaDeviceProp prop;
        cuda_die(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
        cuda_die(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        printf("%s: %s (sm_%d%d, %d SMs)\n", prog, prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    fc_set_num_threads(cores > 16 ? 16 : cores > 0 ? (int)cores : 1);
    return 0;
}

static inline void harness_done(void) {
    if (!g_fake) cudaStreamDestroy(g_stream);
}

/* ---------------------------------------------------------------------------------------------- */
/* The device mirror                                                                                */

/* Every tensor field of an fc_attn_args (NULL-terminated). */
static inline void arg_tensors(fc_attn_args *a, fc_tensor **t) {
    fc_tensor *list[] = {&a->q, &a->k, &a->v, &a->out, &a->lse, &a->cu_seqlens_q, &a->cu_seqlens_k,
                         &a->seqused_k, &a->page_table, &a->k_new, &a->v_new, &a->rotary_cos, &a->rotary_sin,
                         &a->alibi_slopes, &a->sinks, &a->kv_batch_idx, &a->kv_leftpad, &a->seqused_q,
                         &a->k_descale, &a->v_descale, &a->q_descale, NULL};
    memcpy(t, list, sizeof list);
}

/* Copies every buffer to the device; returns the arguments with device pointers. */
static inline fc_attn_args mirror(prob *P) {
    for (int i = 0; i < P->nmem; i++) {
        P->mem[i].dev = dev_alloc(P->mem[i].bytes);
        to_dev(P->mem[i].dev, P->mem[i].host, P->mem[i].bytes);
    }
    fc_attn_args d = P->a;
    d.device = gpu_device();
    fc_tensor *t[24];
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
static inline void reg_upload(const prob *P, const region *r, const void *src) {
    to_dev(P->mem[r->buf].dev, src, reg_bytes(r));
}

static inline void reg_download(const prob *P, const region *r, void *dst) {
    to_host(dst, P->mem[r->buf].dev, reg_bytes(r));
}

/* The device copies, then the host buffers. */
static inline void prob_release(prob *P) {
    for (int i = 0; i < P->nmem; i++) {
        dev_free(P->mem[i].dev);
        P->mem[i].dev = NULL;
    }
    prob_free(P);
}

/* ---------------------------------------------------------------------------------------------- */
/* One GPU run                                                                                      */

/* What a GPU run left: status, and the out/lse/caches copied back. */
typedef struct gpu_run {
    fc_status st;
    char msg[320];
    unsigned char *out, *lse, *kc, *vc;
} gpu_run;

static inline void gpu_run_free(gpu_run *r) {
    free(r->out);
    free(r->lse);
    free(r->kc);
    free(r->vc);
    memset(r, 0, sizeof *r);
}

static inline void set_msg(gpu_run *r, fc_status st, const char *where) {
    r->st = st;
    snprintf(r->msg, sizeof r->msg, "%s: %s: %s", where, fc_status_string(st), fc_last_error());
}

/* Poisons out/lse on the device (and restores the caches there), runs, copies the results back. */
static inline void gpu_run_once(prob *P, fc_attn_args *d, const void *out_poison, const void *lse_poison,
                                const void *k_pristine, const void *v_pristine, gpu_run *r) {
    memset(r, 0, sizeof *r);
    reg_upload(P, &P->out, out_poison);
    if (P->c.lse) reg_upload(P, &P->lse, lse_poison);
    if (P->c.s_new) {
        reg_upload(P, &P->kc, k_pristine);
        reg_upload(P, &P->vc, v_pristine);
    }
    size_t ws_bytes = 0;
    fc_plan *plan = NULL;
    int via_plan = g_runs++ % 3 == 2;
    fc_status st = via_plan ? fc_plan_create(d, &plan) : fc_attn_workspace_size(d, &ws_bytes);
    if (st == FC_OK && via_plan) st = fc_plan_workspace_size(plan, &ws_bytes);
    if (st != FC_OK) {
        set_msg(r, st, via_plan ? "fc_plan_create" : "fc_attn_workspace_size");
        fc_plan_destroy(plan);
        return;
    }
    void *ws = ws_bytes ? dev_alloc_ws(ws_bytes) : NULL;
    void *stream = g_fake ? NULL : (void *)g_stream;
    st = via_plan ? fc_plan_run(plan, d, ws, ws_bytes, stream) : fc_attn_fwd(d, ws, ws_bytes, stream);
    fc_plan_destroy(plan);
    if (st != FC_OK) set_msg(r, st, via_plan ? "fc_plan_run" : "fc_attn_fwd");
    cudaError_t e = dev_sync();
    if (e != cudaSuccess && r->st == FC_OK) {
        r->st = FC_ERR_CUDA;
        snprintf(r->msg, sizeof r->msg, "after fc_attn_fwd: %s", cudaGetErrorString(e));
    }
    dev_free(ws);
    if (e != cudaSuccess) return; /* a sticky fault: copies would fail */
    if (r->st == FC_OK) { /* a valid call: the kernels must have recorded nothing */
        st = fc_check_errors(g_fake ? NULL : (void *)g_stream);
        if (st != FC_OK) set_msg(r, st, "fc_check_errors");
    }
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

/* ref64's sampled rows: the work near g_ref_budget. */
static inline int pick_row_step(const prob *P) { return refs_row_step(P, g_ref_budget); }

/* An element of out and its values: sequence, row, head, feature; gpu, cpu, ref64 and lowp (NaN: not sampled). */
typedef struct cmp_where {
    int64_t at[4];
    double gpu, cpu, ref, lowp;
} cmp_where;

typedef struct cmp {
    double err, err_low, cpu_diff, lse_err;
    double tol, ratio; /* tol_of(err_low), set first; max of |gpu - ref64| beyond rounding / (tol + slack) */
    double cpu_excess; /* max over elements of |gpu - cpu| - eps(dtype) (|cpu| + max|v|): roundings of out, P;
                        * less refs_slack (FP8 attention) */
    cmp_where at;      /* where cpu_excess is (ref: NaN where the row is not sampled) */
    cmp_where err_at;  /* where err is (sampled rows) */
    int64_t nans, masked_bad, lse_bad, pad_bad, cache_bad, cache_rot_ulp;
} cmp;

/* out of one query row and head: against ref64 (sampled rows) and the CPU (every row). */
static inline void cmp_row(const prob *P, const refs *R, const gpu_run *g, int b, int64_t r, int h, cmp *m) {
    const cfg *c = &P->c;
    int64_t row = P->q_row0[b] + r, o = out_off(P, b, r, h);
    const void *cpu = reg_host(P, &P->out);
    int sampled = ref64_sampled(row, r, P->len_q[b], R->row_step), masked = 0;
    int64_t k0 = (row * c->h_q + h) * c->d_v;
    if (c->lse) {
        double cl = ((const float *)reg_host(P, &P->lse))[lse_off(P, b, r, h)];
        double gl = ((const float *)g->lse)[lse_off(P, b, r, h)];
        masked = cl == -INFINITY;
        if (masked) {
            if (gl != -INFINITY) m->lse_bad++;
        } else { /* FP8 attention: less what the FP8 MMA's sums may move it (refs_slack) */
            double e = (fabs(gl - cl) - refs_slack(R, sampled, row, h, c->d_v)) / (1 + fabs(cl));
            if (!(e <= 1e-3)) m->lse_bad++;
            if (!(e <= m->lse_err)) m->lse_err = e;
        }
    }
    for (int e = 0; e < c->d_v; e++) {
        double x = tu_load(g->out, c->dt, o + e), y = tu_load(cpu, c->dt, o + e);
        if (isnan(x)) m->nans++;
        if (masked && x != 0) m->masked_bad++;
        /* One rounding of the value, and of one P_j (the GPU and the CPU may round a P_j to the input type
         * differently: out moves by up to eps(dtype) max|v|, seen where out is small by cancellation) */
        double sl = refs_slack(R, sampled, row, h, e); /* FP8 attention's q.k sums, else 0 */
        double dc = fabs(x - y), ex = dc - tu_eps(c->dt) * (fabs(y) + P->vmax) - sl;
        if (!(dc <= m->cpu_diff)) m->cpu_diff = isnan(dc) ? INFINITY : dc;
        int64_t k = k0 + e;
        cmp_where here = {{b, r, h, e}, x, y, sampled ? R->out[k] : NAN, sampled ? R->low[k] : NAN};
        if (!(ex <= m->cpu_excess)) m->cpu_excess = isnan(ex) ? INFINITY : ex, m->at = here;
        if (!sampled) continue;
        double eb = tu_err_beyond_rounding(c->dt, x, R->out[k]), er = eb - sl;
        double ratio = isnan(eb) ? INFINITY : eb / (m->tol + sl); /* <= 1 exactly when er <= tol */
        if (ratio > m->ratio) m->ratio = ratio;
        if (!(er <= m->err)) m->err = isnan(er) ? INFINITY : er, m->err_at = here;
    }
}

/* The device cache after the append against the CPU's, byte for byte; counts separately the rotated
 * features that differ by one unit in the last place (rounding of the rotation). */
static inline void cmp_cache(const prob *P, const gpu_run *g, cmp *m) {
    const region *rs[2] = {&P->kc, &P->vc};
    const unsigned char *got[2] = {g->kc, g->vc};
    for (int w = 0; w < 2; w++) {
        size_t es = tu_esize(rs[w]->dt); /* the cache's dtype (fp8 caches: 1 byte) */
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

static inline cmp compare(const prob *P, const refs *R, const gpu_run *g, const unsigned char *out_poison) {
    const cfg *c = &P->c;
    cmp m;
    memset(&m, 0, sizeof m);
    m.err_low = refs_err_low(P, R);
    m.tol = tol_of(m.err_low);
    for (int b = 0; b < c->b; b++)
        for (int64_t r = 0; r < P->len_q[b]; r++)
            for (int h = 0; h < c->h_q; h++) cmp_row(P, R, g, b, r, h, &m);
    if (c->layout == LAYOUT_PADDED) m.pad_bad = padding_touched(&P->out, &P->a.out, g->out, out_poison);
    if (c->s_new) cmp_cache(P, g, &m);
    return m;
}

/* ---------------------------------------------------------------------------------------------- */
/* Recording                                                                                        */

/* An unsupported combination: counted and listed by its message, never passed. */
static inline void group_skip(group *g, const char *msg, const char *desc) {
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
    snprintf(k->what, sizeof k->what, "%.*s", (int)sizeof k->what - 1, msg); /* cut to fit */
    snprintf(k->example, sizeof k->example, "%.*s", (int)sizeof k->example - 1, desc);
    k->count = 1;
}

/* Checks one GPU run against the CPU and the references; returns the ratio. */
static inline double check_run(group *g, const prob *P, const refs *R, const gpu_run *gr, int splits,
                               const unsigned char *out_poison, const char *desc) {
    const cfg *c = &P->c;
    cmp m = compare(P, R, gr, out_poison);
    double tol = m.tol, ratio = m.ratio; /* FP8 attention: the ratio to tol + slack */
    if (m.nans || m.masked_bad) ratio = INFINITY;
    if (m.cpu_diff > g->worst_cpu_diff) g->worst_cpu_diff = m.cpu_diff;
    int ok = tu_check(m.nans == 0 && m.masked_bad == 0 && m.err <= tol,
                      "%s [%s] split %d: |gpu-ref64| beyond rounding (and FP8 MMA slack, up to %.3g) %.3g, "
                      "max|lowp-ref64| %.3g, ratio %.3g, NaN %lld, "
                      "masked rows nonzero %lld (rows every %d; the max at sequence %lld row %lld head %lld feature "
                      "%lld: gpu %.6g cpu %.6g ref64 %.6g lowp %.6g)",
                      g->name, desc, splits, R->slack_max, m.err, m.err_low, ratio, (long long)m.nans,
                      (long long)m.masked_bad, R->row_step, (long long)m.err_at.at[0], (long long)m.err_at.at[1], (long long)m.err_at.at[2],
                      (long long)m.err_at.at[3], m.err_at.gpu, m.err_at.cpu, m.err_at.ref, m.err_at.lowp);
    group_note(g, ok, ratio, desc);
    worst_update(&g_worst_ratio, ratio);
    ok = tu_check(m.cpu_excess <= 2 * tol,
                  "%s [%s] split %d: |gpu-cpu| - eps|cpu| up to %.3g, over 2 x tolerance %.3g (max|gpu-cpu| %.3g; at "
                  "sequence %lld row %lld head %lld feature %lld: gpu %.6g cpu %.6g ref64 %.6g)",
                  g->name, desc, splits, m.cpu_excess, 2 * tol, m.cpu_diff, (long long)m.at.at[0],
                  (long long)m.at.at[1], (long long)m.at.at[2], (long long)m.at.at[3], m.at.gpu, m.at.cpu, m.at.ref);
    group_note(g, ok, 0, desc);
    if (c->lse) {
        ok = tu_check(m.lse_bad == 0,
                      "%s [%s] split %d: lse %lld bad against the CPU's, worst rel err %.3g (beyond FP8 MMA slack, up "
                      "to %.3g)", g->name, desc, splits, (long long)m.lse_bad, m.lse_err, R->lse_slack_max);
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

/* Splits agree with the first split count: each is within the tolerance of ref64 (and FP8 attention's
 * slack), so within twice it of each other, plus one rounding of the output value (every row is compared;
 * the tolerance comes from the sampled ones, whose outputs may be smaller). */
static inline void check_agree(group *g, const prob *P, const refs *R, gpu_run *runs, int n, const char *desc) {
    const cfg *c = &P->c;
    double tol = 2 * tol_of(refs_err_low(P, R));
    for (int s = 1; s < n; s++) {
        if (runs[s].st != FC_OK || runs[0].st != FC_OK) continue;
        double diff = 0;
        for (int b = 0; b < c->b; b++)
            for (int64_t r = 0; r < P->len_q[b]; r++) {
                int64_t row = P->q_row0[b] + r;
                int sampled = ref64_sampled(row, r, P->len_q[b], R->row_step);
                for (int h = 0; h < c->h_q; h++)
                    for (int e = 0; e < c->d_v; e++) {
                        int64_t o = out_off(P, b, r, h) + e;
                        double x = tu_load(runs[s].out, c->dt, o), y = tu_load(runs[0].out, c->dt, o);
                        double ex = fabs(x - y) - tu_eps(c->dt) * fmax(fabs(x), fabs(y)) -
                                    2 * refs_slack(R, sampled, row, h, e);
                        diff = isnan(x) || isnan(y) ? INFINITY : fmax(diff, ex);
                    }
            }
        int ok = tu_check(diff <= tol, "%s [%s]: splits %d and %d differ by %.3g beyond one rounding (and twice FP8 "
                          "attention's slack; tolerance %.3g)",
                          g->name, desc, c->splits[0], c->splits[s], diff, tol);
        group_note(g, ok, 0, desc);
    }
}


#endif /* FLASHC_GPU_HARNESS_H */
