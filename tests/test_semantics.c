/* test_semantics.c — flashc.h's edge semantics on the CPU: NaN/Inf in the inputs, windows near 2^31, a
 * tiny softcap, and fp32 sums over a million keys. */
#include "problem.h"

static const prob_opts OPTS = {.pad = 0, .pad_all = 1, .max_seqlen = 0, .fast_fill = 0};

/* ---------------------------------------------------------------------------------------------- */
/* NaN and Inf: a visible key's NaN score or value reaches the row, a hidden key's never does.      */

/* Element offset of query row r of sequence b, head h, in q (laid out as out). */
static int64_t q_off(const prob *P, int b, int64_t r, int h) {
    const fc_tensor *t = &P->a.q;
    if (P->c.q_varlen) return (P->q_row0[b] + r) * t->stride[0] + h * t->stride[1];
    return b * t->stride[0] + r * t->stride[1] + h * t->stride[2];
}

/* Keys of sequence b (the append included). */
static int keys_of(const prob *P, int b) { return P->s_cache[b] + P->c.s_new; }

/* Does query row r of sequence b see key j (flashc.h, Semantics step 4)? */
static int sees(const prob *P, int b, int64_t r, int64_t j) {
    const cfg *c = &P->c;
    int64_t s_k = keys_of(P, b), pos = r + s_k - P->len_q[b];
    if (j < 0 || j >= s_k) return 0;
    if (c->causal && j > pos) return 0;
    if (c->wl >= 0 && j < pos - c->wl) return 0;
    if (c->wr >= 0 && j > pos + c->wr) return 0;
    return 1;
}

static int row_sees_any(const prob *P, int b, int64_t r) {
    for (int64_t j = 0; j < keys_of(P, b); j++)
        if (sees(P, b, r, j)) return 1;
    return 0;
}

typedef struct snap {
    double *out, *lse;
} snap;

/* Runs the case (poisoned outputs); copies out and lse of every row. */
static int run_snap(prob *P, int splits, snap *s) {
    const cfg *c = &P->c;
    prob_poison_out(P);
    P->a.num_splits = splits;
    fc_status st = fc_attn_fwd(&P->a, NULL, 0, NULL);
    if (!tu_check(st == FC_OK, "run: %s: %s", fc_status_string(st), fc_last_error())) return 0;
    for (int b = 0; b < c->b; b++)
        for (int64_t r = 0; r < P->len_q[b]; r++)
            for (int h = 0; h < c->h_q; h++) {
                int64_t row = (P->q_row0[b] + r) * c->h_q + h;
                for (int e = 0; e < c->d_v; e++) s->out[row * c->d_v + e] = tu_load(P->a.out.data, c->dt, out_off(P, b, r, h) + e);
                s->lse[row] = ((const float *)P->a.lse.data)[lse_off(P, b, r, h)];
            }
    return 1;
}

/* x equals the clean value within one rounding of the dtype (the blocks may be summed another way). */
static int same(double x, double clean, fc_dtype dt) {
    if (isnan(clean) || isinf(clean)) return x == clean || (isnan(x) && isnan(clean));
    return fabs(x - clean) <= tu_eps(dt) * (fabs(clean) + 1e-3);
}

enum { HIT_Q, HIT_K, HIT_V, HIT_V_INF };
static const char *HIT_NAMES[] = {"NaN in q", "NaN in k", "NaN in v", "Inf in v"};

/* Injects one bad value, runs, and checks every row: rows it must reach are NaN (or not finite, in
 * the one feature for v), every other row equals the clean run. Returns the number of bad rows. */
