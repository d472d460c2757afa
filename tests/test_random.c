/* test_random.c — the CPU half of gpu_random: the same seeded random cases, the CPU backend against float64. */
/*
 * Case i is the case of seed FIRST + i of random_case.h, built with the CUDA backend's layouts exactly
 * as gpu_random builds it; the CPU backend runs it (with the case's num_splits, and its second count
 * where it draws one) and ref64 checks sampled rows. Checks: |cpu - ref64| beyond out's rounding <= 2
 * max|ref_lowp - ref64| + 1e-5 (FlashAttention's rule, problem.h), no NaN in any row, rows with no
 * visible key exactly 0 / -inf, lse within 1e-4 (1 + |lse|) of ref64's (with the kernels' rounding),
 * plus twice what that rounding moves ref64's lse (rotary: a rounding of rotated q), out's padding
 * untouched, the cache after an append as flashc.h states it (prob_cache_bad), a second split count
 * within tolerance.
 * Every failure names its seed; the end lists the failed seeds.
 *
 * usage: test_random [--cases N] [--first S]   N cases (default 2000, or $FLASHC_TEST_RANDOM_CASES) of
 *                                               seeds S, S+1, ... (default 1)
 *        test_random --seed S                   exactly the case of seed S (also: gpu_random --seed S)
 */
#include "random_case.h"
#include "ref64.h"

enum { MAX_FAILED_SEEDS = 50, DEFAULT_CASES = 2000 };

/* float64 multiply-adds per ref64 call (rows are sampled to fit). */
static const double REF_BUDGET = 3e6;

static uint64_t g_failed_seeds[MAX_FAILED_SEEDS];
static int g_nfailed_seeds;

typedef struct cmp {
    double err, err_low, lse_err, lse_tol;
    int64_t nans, masked_bad, lse_bad;
} cmp;

/* lse's tolerance (relative, 1 + |lse|): 1e-4 plus twice what the kernels' rounding steps move ref64's
 * lse on the sampled rows (rotated q and k_new rounded to the input dtype may each be one rounding away
 * from the library's, which moves the scores, as FlashAttention's rule allows for out). */
static double lse_tolerance(const prob *P, const refs *R) {
    const cfg *c = &P->c;
    double low = 0;
    for (int b = 0; b < c->b; b++)
        for (int64_t r = 0; r < P->len_q[b]; r++) {
            int64_t row = P->q_row0[b] + r;
            if (!ref64_sampled(row, r, P->len_q[b], R->row_step)) continue;
            for (int h = 0; h < c->h_q; h++) {
                double l64 = R->lse[row * c->h_q + h], ll = R->lse_low[row * c->h_q + h];
                if (l64 != -INFINITY) low = fmax(low, fabs(ll - l64) / (1 + fabs(l64)));
            }
        }
    return 1e-4 + 2 * low;
}

/* out and lse of the CPU backend: every row for NaN, the sampled rows against the references. */
static cmp compare(const prob *P, const refs *R) {
    const cfg *c = &P->c;
    cmp m;
    memset(&m, 0, sizeof m);
    m.lse_tol = lse_tolerance(P, R);
    for (int b = 0; b < c->b; b++)
        for (int64_t r = 0; r < P->len_q[b]; r++) {
            int64_t row = P->q_row0[b] + r;
            int sampled = ref64_sampled(row, r, P->len_q[b], R->row_step);
            for (int h = 0; h < c->h_q; h++) {
                int64_t k = row * c->h_q + h, o = out_off(P, b, r, h);
                for (int e = 0; e < c->d_v; e++) {
                    double x = tu_load(P->a.out.data, c->dt, o + e);
                    if (isnan(x)) m.nans++;
                    if (!sampled) continue;
                    if (R->lse[k] == -INFINITY && x != 0) m.masked_bad++;
                    double ref = R->out[k * c->d_v + e];
                    double er = tu_err_beyond_rounding(c->dt, x, ref), el = fabs(R->low[k * c->d_v + e] - ref);
                    if (!(er <= m.err)) m.err = isnan(er) ? INFINITY : er;
                    if (el > m.err_low) m.err_low = el;
                }
                if (!sampled || !c->lse) continue;
                double l = ((const float *)P->a.lse.data)[lse_off(P, b, r, h)], ll = R->lse_low[k];
                if (R->lse[k] == -INFINITY) {
                    if (l != -INFINITY) m.lse_bad++;
                } else {
                    double e = fabs(l - ll) / (1 + fabs(ll));
                    if (!(e <= m.lse_tol)) m.lse_bad++;
                    if (!(e <= m.lse_err)) m.lse_err = e;
                }
            }
        }
    return m;
}

