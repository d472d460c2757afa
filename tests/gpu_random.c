/* gpu_random.c — seeded randomized differential test: the CUDA backend against the CPU backend and float64. */
/*
 * Case i of a run is the case of seed FIRST + i (random_case.h draws every axis from the seed: dtype,
 * d and d_v, heads, lengths 0 and 1 to 2048, masks, softcap, ALiBi, sinks, lse, dense / varlen / paged
 * KV with page sizes 1 to 256, varlen queries with empty sequences, append with and without rotary,
 * padded and packed layouts, num_splits 1 to 128 and 0). Each case runs on the GPU twice with the same
 * num_splits, and once more with a second count where the case draws one; then on the CPU backend
 * (host copies) and ref64 on sampled rows. Checks (gpu_harness.h's, as gpu_attn):
 *   |gpu - ref64| beyond out's rounding <= 2 max|ref_lowp - ref64| + 1e-5 (FlashAttention's rule,
 *   problem.h) on the sampled rows;
 *   |gpu - cpu| - eps|cpu| <= twice that on every row; lse within 1e-3 (1 + |lse|) of the CPU's;
 *   rows with no visible key exactly 0 / -inf; no NaN; padding of out untouched; the cache after an
 *   append equal to the CPU's byte for byte; a second split count within tolerance of the first;
 *   and determinism: the second run's out, lse and cache bitwise equal to the first's.
 * FC_ERR_UNSUPPORTED counts as SKIPPED (listed, never passed); any other error is a failure.
 *
 * Every failure names its seed ("random [seed S: <case>] ..."), and the end lists the failed seeds.
 *
 * usage: gpu_random [--cases N] [--first S]   N cases (default 10000) of seeds S, S+1, ... (default 1)
 *        gpu_random --seed S                   exactly the case of seed S (a failure's reproduction)
 *        gpu_random --list N                   prints the first N cases' descriptions, runs nothing
 * environment: FLASHC_GPU_QUICK=N  a reduced run for compute-sanitizer: 600/N cases by default, small
 *                                  ones only (a seed whose case is large is passed over);
 *              FLASHC_GPU_FAKE=1   the CPU backend stands in for the GPU (harness self-test);
 *              FLASHC_GPU_UNINIT_WS=1 workspaces left unwritten (initcheck); FLASHC_GPU_VERBOSE=1.
 * test_random runs the CPU half of the same seeds (CPU backend against float64) in make test.
 * Exit: 0 all passed, 1 something failed, 2 no CUDA device.
 */
#include "gpu_harness.h"
#include "random_case.h"

enum { MAX_FAILED_SEEDS = 50 };

static uint64_t g_failed_seeds[MAX_FAILED_SEEDS];
static int g_nfailed_seeds, g_passed_cases;

/* Seconds spent per phase: building on the host, the GPU runs (uploads, runs, downloads), the CPU
 * backend, ref64, the comparisons. */
static double g_t_build, g_t_gpu, g_t_cpu, g_t_ref, g_t_check;

/* Cases per feature, to show what a run covered. */
static int g_cov_fp16, g_cov_dv, g_cov_gqa, g_cov_mqa, g_cov_empty, g_cov_one, g_cov_long, g_cov_paged,
    g_cov_varlen_q, g_cov_varlen_k, g_cov_append, g_cov_rotary, g_cov_causal, g_cov_window, g_cov_softcap,
    g_cov_alibi, g_cov_sinks, g_cov_padded, g_cov_packed, g_cov_split_auto, g_cov_split_many, g_cov_nan, g_cov_fp8, g_cov_fp8q;

static void cover(const cfg *c) {
    g_cov_fp16 += c->dt == FC_FP16;
    g_cov_dv += c->d != c->d_v;
    g_cov_gqa += c->h_k > 1 && c->h_q > c->h_k;
    g_cov_mqa += c->h_k == 1 && c->h_q > 1;
    g_cov_empty += c->s_q == 0 || c->s_k == 0;
    g_cov_one += c->s_q == 1 || c->s_k == 1;
    g_cov_long += c->s_q > 300 || c->s_k > 300;
    g_cov_paged += c->kv == KV_PAGED;
    g_cov_varlen_q += c->q_varlen;
    g_cov_varlen_k += c->kv == KV_VARLEN;
    g_cov_append += c->s_new > 0;
    g_cov_rotary += c->rot_dim > 0;
    g_cov_causal += c->causal;
    g_cov_window += c->wl >= 0 || (!c->causal && c->wr >= 0);
    g_cov_softcap += c->softcap > 0;
    g_cov_alibi += c->alibi > 0;
    g_cov_sinks += c->sinks;
    g_cov_padded += c->layout == LAYOUT_PADDED;
    g_cov_packed += c->layout == LAYOUT_PACKED;
    g_cov_split_auto += c->splits[0] == 0 || (c->nsplits > 1 && c->splits[1] == 0);
    g_cov_split_many += c->splits[0] > 1 || (c->nsplits > 1 && c->splits[1] > 1);
    g_cov_nan += c->nan_unused;
    g_cov_fp8 += c->fp8 > 0 && !c->fp8_q;
    g_cov_fp8q += c->fp8_q;
}