static int64_t check_hit(prob *P, int kind, int b, int64_t at, int head, int feat, int splits, const snap *clean,
                         snap *got) {
    const cfg *c = &P->c;
    fc_tensor *t = kind == HIT_Q ? &P->a.q : kind == HIT_K ? &P->a.k : &P->a.v;
    int64_t off = kind == HIT_Q ? q_off(P, b, at, head) : kv_off(P, t, b, at, head);
    if (kind != HIT_Q && at >= P->s_cache[b]) { /* an appended key: the bad value goes into k_new / v_new */
        t = kind == HIT_K ? &P->a.k_new : &P->a.v_new;
        off = b * t->stride[0] + (at - P->s_cache[b]) * t->stride[1] + head * t->stride[2];
    }
    off += feat;
    double keep = tu_load(t->data, c->dt, off);
    tu_store(t->data, c->dt, off, kind == HIT_V_INF ? INFINITY : NAN);
    int ran = run_snap(P, splits, got);
    tu_store(t->data, c->dt, off, keep);
    if (!ran) return 1;
    int group = c->h_q / c->h_k;
    int64_t bad = 0;
    for (int bb = 0; bb < c->b; bb++)
        for (int64_t r = 0; r < P->len_q[bb]; r++)
            for (int h = 0; h < c->h_q; h++) {
                int64_t row = (P->q_row0[bb] + r) * c->h_q + h;
                const double *o = got->out + row * c->d_v, *o0 = clean->out + row * c->d_v;
                int reached = bb == b && (kind == HIT_Q ? r == at && h == head && row_sees_any(P, b, r)
                                                        : h / group == head && sees(P, b, r, at));
                int row_bad = 0;
                for (int e = 0; e < c->d_v; e++) {
                    int nan_here = reached && (kind == HIT_Q || kind == HIT_K || e == feat);
                    if (nan_here ? (kind == HIT_V_INF ? isfinite(o[e]) : !isnan(o[e])) : !same(o[e], o0[e], c->dt))
                        row_bad = 1;
                }
                int lse_nan = reached && (kind == HIT_Q || kind == HIT_K);
                if (lse_nan ? !isnan(got->lse[row]) : !same(got->lse[row], clean->lse[row], FC_FP32)) row_bad = 1;
                if (row_bad && bad++ == 0)
                    printf("  %s at sequence %d position %lld head %d: row (%d, %lld, head %d) %s: out[%d] = %g "
                           "(clean %g), lse %g (clean %g)\n", HIT_NAMES[kind], b, (long long)at, head, bb, (long long)r,
                           h, reached ? "should be hit" : "should be clean", kind >= HIT_V ? feat : 0,
                           o[kind >= HIT_V ? feat : 0], o0[kind >= HIT_V ? feat : 0], got->lse[row], clean->lse[row]);
            }
    return bad;
}

/* A key of sequence b that some rows see and others, in the same key block, do not: the last key
 * under a causal mask (only the last query sees it), else the first (a left window hides it from
 * the last rows). -1 if the sequence has no key. */
static int64_t split_key(const prob *P, int b) {
    int64_t s_k = keys_of(P, b);
    if (s_k == 0) return -1;
    return P->c.causal ? s_k - 1 : 0;
}

static void nan_case(const cfg *c, uint64_t seed) {
    char desc[320];
    describe(c, desc, sizeof desc);
    prob P;
    prob_build(&P, c, &OPTS, seed);
    int64_t n = P.total_q * c->h_q;
    snap clean = {malloc(sizeof(double) * (size_t)(n * c->d_v + 1)), malloc(sizeof(double) * (size_t)(n + 1))};
    snap got = {malloc(sizeof(double) * (size_t)(n * c->d_v + 1)), malloc(sizeof(double) * (size_t)(n + 1))};
    for (int si = 0; si < 2; si++) {
        int splits = si == 0 ? 1 : 3;
        if (!run_snap(&P, splits, &clean)) break;
        for (int b = 0; b < c->b; b++) {
            int64_t j = split_key(&P, b);
            int hk = b % c->h_k;
            int64_t bad[4] = {0, 0, 0, 0};
            if (P.len_q[b] > 0) bad[HIT_Q] = check_hit(&P, HIT_Q, b, P.len_q[b] - 1, c->h_q - 1, 0, splits, &clean, &got);
            if (j >= 0) {
                bad[HIT_K] = check_hit(&P, HIT_K, b, j, hk, 5, splits, &clean, &got);
                bad[HIT_V] = check_hit(&P, HIT_V, b, j, hk, 7, splits, &clean, &got);
                bad[HIT_V_INF] = check_hit(&P, HIT_V_INF, b, j, hk, 9, splits, &clean, &got);
            }
            for (int k = 0; k < 4; k++)
                tu_check(bad[k] == 0, "[%s] splits %d, sequence %d: %s: %lld rows wrong", desc, splits, b, HIT_NAMES[k],
                         (long long)bad[k]);
        }
    }
    free(clean.out), free(clean.lse), free(got.out), free(got.lse);
    prob_free(&P);
}

