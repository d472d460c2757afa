/* gpu_attn.c — the CUDA backend against the CPU backend and the float64 oracle, over the feature sweep (the groups below). */
/*
 * Each case: random host inputs (never zeros), mirrored to the GPU; FC_DEVICE_CUDA runs on a non-default
 * stream with a cudaMalloc'd workspace and NaN-poisoned outputs; FC_DEVICE_CPU runs on the host copies;
 * ref64 (float64, and with the kernels' rounding steps) on sampled rows. Checks: FlashAttention's rule
 * |gpu - ref64| beyond out's rounding <= 2 max|ref_lowp - ref64| + 1e-5 (problem.h; the ratio is
 * reported), every element written,
 * |gpu - cpu| within twice that tolerance plus one rounding of the value (every row; max|gpu - cpu| is
 * reported), lse within 1e-3 (1 + |lse|) of the CPU's, fully masked rows exactly 0 / -inf, padding
 * untouched, the cache after an append equal to the CPU's byte for byte, splits agreeing, CUDA graph
 * replay equal to a direct call. FC_ERR_UNSUPPORTED from the CUDA backend
 * counts as SKIPPED (listed, never passed); any other error is a failure. The device mirror, the run and
 * the comparisons are gpu_harness.h's (shared with gpu_random).
 *
 * usage: gpu_attn [GROUP]      environment: FLASHC_GPU_QUICK=N a reduced sweep, every N-th small case of
 *                              each group (for compute-sanitizer);
 *                              FLASHC_GPU_FAKE=1 run the "GPU" side on the CPU backend (tests the harness
 *                              on a machine without a GPU); FLASHC_GPU_VERBOSE=1 list every skipped case;
 *                              FLASHC_GPU_UNINIT_WS=1 workspaces left unwritten (for initcheck).
 * Exit: 0 all passed, 1 something failed, 2 no CUDA device.
 */
#include "gpu_harness.h"

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
    prob_build(&P, c, &OPTS, g_seed * 0x9e3779b97f4a7c15ull);
    g->cases++;
    /* pristine copies: poisoned outputs (the caches before the append: P.k_snap, P.v_snap) */
    prob_poison_out(&P);
    unsigned char *out_poison = malloc(reg_bytes(&P.out)), *lse_poison = c->lse ? malloc(reg_bytes(&P.lse)) : NULL;
    memcpy(out_poison, reg_host(&P, &P.out), reg_bytes(&P.out));
    if (lse_poison) memcpy(lse_poison, reg_host(&P, &P.lse), reg_bytes(&P.lse));
    fc_attn_args d = mirror(&P);

    gpu_run runs[MAX_SPLITS];
    int n_ok = 0, skipped = 0;
    for (int s = 0; s < c->nsplits; s++) {
        d.num_splits = c->splits[s];
        gpu_run_once(&P, &d, out_poison, lse_poison, P.k_snap, P.v_snap, &runs[s]);
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
        refs R = refs_new(&P, pick_row_step(&P));
        if (ok) {
            ok = tu_check(refs_run(&P.a, &R) == 0, "%s [%s]: ref64 cannot read this case", g->name, desc);
            group_note(g, ok, 0, desc);
        }
        for (int s = 0; ok && s < c->nsplits; s++)
            if (runs[s].st == FC_OK) check_run(g, &P, &R, &runs[s], c->splits[s], out_poison, desc);
        if (ok) check_agree(g, &P, &R, runs, c->nsplits, desc);
        refs_free(&R);
    }
    for (int s = 0; s < c->nsplits; s++) gpu_run_free(&runs[s]);
    free(out_poison); free(lse_poison);
    prob_release(&P);
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

/* d_v != d: (192, 128) at a longer pair (its own kernel), then every ordered pair of distinct head dims
 * (the others run padded to max(d, d_v)) as prefill and as paged GQA decode, each dtype. */