static void print_coverage(void) {
    printf("covered (cases): fp16 %d, d!=d_v %d, GQA %d, MQA %d, s_q or s_k 0: %d, 1: %d, >300: %d, paged %d, "
           "varlen q %d, varlen kv %d, append %d, rotary %d, causal %d, window %d, softcap %d, alibi %d, sinks %d, "
           "padded %d, packed %d, splits auto %d, splits >1 %d, NaN unused rows %d, fp8 cache %d, fp8 attention %d\n",
           g_cov_fp16, g_cov_dv, g_cov_gqa, g_cov_mqa, g_cov_empty, g_cov_one, g_cov_long, g_cov_paged, g_cov_varlen_q,
           g_cov_varlen_k, g_cov_append, g_cov_rotary, g_cov_causal, g_cov_window, g_cov_softcap, g_cov_alibi,
           g_cov_sinks, g_cov_padded, g_cov_packed, g_cov_split_auto, g_cov_split_many, g_cov_nan, g_cov_fp8, g_cov_fp8q);
}

/* Compute-sanitizer runs take the small cases only (as gpu_attn's quick sweep). */
static int quick_keeps(const cfg *c) { return (double)c->s_q * c->s_k * c->b <= 70000 && c->s_k <= 2100; }

/* Bytes of a and b over n, equal? (both absent: equal) */
static int same_bytes(const void *a, const void *b, size_t n) { return (!a && !b) || (a && b && !memcmp(a, b, n)); }

/* The second run on the GPU against the first: out, lse and the caches after the append, bit for bit. */
static void check_determinism(group *g, const prob *P, const gpu_run *a, const gpu_run *b, const char *desc) {
    const cfg *c = &P->c;
    int out = same_bytes(a->out, b->out, reg_bytes(&P->out));
    int lse = !c->lse || same_bytes(a->lse, b->lse, reg_bytes(&P->lse));
    int cache = !c->s_new ||
                (same_bytes(a->kc, b->kc, reg_bytes(&P->kc)) && same_bytes(a->vc, b->vc, reg_bytes(&P->vc)));
    int ok = tu_check(out && lse && cache, "%s [%s] split %d: a second run differs bitwise from the first in%s%s%s",
                      g->name, desc, c->splits[0], out ? "" : " out", lse ? "" : " lse", cache ? "" : " the cache");
    group_note(g, ok, 0, desc);
}

/* Runs one GPU call of the case per entry of splits, and runs[0]'s again; returns 1 if every run
 * succeeded, else records the error (or the skip) and returns 0. */
static int gpu_runs(group *g, prob *P, fc_attn_args *d, const void *op, const void *lp, gpu_run *runs,
                    gpu_run *again, const char *desc) {
    const cfg *c = &P->c;
    int all_ok = 1, skipped = 0;
    for (int s = 0; s <= c->nsplits; s++) {
        gpu_run *r = s < c->nsplits ? &runs[s] : again;
        d->num_splits = c->splits[s < c->nsplits ? s : 0];
        gpu_run_once(P, d, op, lp, P->k_snap, P->v_snap, r);
        if (r->st == FC_OK) continue;
        all_ok = 0;
        if (r->st == FC_ERR_UNSUPPORTED) {
            if (!skipped++) group_skip(g, r->msg, desc);
            continue;
        }
        tu_check(0, "%s [%s] split %d: %s", g->name, desc, d->num_splits, r->msg);
        group_note(g, 0, 0, desc);
        if (r->st == FC_ERR_CUDA) break; /* the context may be gone */
    }
    return all_ok;
}

/* One seed: build, GPU runs, CPU backend, references, checks. Returns 0 when the case was passed over
 * (quick runs, unless forced), 1 when it ran. */