/* Dense, varlen and paged; bf16 and fp32; a causal mask and a left window; GQA; keys over two blocks. */
static void nan_inputs(void) {
    uint64_t seed = 4242;
    for (int kv = KV_DENSE; kv <= KV_PAGED; kv++)
        for (int dt = 0; dt < 2; dt++)
            for (int mask = 0; mask < 2; mask++) {
                cfg c = cfg_base();
                c.dt = dt ? FC_FP32 : FC_BF16;
                c.b = 3;
                c.s_q = 40;
                c.s_k = 100;
                c.h_q = 4;
                c.h_k = 2;
                c.kv = kv;
                c.q_varlen = kv == KV_VARLEN;
                c.page_size = 16;
                c.seqused = kv == KV_PAGED;
                if (mask == 0) c.causal = 1;
                else c.wl = 70;
                nan_case(&c, seed++);
            }
    /* paged append, the NaN in an appended row */
    cfg c = cfg_base();
    c.b = 2, c.s_q = 3, c.s_k = 90, c.h_q = 4, c.h_k = 2, c.kv = KV_PAGED, c.page_size = 32, c.s_new = 3, c.causal = 1;
    nan_case(&c, seed++);
}

/* A NaN sink makes its head's rows NaN; a NaN lse_partial makes the merged row NaN (also when the
 * other partials are -inf). */
static void nan_sinks_and_merge(void) {
    cfg c = cfg_base();
    c.sinks = 1, c.causal = 1;
    prob P;
    prob_build(&P, &c, &OPTS, 99);
    ((float *)P.a.sinks.data)[1] = NAN;
    prob_poison_out(&P);
    fc_status st = fc_attn_fwd(&P.a, NULL, 0, NULL);
    int64_t bad = 0;
    for (int b = 0; b < c.b; b++)
        for (int r = 0; r < c.s_q; r++)
            for (int h = 0; h < c.h_q; h++) {
                double o = tu_load(P.a.out.data, c.dt, out_off(&P, b, r, h));
                double l = ((const float *)P.a.lse.data)[lse_off(&P, b, r, h)];
                bad += h == 1 ? !(isnan(o) && isnan(l)) : !(isfinite(o) && isfinite(l));
            }
    tu_check(st == FC_OK && bad == 0, "NaN sink of head 1: %s, %lld rows wrong (head 1 NaN, head 0 finite)",
             fc_status_string(st), (long long)bad);
    prob_free(&P);

    float op[3 * 64], lp[3] = {-INFINITY, NAN, -INFINITY}, out[64], lse = 0;
    for (int i = 0; i < 3 * 64; i++) op[i] = 1.0f;
    fc_merge_args m = {FC_DEVICE_CPU, fc_tensor_4d(op, FC_FP32, 3, 1, 1, 64), fc_tensor_3d(lp, FC_FP32, 3, 1, 1),
                       fc_tensor_3d(out, FC_FP32, 1, 1, 64), fc_tensor_2d(&lse, FC_FP32, 1, 1)};
    st = fc_merge_states(&m, NULL);
    tu_check(st == FC_OK && isnan(out[0]) && isnan(lse), "merge with lse_partial (-inf, NaN, -inf): %s, out %g, lse %g",
             fc_status_string(st), out[0], lse);
    lp[1] = 0.5f;
    st = fc_merge_states(&m, NULL);
    tu_check(st == FC_OK && out[0] == 1.0f && lse == 0.5f, "merge with lse_partial (-inf, 0.5, -inf): %s, out %g, lse %g",
             fc_status_string(st), out[0], lse);
}

/* ---------------------------------------------------------------------------------------------- */
/* Windows near 2^31 mean "unbounded"; a tiny (valid) softcap.                                       */

static void run_plain(prob *P, double *out, double *lse) {
    prob_poison_out(P);
    fc_status st = fc_attn_fwd(&P->a, NULL, 0, NULL);
    tu_check(st == FC_OK, "run: %s: %s", fc_status_string(st), fc_last_error());
    const cfg *c = &P->c;
    for (int b = 0; b < c->b; b++)
        for (int r = 0; r < P->len_q[b]; r++)
            for (int h = 0; h < c->h_q; h++) {
                int64_t row = (P->q_row0[b] + r) * c->h_q + h;
                for (int e = 0; e < c->d_v; e++) out[row * c->d_v + e] = tu_load(P->a.out.data, c->dt, out_off(P, b, r, h) + e);
                lse[row] = ((const float *)P->a.lse.data)[lse_off(P, b, r, h)];
            }
}