static void sweep_dv(group *g) {
    static const int hd[5] = {64, 96, 128, 192, 256};
    int i = 0;
    for (int t = 0; t < 2; t++, i++) {
        cfg c = cfg_base();
        c.dt = DTYPES[t];
        set_heads(&c, i);
        c.d = 192, c.d_v = 128, c.causal = t, c.s_q = 300, c.s_k = 411, c.b = 1;
        c.splits[0] = split_of(i);
        run_case(g, &c);
    }
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++)
            for (int decode = 0; decode < 2; decode++, i++) {
                if (a == b) continue;
                cfg c = cfg_base();
                c.dt = DTYPES[i % 2];
                c.d = hd[a];
                c.d_v = hd[b];
                c.causal = i % 3 == 0;
                c.splits[0] = split_of(i);
                if (decode) {
                    c.h_q = 8, c.h_k = 2, c.s_q = 1, c.s_k = 300 + i;
                    c.kv = KV_PAGED, c.page_size = i % 4 ? 16 : 3, c.seqused = 1;
                } else {
                    set_heads(&c, i);
                    c.s_q = i % 2 ? 37 : 91;
                    c.s_k = i % 2 ? 91 : 37;
                }
                run_case(g, &c);
            }
}

/* Head dims off the kernel set (multiples of 8, run on the next kernel up): prefill (wgmma, dense and
 * varlen, TMA and cp.async K/V) and paged decode (mma.sync), both dtypes, causal and not, split and not. */
static void sweep_odd_dims(group *g) {
    int i = 0;
    for (int k = 0; k < N_ODD_DIMS; k++)
        for (int decode = 0; decode < 2; decode++)
            for (int causal = 0; causal < 2; causal++, i++) {
                cfg c = cfg_base();
                c.dt = DTYPES[i % 2];
                c.d = ODD_DIMS[k][0], c.d_v = ODD_DIMS[k][1], c.causal = causal;
                c.splits[0] = split_of(i);
                if (decode) {
                    c.h_q = 8, c.h_k = 2, c.s_q = 1, c.s_k = 300 + i;
                    c.kv = KV_PAGED, c.page_size = i % 4 ? 16 : 64, c.seqused = 1;
                    if (i % 3 == 0) c.s_new = 1, c.rot_dim = c.d >= 16 ? 16 : 0;
                } else {
                    set_heads(&c, i);
                    c.s_q = 200 + 37 * k, c.s_k = 300 + 11 * k;
                    if (k % 3 == 1) c.kv = KV_VARLEN, c.q_varlen = 1;
                }
                run_case(g, &c);
            }
}

/* Dense caches indexed and padded per sequence (kv_batch_idx, kv_leftpad): decode (mma.sync) and prefill
 * (wgmma, TMA dense K/V at the sequence's row and pad), append with and without rotary, both dtypes,
 * masks, splits; rows before the pad and unused rows hold NaN. */
static void sweep_kv_index(group *g) {
    int i = 0;
    for (int kind = 1; kind <= 3; kind++)
        for (int k = 0; k < 8; k++, i++) {
            cfg c = cfg_base();
            c.dt = DTYPES[i % 2];
            c.kv_index = kind;
            c.b = 3, c.seqused = 1, c.nan_unused = k % 3 == 0;
            c.causal = k % 2;
            c.d = c.d_v = k % 4 == 2 ? 256 : 128;
            if (k % 4 < 2) c.h_q = 8, c.h_k = 2, c.s_q = 1, c.s_k = 300 + 37 * k;
            else set_heads(&c, i), c.s_q = 200 + 13 * k, c.s_k = 400 + 29 * k;
            if (k % 4 == 1) c.s_new = 1, c.rot_dim = 64;
            if (k == 6) c.wl = 100, c.wr = 7;
            c.splits[0] = split_of(i);
            run_case(g, &c);
        }
}

/* A case CUDA does not run yet: FC_ERR_UNSUPPORTED naming k, out left as poisoned. */
static void not_on_cuda(group *g, const cfg *c, const char *arg) {
    char desc[240];
    describe(c, desc, sizeof desc);
    prob P;
    prob_build(&P, c, &OPTS, ++g_seed * 0x9e3779b97f4a7c15ull);
    prob_poison_out(&P);
    size_t n = reg_bytes(&P.out);
    unsigned char *poison = malloc(n), *after = malloc(n);
    memcpy(poison, reg_host(&P, &P.out), n);
    fc_attn_args d = mirror(&P);
    gpu_run r;
    gpu_run_once(&P, &d, poison, NULL, P.k_snap, P.v_snap, &r);
    reg_download(&P, &P.out, after);
    g->cases++;
    char named[32];
    snprintf(named, sizeof named, ": %s: ", arg);
    int ok = tu_check(r.st == FC_ERR_UNSUPPORTED && strstr(r.msg, named) && !memcmp(after, poison, n),
                      "%s [%s]: expected FC_ERR_UNSUPPORTED naming %s and out untouched, got %s", g->name, desc, arg, r.msg);
    group_note(g, ok, 0, desc);
    gpu_run_free(&r);
    free(poison), free(after);
    prob_release(&P);
}