static int run_seed(group *g, uint64_t seed, int force) {
    cfg c;
    random_cfg(&c, seed);
    if (g_quick && !force && !quick_keeps(&c)) return 0;
    char desc[320];
    rc_describe(seed, &c, desc, sizeof desc);
    if (g_verbose) printf("  %s\n", desc);
    int failed_before = tu_failed;
    double t = now_s();
    prob P;
    prob_build(&P, &c, &RC_OPTS, rc_data_seed(seed));
    prob_poison_out(&P);
    unsigned char *op = malloc(reg_bytes(&P.out)), *lp = c.lse ? malloc(reg_bytes(&P.lse)) : NULL;
    memcpy(op, reg_host(&P, &P.out), reg_bytes(&P.out));
    if (lp) memcpy(lp, reg_host(&P, &P.lse), reg_bytes(&P.lse));
    g->cases++;
    cover(&c);
    g_t_build += now_s() - t, t = now_s();

    fc_attn_args d = mirror(&P);
    gpu_run runs[MAX_SPLITS], again;
    memset(runs, 0, sizeof runs);
    memset(&again, 0, sizeof again);
    int gpu_ok = gpu_runs(g, &P, &d, op, lp, runs, &again, desc);
    g_t_gpu += now_s() - t, t = now_s();

    if (gpu_ok) {
        P.a.num_splits = 0; /* the CPU on the host copies (the host cache is still the pristine one) */
        fc_status st = fc_attn_fwd(&P.a, NULL, 0, NULL);
        int ok = tu_check(st == FC_OK, "%s [%s]: CPU backend: %s: %s", g->name, desc, fc_status_string(st),
                          fc_last_error());
        group_note(g, ok, 0, desc);
        g_t_cpu += now_s() - t, t = now_s();
        refs R = refs_new(&P, pick_row_step(&P));
        if (ok) {
            ok = tu_check(refs_run(&P.a, &R) == 0, "%s [%s]: ref64 cannot read this case", g->name, desc);
            group_note(g, ok, 0, desc);
        }
        g_t_ref += now_s() - t, t = now_s();
        for (int s = 0; ok && s < c.nsplits; s++) check_run(g, &P, &R, &runs[s], c.splits[s], op, desc);
        if (ok) check_agree(g, &P, &R, runs, c.nsplits, desc);
        check_determinism(g, &P, &runs[0], &again, desc);
        refs_free(&R);
        g_t_check += now_s() - t;
    }
    for (int s = 0; s < c.nsplits; s++) gpu_run_free(&runs[s]);
    gpu_run_free(&again);
    free(op);
    free(lp);
    prob_release(&P);
    if (tu_failed > failed_before) {
        if (g_nfailed_seeds < MAX_FAILED_SEEDS) g_failed_seeds[g_nfailed_seeds] = seed;
        g_nfailed_seeds++;
    } else if (gpu_ok) {
        g_passed_cases++;
    }
    return 1;
}

static void print_end(const group *g, double seconds) {
    printf("gpu_random: %d cases: %d passed, %d failed, %d SKIPPED (unsupported, not passed); %d checks; "
           "worst ratio %.3f (pass <= 1), max|gpu-cpu| %.2e; %.1fs\n",
           g->cases, g_passed_cases, g_nfailed_seeds, g->skipped, g->checks, g->worst, g->worst_cpu_diff, seconds);
    printf("time: build %.1fs, GPU (copies, 2-3 runs) %.1fs, CPU backend %.1fs, ref64 %.1fs, checks %.1fs\n", g_t_build,
           g_t_gpu, g_t_cpu, g_t_ref, g_t_check);
    if (g->checks) printf("worst ratio in: %s\n", g->worst_case);
    for (int i = 0; i < g->nskip_kinds; i++)
        printf("SKIPPED %d x %s  (e.g. %s)\n", g->skips[i].count, g->skips[i].what, g->skips[i].example);
    print_coverage();
    if (g_nfailed_seeds) {
        printf("failed seeds (reproduce one with: gpu_random --seed S):");
        for (int i = 0; i < g_nfailed_seeds && i < MAX_FAILED_SEEDS; i++)
            printf(" %llu", (unsigned long long)g_failed_seeds[i]);
        printf(g_nfailed_seeds > MAX_FAILED_SEEDS ? " ...\n" : "\n");
    }
}

static int usage(void) {
    printf("usage: gpu_random [--cases N] [--first S] | --seed S | --list N\n");
    return 1;
}

/* Prints the descriptions of the cases of seeds first .. first + n - 1. */
static void list_cases(uint64_t first, long n) {
    for (long i = 0; i < n; i++) {
        cfg c;
        char desc[320];
        random_cfg(&c, first + (uint64_t)i);
        rc_describe(first + (uint64_t)i, &c, desc, sizeof desc);
        printf("%s\n", desc);
    }
}

int main(int argc, char **argv) {
    long cases = -1, list = -1;
    uint64_t first = 1;
    int one = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) return usage();
        if (!strcmp(argv[i], "--cases")) cases = atol(argv[++i]);
        else if (!strcmp(argv[i], "--first")) first = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed")) first = strtoull(argv[++i], NULL, 10), one = 1;
        else if (!strcmp(argv[i], "--list")) list = atol(argv[++i]);
        else return usage();
    }
    if (list >= 0) {
        list_cases(first, list);
        return 0;
    }
    if (harness_init("gpu_random")) return 2;
    g_ref_budget = g_quick ? 1e6 : 3e6;
    if (cases < 0) cases = g_quick ? 600 / g_quick : 10000;
    if (one) cases = 1;
    printf("gpu_random: flashc %s, CPU threads %d, %ld cases from seed %llu%s\n", fc_version(), fc_get_num_threads(),
           cases, (unsigned long long)first, g_quick ? " (quick: small cases only)" : "");
    group g;
    memset(&g, 0, sizeof g);
    g.name = "random";
    double t0 = now_s();
    for (uint64_t seed = first, done = 0; (long)done < cases; seed++) {
        if (!run_seed(&g, seed, one)) continue;
        if (++done % 1000 == 0)
            printf("  %ld / %ld cases, %d failed (%.1fs)\n", (long)done, cases, g_nfailed_seeds, now_s() - t0);
    }
    print_end(&g, now_s() - t0);
    harness_done();
    return tu_finish();
}