/* Each window (wl, wr) against an equivalent one; returns the rows that differ. */
static int64_t compare_windows(prob *P, int wl, int wr, int wl0, int wr0) {
    const cfg *c = &P->c;
    int64_t n = P->total_q * c->h_q, bad = 0;
    double *o = malloc(sizeof(double) * (size_t)(n * c->d_v + 1)), *l = malloc(sizeof(double) * (size_t)(n + 1));
    double *o0 = malloc(sizeof(double) * (size_t)(n * c->d_v + 1)), *l0 = malloc(sizeof(double) * (size_t)(n + 1));
    P->a.causal = 0;
    P->a.window_left = wl0, P->a.window_right = wr0;
    run_plain(P, o0, l0);
    P->a.window_left = wl, P->a.window_right = wr;
    run_plain(P, o, l);
    for (int64_t i = 0; i < n; i++) {
        int row_bad = !(l[i] == l0[i]);
        for (int e = 0; e < c->d_v; e++) row_bad |= !(o[i * c->d_v + e] == o0[i * c->d_v + e]);
        bad += row_bad;
    }
    free(o), free(l), free(o0), free(l0);
    return bad;
}

static void huge_windows(void) {
    static const int W[][4] = {{-1, INT32_MAX, -1, -1},        {INT32_MAX, -1, -1, -1},
                               {INT32_MAX, 0, -1, 0},          {INT32_MAX - 5, INT32_MAX - 5, -1, -1},
                               {1 << 30, 3, -1, 3},            {7, (1 << 30) + 1, 7, -1}};
    for (int kv = KV_DENSE; kv <= KV_PAGED; kv++) {
        cfg c = cfg_base();
        c.s_q = 20, c.s_k = 70, c.kv = kv, c.q_varlen = kv == KV_VARLEN, c.page_size = 16;
        prob P;
        prob_build(&P, &c, &OPTS, 500 + kv);
        for (size_t w = 0; w < sizeof W / sizeof W[0]; w++) {
            int64_t bad = compare_windows(&P, W[w][0], W[w][1], W[w][2], W[w][3]);
            tu_check(bad == 0, "kv layout %d: window (%d, %d) differs from (%d, %d) in %lld rows", kv, W[w][0], W[w][1],
                     W[w][2], W[w][3], (long long)bad);
        }
        prob_free(&P);
    }
}

/* FP8 attention quantises P to e4m3 for P·V (flashc.h, "FP8"): one query row over 64 e4m3 keys (one key
 * block), fp16 out. The output must match the emulation with P rounded to e4m3 (relative to the row max,
 * the sum unquantised) far better than the one without: the quantisation is there, and where. */
static void fp8_p_quantised(void) {
    enum { S = 64, D = 64 };
    uint8_t q[D], k[S * D], v[S * D];
    uint16_t out[D];
    uint64_t rng = 321;
    for (int i = 0; i < D; i++) tu_store(q, FC_E4M3, i, 2.0 * tu_normal(&rng));
    for (int i = 0; i < S * D; i++) tu_store(k, FC_E4M3, i, tu_normal(&rng)), tu_store(v, FC_E4M3, i, tu_normal(&rng));
    fc_attn_args a;
    fc_attn_args_init(&a);
    a.q = fc_tensor_4d(q, FC_E4M3, 1, 1, 1, D);
    a.k = fc_tensor_4d(k, FC_E4M3, 1, S, 1, D);
    a.v = fc_tensor_4d(v, FC_E4M3, 1, S, 1, D);
    a.out = fc_tensor_4d(out, FC_FP16, 1, 1, 1, D);
    a.num_splits = 1;
    fc_status st = fc_attn_fwd(&a, NULL, 0, NULL);
    double x[S], mx = -INFINITY, sum = 0, err_q = 0, err_exact = 0;
    for (int j = 0; j < S; j++) {
        x[j] = 0;
        for (int i = 0; i < D; i++) x[j] += tu_load(q, FC_E4M3, i) * tu_load(k, FC_E4M3, j * D + i);
        x[j] /= 8.0; /* 1 / sqrt(64) */
        mx = fmax(mx, x[j]);
    }
    for (int j = 0; j < S; j++) sum += exp(x[j] - mx);
    for (int i = 0; i < D; i++) {
        double oq = 0, oe = 0;
        for (int j = 0; j < S; j++) {
            oq += tu_round(FC_E4M3, exp(x[j] - mx)) * tu_load(v, FC_E4M3, j * D + i);
            oe += exp(x[j] - mx) * tu_load(v, FC_E4M3, j * D + i);
        }
        double got = tu_load(out, FC_FP16, i);
        err_q = fmax(err_q, fabs(got - oq / sum));
        err_exact = fmax(err_exact, fabs(got - oe / sum));
    }
    tu_check(st == FC_OK && err_q * 4 < err_exact, "fp8 attention: %s (%s); out vs P-in-e4m3 emulation %.3g, vs exact P "
             "%.3g (the first must be far smaller)", fc_status_string(st), fc_last_error(), err_q, err_exact);
}