/* FP8 caches (e4m3, e5m2) under bf16 / fp16 queries on the decode kernel: dense, paged (pages 1, 16, 256),
 * varlen and indexed caches; descales per (b, h_k), broadcast or none; append (quantised) with and without
 * rotary; splits; GQA and MQA; masks, softcap, ALiBi, sinks, lse; d 64, 128, 256, padded pairs (80, 128 / 64)
 * and 2-16 packed query rows; a decode shape of many tiles (two key warps a CTA). Then prefill shapes, which CUDA
 * does not run on fp8 caches yet: FC_ERR_UNSUPPORTED naming k, nothing written. */
static void sweep_fp8(group *g) {
    static const int dims[6][2] = {{128, 128}, {64, 64}, {256, 256}, {128, 64}, {80, 80}, {128, 128}};
    int i = 0;
    for (int f = 1; f <= 2; f++)
        for (int k = 0; k < 18; k++, i++) {
            cfg c = cfg_base();
            c.dt = DTYPES[i % 2];
            c.fp8 = f;
            c.descale = k % 3;
            c.d = dims[k % 6][0], c.d_v = dims[k % 6][1];
            c.h_q = k % 5 == 4 ? 4 : 8, c.h_k = k % 5 == 4 ? 1 : 2;
            c.s_q = k % 6 == 5 ? 2 : 1;
            c.s_k = 200 + 97 * k;
            c.causal = k % 2;
            switch (k % 5) {
            case 0: c.kv = KV_PAGED, c.page_size = 16, c.seqused = 1; break;
            case 1: c.seqused = 1, c.s_new = 1, c.rot_dim = 32, c.rot_inter = k % 2; break;
            case 2: c.kv = KV_VARLEN; break;
            case 3: c.kv = KV_PAGED, c.page_size = k % 2 ? 1 : 256, c.seqused = 1, c.s_new = 2, c.s_q = 2; break;
            default: c.kv_index = 3, c.b = 3, c.seqused = 1; break;
            }
            if (k % 4 == 3) c.softcap = 5, c.alibi = 2;
            if (k % 7 == 2) c.sinks = 1, c.wl = 150, c.wr = 0;
            c.lse = k % 2;
            c.nsplits = 3, c.splits[0] = 1, c.splits[1] = 3, c.splits[2] = 0;
            run_case(g, &c);
        }
    /* Many decode tiles (b x h_k = 640: at least twice the four-key-warp CTAs an H100 holds at once), where the fp8
     * cache takes two key warps a CTA (fwd_launch.cuh, decode_cfg's MANY): paged and dense, both fp8 kinds. */
    for (int f = 1; f <= 2; f++) {
        cfg c = cfg_base();
        c.dt = DTYPES[f % 2];
        c.fp8 = f, c.descale = f;
        c.b = 8, c.h_k = 80, c.h_q = 320, c.d = c.d_v = 128;
        c.s_q = 1, c.s_k = 250 + 71 * f;
        if (f == 1) c.kv = KV_PAGED, c.page_size = 16;
        c.seqused = 1, c.lse = 1;
        run_case(g, &c);
    }
    for (int f = 1; f <= 2 && !g_fake; f++) { /* not on CUDA yet (the CPU standing in runs them) */
        cfg c = cfg_base();
        c.dt = DTYPES[f % 2];
        c.fp8 = f, c.descale = 1, c.lse = 0; /* (not_on_cuda poisons out only) */
        set_heads(&c, f);
        c.s_q = 64, c.s_k = 300;
        if (f == 2) c.s_q = 9, c.kv = KV_PAGED, c.page_size = 16, c.seqused = 1; /* 9 x 4 = 36 packed rows */
        not_on_cuda(g, &c, "k");
    }
}

/* FP8 attention (q, k, v e4m3, out bf16 / fp16) on the wgmma prefill's e4m3 tiles: d 64, 128, 256 and padded
 * pairs (80, 128 / 64 on the d 128 kernel; 32, 48 and 64 / 48 on the d 64 one); dense, varlen (with varlen
 * queries) and paged caches (pages of 16: cp.async; 64 and 256: TMA); MHA, GQA, MQA; causal, a window with
 * sinks, softcap with ALiBi, lse; descales per (b, h_k), broadcast or none; splits; a decode shape (s_q 1).
 * e5m2 queries: FC_ERR_UNSUPPORTED naming q. */