/* One CPU run with num_splits = splits, checked; its out (as doubles, every row) goes to got. */
static void run_split(group *g, prob *P, const refs *R, int splits, double *got, const char *desc) {
    const cfg *c = &P->c;
    prob_restore_cache(P);
    prob_poison_out(P);
    P->a.num_splits = splits;
    fc_status st = fc_attn_fwd(&P->a, NULL, 0, NULL);
    int ok = tu_check(st == FC_OK, "%s [%s] split %d: %s: %s", g->name, desc, splits, fc_status_string(st),
                      fc_last_error());
    group_note(g, ok, 0, desc);
    for (int b = 0; b < c->b; b++)
        for (int64_t r = 0; r < P->len_q[b]; r++)
            for (int h = 0; h < c->h_q; h++)
                for (int e = 0; e < c->d_v; e++)
                    got[((P->q_row0[b] + r) * c->h_q + h) * c->d_v + e] =
                        ok ? tu_load(P->a.out.data, c->dt, out_off(P, b, r, h) + e) : NAN;
    if (!ok) return;
    cmp m = compare(P, R);
    double tol = tol_of(m.err_low), ratio = m.err / tol;
    if (m.nans || m.masked_bad) ratio = INFINITY;
    ok = tu_check(m.nans == 0 && m.masked_bad == 0 && m.err <= tol,
                  "%s [%s] split %d: |cpu-ref64| beyond rounding %.3g, max|lowp-ref64| %.3g, ratio %.3g, NaN %lld, "
                  "masked rows nonzero %lld (rows every %d)",
                  g->name, desc, splits, m.err, m.err_low, ratio, (long long)m.nans, (long long)m.masked_bad,
                  R->row_step);
    group_note(g, ok, ratio, desc);
    if (c->lse) {
        ok = tu_check(m.lse_bad == 0, "%s [%s] split %d: lse %lld bad, worst rel err %.3g (tolerance %.3g)", g->name,
                      desc, splits, (long long)m.lse_bad, m.lse_err, m.lse_tol);
        group_note(g, ok, 0, desc);
    }
    if (c->layout == LAYOUT_PADDED) {
        unsigned char pz[4];
        tu_poison(pz, c->dt, 1);
        int64_t bad = padding_touched(&P->out, &P->a.out, reg_host(P, &P->out), pz);
        ok = tu_check(bad == 0, "%s [%s] split %d: %lld out elements written outside the view", g->name, desc, splits,
                      (long long)bad);
        group_note(g, ok, 0, desc);
    }
    if (c->s_new) {
        int64_t bad = prob_cache_bad(P);
        ok = tu_check(bad == 0, "%s [%s] split %d: cache after append: %lld bad elements", g->name, desc, splits,
                      (long long)bad);
        group_note(g, ok, 0, desc);
    }
}

/* The second split count against the first: each within the tolerance of ref64, so within twice it of
 * each other, plus one rounding of the value. */
static void check_agree(group *g, const prob *P, const refs *R, double *const *got, int64_t n, const char *desc) {
    const cfg *c = &P->c;
    double tol = 2 * tol_of(refs_err_low(P, R)), diff = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = got[1][i], y = got[0][i];
        double ex = fabs(x - y) - tu_eps(c->dt) * fmax(fabs(x), fabs(y));
        diff = isnan(x) || isnan(y) ? INFINITY : fmax(diff, ex);
    }
    int ok = tu_check(diff <= tol, "%s [%s]: splits %d and %d differ by %.3g beyond one rounding (tolerance %.3g)",
                      g->name, desc, c->splits[0], c->splits[1], diff, tol);
    group_note(g, ok, 0, desc);
}

static void run_seed(group *g, uint64_t seed) {
    cfg c;
    random_cfg(&c, seed);
    char desc[320];
    rc_describe(seed, &c, desc, sizeof desc);
    int failed_before = tu_failed;
    prob P;
    prob_build(&P, &c, &RC_OPTS, rc_data_seed(seed));
    g->cases++;
    int64_t n = P.total_q * c.h_q * c.d_v;
    refs R = refs_new(&P, refs_row_step(&P, REF_BUDGET));
    double *got[MAX_SPLITS];
    for (int s = 0; s < c.nsplits; s++) got[s] = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    int ok = tu_check(refs_run(&P.a, &R) == 0, "%s [%s]: ref64 cannot read this case", g->name, desc);
    group_note(g, ok, 0, desc);
    for (int s = 0; ok && s < c.nsplits; s++) run_split(g, &P, &R, c.splits[s], got[s], desc);
    if (ok && c.nsplits > 1) check_agree(g, &P, &R, got, n, desc);
    for (int s = 0; s < c.nsplits; s++) free(got[s]);
    refs_free(&R);
    prob_free(&P);
    if (tu_failed > failed_before) {
        if (g_nfailed_seeds < MAX_FAILED_SEEDS) g_failed_seeds[g_nfailed_seeds] = seed;
        g_nfailed_seeds++;
    }
}

int main(int argc, char **argv) {
    /* The sanitizer runs take fewer cases (make test-tsan: TSan makes each case ~10x slower). */
    const char *env_cases = getenv("FLASHC_TEST_RANDOM_CASES");
    long cases = env_cases && atol(env_cases) > 0 ? atol(env_cases) : DEFAULT_CASES;
    uint64_t first = 1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) {
            printf("usage: test_random [--cases N] [--first S] | --seed S\n");
            return 1;
        }
        if (!strcmp(argv[i], "--cases")) cases = atol(argv[++i]);
        else if (!strcmp(argv[i], "--first")) first = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed")) first = strtoull(argv[++i], NULL, 10), cases = 1;
        else {
            printf("usage: test_random [--cases N] [--first S] | --seed S\n");
            return 1;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("test_random: flashc %s, %d threads, %ld cases from seed %llu\n", fc_version(), fc_get_num_threads(), cases,
           (unsigned long long)first);
    group g;
    memset(&g, 0, sizeof g);
    g.name = "random";
    double t0 = now_s();
    for (long i = 0; i < cases; i++) run_seed(&g, first + (uint64_t)i);
    printf("test_random: %d cases, %d failed; %d checks, worst ratio %.3f (pass <= 1); %.1fs\n", g.cases,
           g_nfailed_seeds, g.checks, g.worst, now_s() - t0);
    if (g.checks) printf("worst ratio in: %s\n", g.worst_case);
    if (g_nfailed_seeds) {
        printf("failed seeds (reproduce one with: test_random --seed S):");
        for (int i = 0; i < g_nfailed_seeds && i < MAX_FAILED_SEEDS; i++)
            printf(" %llu", (unsigned long long)g_failed_seeds[i]);
        printf(g_nfailed_seeds > MAX_FAILED_SEEDS ? " ...\n" : "\n");
    }
    return tu_finish();
}