/* A tiny softcap: every score is +-softcap, so out is the plain mean of the visible values. With
 * scale / softcap = 3e38 (softcap 3e-40, a subnormal) q times that factor overflows: the backend must
 * scale the dot product instead (the CI fuzzer found a NaN lse here). */
static void tiny_softcap(double folded) {
    cfg c = cfg_base();
    c.dt = FC_FP32, c.b = 1, c.s_q = 4, c.s_k = 50, c.h_q = c.h_k = 1;
    c.softcap = (float)(1.0 / sqrt((double)c.d) / folded);
    prob P;
    prob_build(&P, &c, &OPTS, 77);
    prob_poison_out(&P);
    fc_status st = fc_attn_fwd(&P.a, NULL, 0, NULL);
    double worst = 0;
    for (int r = 0; r < c.s_q; r++)
        for (int e = 0; e < c.d_v; e++) {
            double mean = 0;
            for (int j = 0; j < c.s_k; j++) mean += tu_load(P.a.v.data, c.dt, kv_off(&P, &P.a.v, 0, j, 0) + e) / c.s_k;
            double got = tu_load(P.a.out.data, c.dt, out_off(&P, 0, r, 0) + e);
            worst = fmax(worst, isnan(got) ? INFINITY : fabs(got - mean));
        }
    tu_check(st == FC_OK && worst < 1e-5, "softcap %g (scale / softcap %g): %s (%s), out differs from the mean of v by %g",
             (double)c.softcap, folded, fc_status_string(st), fc_last_error(), worst);
    prob_free(&P);
}

/* ---------------------------------------------------------------------------------------------- */
/* P·V over 2^20 keys in fp32: the running sums must not drift.                                     */

enum { LONG_KEYS = 1 << 20 };

/* 2^20 identical keys (zero strides over the sequence): out must be v itself, up to the rounding of a
 * sum over one key block (the drift of a running fp32 sum over 2^20 keys is far larger). */
static void identical_keys(fc_dtype dt, int splits) {
    void *q = calloc(64, 4), *k = calloc(64, 4), *v = calloc(64, 4), *out = calloc(64, 4);
    float lse = 0;
    uint64_t rng = 5;
    for (int e = 0; e < 64; e++) {
        tu_store(q, dt, e, tu_normal(&rng));
        tu_store(k, dt, e, tu_normal(&rng));
        tu_store(v, dt, e, tu_normal(&rng));
    }
    fc_attn_args a;
    fc_attn_args_init(&a);
    a.q = fc_tensor_4d(q, dt, 1, 1, 1, 64);
    a.k = fc_tensor_4d(k, dt, 1, LONG_KEYS, 1, 64);
    a.v = fc_tensor_4d(v, dt, 1, LONG_KEYS, 1, 64);
    a.k.stride[0] = a.k.stride[1] = a.v.stride[0] = a.v.stride[1] = 0;
    a.out = fc_tensor_4d(out, dt, 1, 1, 1, 64);
    a.lse = fc_tensor_3d(&lse, FC_FP32, 1, 1, 1);
    a.num_splits = splits;
    fc_status st = fc_attn_fwd(&a, NULL, 0, NULL);
    double worst = 0, score = 0;
    for (int e = 0; e < 64; e++) {
        double x = tu_load(v, dt, e), got = tu_load(out, dt, e);
        worst = fmax(worst, isnan(got) ? INFINITY : fabs(got - x) / fabs(x));
        score += tu_load(q, dt, e) * tu_load(k, dt, e) / 8;
    }
    double lse_err = fabs(lse - (score + log((double)LONG_KEYS)));
    tu_check(st == FC_OK && worst <= 64 * 0x1p-24 && lse_err < 1e-5,
             "2^20 identical keys, %s, splits %d: %s, out off v by %.3g relative (allowed: 64 fp32 roundings, the error "
             "bound of one 64-key block sum), lse off by %.3g",
             tu_dtype_name(dt), splits, fc_status_string(st), worst, lse_err);
    free(q), free(k), free(v), free(out);
}