static void sweep_fp8q(group *g) {
    static const int dims[5][2] = {{128, 128}, {64, 64}, {256, 256}, {80, 80}, {128, 64}};
    for (int k = 0; k < 30; k++) {
        cfg c = cfg_base();
        c.dt = DTYPES[k % 2];
        c.fp8 = 1, c.fp8_q = 1, c.descale = k % 3;
        c.d = dims[k % 5][0], c.d_v = dims[k % 5][1];
        set_heads(&c, k);
        c.s_q = k % 6 == 5 ? 1 : 64 + 61 * (k % 7);
        c.s_k = c.s_q + 97 * (k % 4);
        c.causal = k % 2;
        switch (k % 4) {
        case 1: c.kv = KV_VARLEN, c.q_varlen = 1; break;
        case 2: c.kv = KV_PAGED, c.page_size = k % 3 ? 64 : 16, c.seqused = 1; break;
        case 3: c.kv = KV_PAGED, c.page_size = 256, c.seqused = 1; break;
        }
        if (k % 5 == 3) c.softcap = 5, c.alibi = 2;
        if (k % 7 == 2) c.sinks = 1, c.wl = 150, c.wr = 0;
        c.lse = k % 2;
        c.nsplits = 2, c.splits[0] = 1, c.splits[1] = k % 3 ? 0 : 3;
        run_case(g, &c);
    }
    for (int k = 0; k < 6; k++) { /* d > d_v on the d 256 kernel (DeepSeek's 192 / 128), as gpu_random found them */
        cfg c = cfg_base();
        c.dt = DTYPES[k % 2];
        c.fp8 = 1, c.fp8_q = 1, c.descale = 1 + k % 2;
        c.d = k < 3 ? 192 : 256, c.d_v = 128;
        set_heads(&c, k + 1);
        c.s_q = 90 + 50 * k, c.s_k = c.s_q + 40 * (k % 3);
        if (k % 3 == 0) c.causal = 1;
        if (k % 3 == 1) c.kv = KV_VARLEN, c.q_varlen = 1, c.sinks = 1, c.wl = 60, c.wr = 10;
        if (k % 3 == 2) c.kv = KV_PAGED, c.page_size = 64, c.seqused = 1, c.softcap = 5, c.alibi = 2;
        c.lse = 1;
        c.nsplits = 2, c.splits[0] = 1, c.splits[1] = 3;
        run_case(g, &c);
    }
    for (int k = 0; k < 4; k++) { /* dims under 64 on the d 64 kernel, padded (d, d_v multiples of 16) */
        static const int small[4][2] = {{32, 32}, {48, 48}, {32, 64}, {64, 48}};
        cfg c = cfg_base();
        c.dt = DTYPES[k % 2];
        c.fp8 = 1, c.fp8_q = 1, c.descale = k % 3;
        c.d = small[k][0], c.d_v = small[k][1];
        set_heads(&c, k + 2);
        c.s_q = 70 + 90 * k, c.s_k = c.s_q + 33 * k;
        c.causal = k % 2;
        if (k == 1) c.kv = KV_VARLEN, c.q_varlen = 1, c.sinks = 1;
        if (k == 2) c.kv = KV_PAGED, c.page_size = 64, c.seqused = 1, c.softcap = 5, c.alibi = 2;
        c.lse = 1;
        c.nsplits = 2, c.splits[0] = 1, c.splits[1] = 2;
        run_case(g, &c);
    }
    if (!g_fake) { /* (the CPU standing in runs e5m2) */
        cfg c = cfg_base();
        c.fp8 = 2, c.fp8_q = 1, c.descale = 1, c.lse = 0;
        c.s_q = 64, c.s_k = 100;
        not_on_cuda(g, &c, "q");
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
    /* Enough tiles (sequences x KV heads; the harness keeps b <= MAX_BATCH, so many KV heads) to fill
     * the H100's SMs alone: the decode config with one key warp per CTA (fewer tiles get two key warps
     * per CTA, merged in shared memory): d 128 (>= 528 tiles), 256 (>= 264), 64 (>= 1056). */
    static const int many[4][5] = {{128, 72, 2, 300, 1}, {128, 72, 2, 1000, 0}, {256, 36, 2, 500, 1}, {64, 136, 1, 200, 0}};
    for (int j = 0; j < 4; j++) {
        cfg c = cfg_base();
        c.dt = DTYPES[j % 2];
        c.d = c.d_v = many[j][0], c.h_k = many[j][1], c.h_q = many[j][1] * many[j][2], c.s_k = many[j][3];
        c.b = 8, c.s_q = 1;
        c.kv = many[j][4] ? KV_PAGED : KV_DENSE;
        c.seqused = many[j][4];
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

/* The prefill walks over many (sequence, KV head)s: 64 to 256 of them, so that a masked persistent walk runs
 * several rounds of W heads (fwd_wgmma.cuh wg_tile_at: W = slots / tiles a head, e.g. 44 at 3 tiles) in both
 * snake directions, and the grid and static walks several tiles a CTA; causal, a local window, none. */
static void sweep_walks(group *g) {
    static const int dims[4] = {64, 96, 128, 256};
    for (int i = 0; i < 8; i++) {
        cfg c = cfg_base();
        c.dt = DTYPES[i % 2];
        c.d = c.d_v = dims[i % 4];
        c.b = 8, c.h_q = c.h_k = i < 4 ? 8 : 16;
        c.s_q = c.s_k = i % 3 == 0 ? 600 : i % 3 == 1 ? 300 : 130;
        set_mask(&c, i % 3 == 2 ? 0 : i % 4 == 3 ? 2 : 1);
        c.lse = i % 2;
        run_case(g, &c);
    }
    // d 64 without a mask up to 1k keys: 192-row tiles whose last leaves one warpgroup (512) or two (1000) without rows,
    // their blocks skipped (C::SKIP_EMPTY), on 131 CTAs, prime to a head's 3 or 6 tiles (fwd_launch.cuh wg_walk_ctas)
    for (int i = 0; i < 2; i++) {
        cfg c = cfg_base();
        c.dt = DTYPES[i];
        c.d = c.d_v = 64;
        c.b = 8, c.h_q = c.h_k = 32;
        c.s_q = c.s_k = i ? 1000 : 512;
        set_mask(&c, 0);
        c.lse = i;
        run_case(g, &c);
    }
}

/* The plain calls' kernel (fwd_wgmma.cuh wg_plain): dense, no ALiBi / sinks / softcap, up to the shape's PLAIN_KEYS
 * (1k; d 96 and d 128's 128-key blocks every length, d 256 8k), it runs, and fc_attn_describe says so; with ALiBi, a
 * softcap or more keys the general kernel runs and the plan does not say it; d 192v128 has none. One split (more
 * store O from registers: the general kernel). Every case is also checked against the CPU and the oracle as any
 * other (run_case). plan_case: whether the plan names `what` (a kernel, a block size) as want says. */
static void plan_case(group *g, const cfg *c, const char *what, int want) {
    run_case(g, c);
    if (g_fake || (g_quick && !quick_keeps(g, c))) return;
    char desc[240], plan[320] = "";
    describe(c, desc, sizeof desc);
    prob P;
    prob_build(&P, c, &OPTS, g_seed * 0x9e3779b97f4a7c15ull);
    fc_attn_args d = mirror(&P);
    d.num_splits = c->splits[0];
    fc_status st = fc_attn_describe(&d, plan, sizeof plan);
    int named = strstr(plan, what) != NULL;
    int ok = tu_check(st == FC_OK && named == want, "%s [%s]: plan \"%s\" (%s), \"%s\" %s", g->name, desc, plan,
                      fc_status_string(st), what, want ? "expected" : "not expected");
    group_note(g, ok, 0, desc);
    prob_release(&P);
}

static void plain_case(group *g, const cfg *c, int want) { plan_case(g, c, "plain calls' kernel", want); }

static void sweep_plain(group *g) {
    for (int i = 0; i < 12; i++) {
        cfg c = cfg_base();
        c.dt = DTYPES[i % 2];
        set_dims(&c, i);
        c.b = 2, c.h_q = 8, c.h_k = i % 3 == 2 ? 2 : 8;
        c.s_q = c.s_k = i < 6 ? 512 : 1000;
        c.splits[0] = 1;
        set_mask(&c, i % 4 == 1 || i % 4 == 2);
        c.lse = i % 2;
        int has = !(c.d == 192 && c.d_v == 128);
        plain_case(g, &c, has);
        cfg a = c;
        if (i % 2) a.alibi = 1; else a.softcap = 2.0f;
        plain_case(g, &a, 0);
        cfg l = c; /* past 1k keys: the plain kernel on d 96 and d 128 at every length, on d 256 to 8k (wg_shape's
                    * PLAIN_KEYS) */
        l.b = 1, l.s_q = 256, l.s_k = 2048;
        plain_case(g, &l, c.d == 96 || c.d == 128 || c.d == 256);
        if (i == 1 || i == 2 || i == 4 || i == 8) { /* d 96 causal, d 128 causal and not, d 256 not */
            cfg x = c;
            x.b = 1, x.h_q = x.h_k = 2, x.s_q = 128, x.s_k = 8320;
            plain_case(g, &x, c.d == 96 || c.d == 128);
            /* d 128's non-causal calls past 4k keys that the plain kernel does not take: 176-key blocks
             * (wg_second_config); plain ones and masked ones not */
            if (c.d == 128) {
                plan_case(g, &x, "176-key blocks", 0);
                x.softcap = 2.0f;
                plan_case(g, &x, "176-key blocks", !c.causal);
            }
        }
    }
}

/* Wide GQA groups on the prefill kernel (32, 64, 128, 192): a tile of a few query rows x many heads, or part of
 * one row's heads; Q by TMA where the group divides the tile, else cp.async; dense and varlen; the O store by
 * TMA where the group divides 64. */
static void sweep_wide_groups(group *g) {
    static const int heads[4][2] = {{64, 2}, {64, 1}, {128, 1}, {192, 1}};
    static const int dims[4] = {64, 128, 256, 192};
    for (int i = 0; i < 8; i++) {
        cfg c = cfg_base();
        c.dt = DTYPES[i % 2];
        c.d = c.d_v = dims[i % 4];
        c.h_q = heads[i % 4][0], c.h_k = heads[i % 4][1];
        c.b = 2, c.s_q = i < 4 ? 37 : 130, c.s_k = i < 4 ? 300 : 130;
        set_mask(&c, i % 3 == 2 ? 0 : 1);
        if (i == 5) c.q_varlen = 1, c.kv = KV_VARLEN;
        c.lse = i % 2;
        run_case(g, &c);
    }
}

/* d 256 over more than 1k keys (its 80-key-block kernel; 1k and less and paged caches run 64-key blocks):
 * dense with a partial last block by TMA, varlen and seqused_k (partial blocks through the one row table the
 * 80-key kernel has room for), a left pad, GQA, causal, a window, softcap and ALiBi. */
static void sweep_long256(group *g) {
    static const int keys[4] = {1100, 1285, 1600, 2053};
    for (int i = 0; i < 12; i++) {
        cfg c = cfg_base();
        c.dt = DTYPES[i % 2];
        c.d = c.d_v = 256;
        c.b = 2, c.h_q = i % 3 ? 4 : 8, c.h_k = 2;
        c.s_k = keys[i % 4];
        c.s_q = i % 4 == 1 ? c.s_k : 150 + 37 * i;
        set_mask(&c, i % 3);
        switch (i % 4) {
        case 1: c.q_varlen = 1, c.kv = KV_VARLEN; break;
        case 2: c.seqused = 1; break;
        case 3: c.kv_index = 2; break;
        default: break;
        }
        if (i == 5) c.softcap = 30.0f;
        if (i == 6) c.alibi = 1;
        c.lse = i % 2;
        run_case(g, &c);
    }
}

/* d 64's masked calls of 1k-2k keys (its third config: three serial warpgroups on 192-row tiles, fwd_launch.cuh):
 * causal, a window and both, MHA / GQA / MQA, s_q below, at and above s_k (rows that see no key), partial tiles,
 * softcap, ALiBi, sinks, LSE, varlen and paged K/V (pages of 64 by TMA, 16 by cp.async), one split, three, auto. */
static void sweep_mid64(group *g) {
    static const int keys[4] = {1027, 1300, 1601, 2048};
    for (int i = 0; i < 12; i++) {
        cfg c = cfg_base();
        c.dt = DTYPES[i % 2];
        c.d = c.d_v = 64;
        set_heads(&c, i);
        c.b = 2;
        c.s_k = keys[i % 4];
        c.s_q = i % 3 == 0 ? c.s_k : i % 3 == 1 ? c.s_k - 211 : c.s_k + 90;
        set_mask(&c, 1 + i % 3);
        if (i == 4) c.softcap = 30.0f;
        if (i == 5) c.alibi = 1;
        if (i == 7) c.sinks = 1;
        if (i == 8) c.q_varlen = 1, c.kv = KV_VARLEN;
        if (i == 10) c.kv = KV_PAGED, c.page_size = 64;
        if (i == 11) c.kv = KV_PAGED, c.page_size = 16;
        c.lse = i % 2 == 0 || i == 7;
        c.splits[0] = split_of(i);
        run_case(g, &c);
    }
}

/* d 128's non-causal dense calls past 4k keys (its second config: 176-key blocks, fwd_launch.cuh): a partial
 * last block, s_q at and below s_k, MHA / GQA / MQA, softcap, ALiBi, sinks, LSE, padded strides, one
 * split, three, auto; and the calls beside it that take the first config (kv_batch_idx, seqused_k, varlen, a window). */
static void sweep_long128(group *g) {
    static const int keys[4] = {4097, 4400, 5011, 8192};
    for (int i = 0; i < 12; i++) {
        cfg c = cfg_base();
        c.dt = DTYPES[i % 2];
        c.d = c.d_v = 128;
        set_heads(&c, i);
        c.b = 2;
        c.s_k = keys[i % 4];
        c.s_q = i == 0 ? c.s_k : i % 3 == 0 ? 520 : i % 3 == 1 ? 333 : 190;
        if (i == 2) c.softcap = 30.0f;
        if (i == 3) c.alibi = 1;
        if (i == 5) c.sinks = 1;
        if (i == 6) c.kv_index = 1;
        if (i == 7) c.layout = LAYOUT_PADDED;
        if (i == 9) c.seqused = 1;
        if (i == 10) c.q_varlen = 1, c.kv = KV_VARLEN;
        if (i == 11) c.wl = 700;
        c.lse = i % 2 == 0 || i == 5;
        c.splits[0] = split_of(i);
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
    static const int heads[6][2] = {{2, 2}, {4, 2}, {3, 1}, {8, 1}, {6, 3}, {1, 1}};
    uint64_t r = 2025;
    for (int i = 0; i < 300; i++) {
        cfg c = cfg_base();
        c.dt = DTYPES[tu_randint(&r, 0, 1)];
        int hh = tu_randint(&r, 0, 5);
        c.h_q = heads[hh][0];
        c.h_k = heads[hh][1];
        set_dims(&c, tu_randint(&r, 0, 5));
        mix_axes(&c, &r);
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
        prob_build(&P, &c, &OPTS, ++g_seed * 0x9e3779b97f4a7c15ull);
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
            void *ws = ws_bytes ? dev_alloc_ws(ws_bytes) : NULL;
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
        prob_release(&P);
    }
}

/* ---------------------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    static const sweep sweeps[] = {
        {"core", sweep_core},     {"seqlens", sweep_seqlens}, {"alibi", sweep_alibi_sinks}, {"d_v", sweep_dv},
        {"paged", sweep_paged},   {"varlen", sweep_varlen},   {"splits", sweep_splits},     {"decode", sweep_decode},
        {"append", sweep_append}, {"masked", sweep_masked},   {"strides", sweep_strides},   {"mixed", sweep_mixed},
        {"graph", sweep_graph},   {"odd_dims", sweep_odd_dims}, {"kv_index", sweep_kv_index},
        {"fp8", sweep_fp8},       {"fp8q", sweep_fp8q},       {"walks", sweep_walks}, {"plain", sweep_plain},
        {"long256", sweep_long256}, {"wide_groups", sweep_wide_groups}, {"mid64", sweep_mid64}, {"long128", sweep_long128},
    };
    const char *only = argc > 1 ? argv[1] : NULL; /* optional: one group by name */
    if (harness_init("gpu_attn")) return 2;
    if (g_quick) g_ref_budget = 1e7;
    printf("gpu_attn: flashc %s, CPU threads %d", fc_version(), fc_get_num_threads());
    if (g_quick) printf(", quick sweep (every %d-th small case)", g_quick);
    printf("\n");
    double t0 = now_s();
    run_sweeps(sweeps, sizeof sweeps / sizeof sweeps[0], only, group_print);
    printf("worst ratio overall %.3f (pass <= 1); %d cases SKIPPED (unsupported by the CUDA backend, not passed); "
           "%.1fs\n", g_worst_ratio, g_total_skipped, now_s() - t0);
    harness_done();
    return tu_finish();
}