/* 2^20 keys of a paged fp32 cache whose 2^14 entries point at 4 pages of 64 distinct keys: against a
 * float64 sum over the distinct keys weighted by how often each page appears. */
static void repeated_pages(void) {
    enum { PS = 64, NP = 4, ENTRIES = LONG_KEYS / PS };
    float *q = malloc(64 * 4), *k = malloc(NP * PS * 64 * 4), *v = malloc(NP * PS * 64 * 4), out[64], lse;
    int32_t *pt = malloc(ENTRIES * 4), used = LONG_KEYS;
    uint64_t rng = 11;
    for (int i = 0; i < 64; i++) q[i] = (float)tu_normal(&rng);
    for (int i = 0; i < NP * PS * 64; i++) k[i] = (float)tu_normal(&rng), v[i] = (float)tu_normal(&rng);
    int count[NP] = {0};
    for (int i = 0; i < ENTRIES; i++) count[pt[i] = tu_randint(&rng, 0, NP - 1)]++;
    fc_attn_args a;
    fc_attn_args_init(&a);
    a.q = fc_tensor_4d(q, FC_FP32, 1, 1, 1, 64);
    a.k = fc_tensor_4d(k, FC_FP32, NP, PS, 1, 64);
    a.v = fc_tensor_4d(v, FC_FP32, NP, PS, 1, 64);
    a.out = fc_tensor_4d(out, FC_FP32, 1, 1, 1, 64);
    a.lse = fc_tensor_3d(&lse, FC_FP32, 1, 1, 1);
    a.page_table = fc_tensor_2d(pt, FC_INT32, 1, ENTRIES);
    a.seqused_k = fc_tensor_1d(&used, FC_INT32, 1);
    a.num_splits = 1;
    fc_status st = fc_attn_fwd(&a, NULL, 0, NULL);
    double x[NP * PS], mx = -INFINITY, den = 0, num[64] = {0};
    for (int j = 0; j < NP * PS; j++) {
        x[j] = 0;
        for (int e = 0; e < 64; e++) x[j] += (double)q[e] * k[j * 64 + e] / 8;
        mx = fmax(mx, x[j]);
    }
    for (int j = 0; j < NP * PS; j++) {
        double w = count[j / PS] * exp(x[j] - mx);
        den += w;
        for (int e = 0; e < 64; e++) num[e] += w * v[j * 64 + e];
    }
    double worst = 0, vmax = 0;
    for (int i = 0; i < NP * PS * 64; i++) vmax = fmax(vmax, fabs(v[i]));
    for (int e = 0; e < 64; e++) worst = fmax(worst, isnan(out[e]) ? INFINITY : fabs(out[e] - num[e] / den) / vmax);
    double lse_err = fabs(lse - (mx + log(den)));
    tu_check(st == FC_OK && worst < 1e-6 && lse_err < 1e-5,
             "2^20 keys over 4 repeated pages, fp32: %s, out err %.3g of max|v| (allowed 1e-6), lse err %.3g",
             fc_status_string(st), worst, lse_err);
    free(q), free(k), free(v), free(pt);
}

static void long_sums(void) {
    identical_keys(FC_FP32, 1);
    identical_keys(FC_FP32, 0);
    identical_keys(FC_BF16, 1);
    repeated_pages();
}

int main(void) {
    printf("test_semantics: flashc %s, %d threads\n", fc_version(), fc_get_num_threads());
    double t0 = now_s();
    nan_inputs();
    nan_sinks_and_merge();
    printf("NaN/Inf inputs: %.1fs\n", now_s() - t0);
    huge_windows();
    fp8_p_quantised();
    tiny_softcap(1.25e29);
    tiny_softcap(3e38);
    t0 = now_s();
    long_sums();
    printf("2^20-key sums: %.1fs\n", now_s() - t0);
    return tu_finish();
}
