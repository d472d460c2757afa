/* gpu_hostile.c — CUDA calls whose device-side lengths, offsets and page indices lie: no fault, nothing written outside the tensors, the error reported. */
/*
 * Each case builds a small bf16 problem (dense, varlen or paged KV; decode or prefill; splits; append,
 * rotary) in one device arena where every tensor sits between guard bytes, corrupts one device-resident
 * value (seqused_k past the capacity or negative, a page index outside the cache, cu_seqlens out of order
 * or past the rows, a sequence longer than max_seqlen, rotary positions past the tables), runs
 * fc_attn_fwd and checks:
 *   - fc_attn_fwd returns FC_OK (the host cannot see device contents), no CUDA error follows;
 *   - fc_check_errors returns FC_ERR_INVALID_ARGUMENT naming the argument, a second one FC_OK;
 *   - every guard byte and every read-only tensor is unchanged (nothing written outside out/lse/cache);
 *   - the same call with the lengths repaired then matches the CPU backend (the context still works).
 * A CUDA graph captured over valid lengths and replayed over hostile ones is checked the same way.
 * Then NaN and Inf inputs (flashc.h's rules): NaN in q, in a key some rows see, Inf in a value, NaN in every
 * cache slot past the keys (must not matter); the GPU's
 * out and lse must be NaN exactly where the CPU's are, and close elsewhere; fc_merge_states with NaN, +inf
 * and all-empty partials likewise.
 * The kernels are the ones a real call picks: decode (mma.sync, key warps, split + merge) and the wgmma
 * prefill (d 128: 128-key blocks; d 192 and 256: 64-key blocks, two and one Q buffers; TMA for dense / paged
 * 64 and 256, cp.async for pages of 16).
 *
 * usage: gpu_hostile            Exit: 0 all passed, 1 something failed, 2 no CUDA device.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "gpu_util.h"

#define GUARD 4096          /* guard bytes before and after every tensor in the arena */
#define GUARD_BYTE 0x5a
#define B 3                 /* sequences */
#define HQ 4
#define HK 2
#define MAX_PAGES 4
#define NUM_PAGES 16

enum { KV_DENSE, KV_VARLEN, KV_PAGED };
enum { T_Q, T_K, T_V, T_OUT, T_LSE, T_CUQ, T_CUK, T_USED, T_TABLE, T_KNEW, T_VNEW, T_COS, T_SIN, T_IDX, T_PAD, T_USEDQ,
       T_COUNT };

/* What a case corrupts. */
enum {
    BAD_USED_OVER,    /* seqused_k[1] past what the layout holds (with an append: at it, plus s_new) */
    BAD_USED_NEG,     /* seqused_k[2] = -7 */
    BAD_PAGE_HIGH,    /* page_table[1][0] = NUM_PAGES */
    BAD_PAGE_NEG,     /* page_table[2][1] = -1 */
    BAD_PAGE_MAX,     /* page_table[0][0] = INT32_MAX */
    BAD_CUQ_ORDER,    /* cu_seqlens_q[2] < cu_seqlens_q[1] */
    BAD_CUQ_PAST,     /* cu_seqlens_q[3] past total_q */
    BAD_CUQ_FIRST,    /* cu_seqlens_q[0] = 5 */
    BAD_MAXQ,         /* a query sequence longer than max_seqlen_q */
    BAD_CUK_PAST,     /* cu_seqlens_k[2] = INT32_MAX */
    BAD_CUK_NEG,      /* cu_seqlens_k[1] = INT32_MIN */
    BAD_MAXK,         /* a key sequence longer than max_seqlen_k */
    BAD_ROTARY,       /* key positions past the rotary tables */
    BAD_IDX_HIGH,     /* kv_batch_idx[1] = the cache's rows (a permutation of them otherwise) */
    BAD_IDX_NEG,      /* kv_batch_idx[2] = -1 */
    BAD_PAD_OVER,     /* kv_leftpad[2] past the sequence's keys ({1, 2, 0} otherwise) */
    BAD_USEDQ_OVER,   /* seqused_q[1] past the sequence's rows (its rows otherwise) */
};

typedef struct hcase {
    const char *name, *arg; /* what fc_last_error must start with */
    int kv, s_q, d, page, splits, s_new, rotary, bad;
} hcase;

/* One built case: host copies of every tensor, their places in the device arena. */
typedef struct hprob {
    hcase c;
    fc_attn_args a;               /* host pointers (the CPU reference) */
    void *host[T_COUNT];
    size_t bytes[T_COUNT], at[T_COUNT];
    char *arena;                  /* device */
    size_t arena_bytes;
    int total_q, total_k, max_q, max_k, cap;
} hprob;

static cudaStream_t g_stream;
static uint64_t g_rng = 20261123;

static void fill_bf16(void *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) tu_store(p, FC_BF16, i, 2.0 * tu_uniform(&g_rng) - 1.0);
}

static void *host_tensor(hprob *P, int t, size_t bytes) {
    P->bytes[t] = bytes;
    P->host[t] = calloc(1, bytes ? bytes : 1);
    return P->host[t];
}

/* The lengths of a valid case: queries and keys per sequence (keys before an append). */
static void lengths(const hcase *c, int *len_q, int *len_k) {
    static const int q_prefill[B] = {150, 97, 131}, k_var[B] = {170, 120, 200};
    for (int b = 0; b < B; b++) {
        len_q[b] = c->s_q == 1 ? 1 : q_prefill[b];
        len_k[b] = c->kv == KV_VARLEN ? k_var[b] : c->kv == KV_PAGED ? MAX_PAGES * c->page - 9 - 5 * b - c->s_new
                                                                     : 190 - 11 * b - c->s_new;
    }
}

static void build(hprob *P, const hcase *c) {
    memset(P, 0, sizeof *P);
    P->c = *c;
    int len_q[B], len_k[B], d = c->d;
    lengths(c, len_q, len_k);
    int varlen_q = c->bad == BAD_CUQ_ORDER || c->bad == BAD_CUQ_PAST || c->bad == BAD_CUQ_FIRST || c->bad == BAD_MAXQ;
    P->total_q = 0, P->max_q = 0, P->total_k = 0, P->max_k = 0;
    for (int b = 0; b < B; b++) {
        P->total_q += len_q[b], P->total_k += len_k[b];
        if (len_q[b] > P->max_q) P->max_q = len_q[b];
        if (len_k[b] > P->max_k) P->max_k = len_k[b];
    }
    fc_attn_args *a = &P->a;
    fc_attn_args_init(a);
    int s_q = varlen_q ? P->max_q : len_q[0];
    int rows_q = varlen_q ? P->total_q : B * s_q;
    a->q = varlen_q ? fc_tensor_3d(host_tensor(P, T_Q, (size_t)rows_q * HQ * d * 2), FC_BF16, rows_q, HQ, d)
                    : fc_tensor_4d(host_tensor(P, T_Q, (size_t)rows_q * HQ * d * 2), FC_BF16, B, s_q, HQ, d);
    fill_bf16(a->q.data, (int64_t)rows_q * HQ * d);
    a->out = a->q;
    a->out.data = host_tensor(P, T_OUT, P->bytes[T_Q]);
    a->lse = varlen_q ? fc_tensor_2d(host_tensor(P, T_LSE, (size_t)HQ * rows_q * 4), FC_FP32, HQ, rows_q)
                      : fc_tensor_3d(host_tensor(P, T_LSE, (size_t)B * HQ * s_q * 4), FC_FP32, B, HQ, s_q);
    if (varlen_q) {
        int32_t *cu = host_tensor(P, T_CUQ, (B + 1) * 4);
        for (int b = 0; b < B; b++) cu[b + 1] = cu[b] + len_q[b];
        a->cu_seqlens_q = fc_tensor_1d(cu, FC_INT32, B + 1);
        a->max_seqlen_q = P->max_q;
    }
    int64_t kv_rows;
    if (c->kv == KV_PAGED) {
        kv_rows = (int64_t)NUM_PAGES * c->page;
        a->k = fc_tensor_4d(host_tensor(P, T_K, kv_rows * HK * d * 2), FC_BF16, NUM_PAGES, c->page, HK, d);
        int32_t *table = host_tensor(P, T_TABLE, B * MAX_PAGES * 4);
        for (int i = 0; i < B * MAX_PAGES; i++) table[i] = (i * 5 + 3) % NUM_PAGES; /* distinct pages */
        a->page_table = fc_tensor_2d(table, FC_INT32, B, MAX_PAGES);
        P->cap = MAX_PAGES * c->page;
    } else if (c->kv == KV_VARLEN) {
        kv_rows = P->total_k;
        a->k = fc_tensor_3d(host_tensor(P, T_K, kv_rows * HK * d * 2), FC_BF16, kv_rows, HK, d);
        int32_t *cu = host_tensor(P, T_CUK, (B + 1) * 4);
        for (int b = 0; b < B; b++) cu[b + 1] = cu[b] + len_k[b];
        a->cu_seqlens_k = fc_tensor_1d(cu, FC_INT32, B + 1);
        a->max_seqlen_k = P->max_k;
    } else {
        P->cap = 190;
        kv_rows = (int64_t)B * P->cap;
        a->k = fc_tensor_4d(host_tensor(P, T_K, kv_rows * HK * d * 2), FC_BF16, B, P->cap, HK, d);
    }
    fill_bf16(a->k.data, kv_rows * HK * d);
    a->v = a->k;
    a->v.data = host_tensor(P, T_V, P->bytes[T_K]);
    fill_bf16(a->v.data, kv_rows * HK * d);
    if (c->kv != KV_VARLEN || c->bad == BAD_USED_NEG) {
        int32_t *used = host_tensor(P, T_USED, B * 4);
        for (int b = 0; b < B; b++) used[b] = len_k[b];
        a->seqused_k = fc_tensor_1d(used, FC_INT32, B);
    }
    if (c->s_new) {
        a->k_new = fc_tensor_4d(host_tensor(P, T_KNEW, (size_t)B * c->s_new * HK * d * 2), FC_BF16, B, c->s_new, HK, d);
        a->v_new = a->k_new;
        a->v_new.data = host_tensor(P, T_VNEW, P->bytes[T_KNEW]);
        fill_bf16(a->k_new.data, (int64_t)B * c->s_new * HK * d);
        fill_bf16(a->v_new.data, (int64_t)B * c->s_new * HK * d);
    }
    if (c->bad == BAD_IDX_HIGH || c->bad == BAD_IDX_NEG) { /* dense: sequence b reads cache row (b + 2) % B */
        int32_t *idx = host_tensor(P, T_IDX, B * 4);
        for (int b = 0; b < B; b++) idx[b] = (b + 2) % B;
        a->kv_batch_idx = fc_tensor_1d(idx, FC_INT32, B);
    }
    if (c->bad == BAD_PAD_OVER) {
        int32_t *pad = host_tensor(P, T_PAD, B * 4);
        pad[0] = 1, pad[1] = 2, pad[2] = 0;
        a->kv_leftpad = fc_tensor_1d(pad, FC_INT32, B);
    }
    if (c->bad == BAD_USEDQ_OVER) {
        int32_t *uq = host_tensor(P, T_USEDQ, B * 4);
        for (int b = 0; b < B; b++) uq[b] = len_q[b];
        a->seqused_q = fc_tensor_1d(uq, FC_INT32, B);
    }
    if (c->rotary) {
        int max_pos = P->cap + 16, half = 32;
        a->rotary_cos = fc_tensor_2d(host_tensor(P, T_COS, (size_t)max_pos * half * 4), FC_FP32, max_pos, half);
        a->rotary_sin = fc_tensor_2d(host_tensor(P, T_SIN, (size_t)max_pos * half * 4), FC_FP32, max_pos, half);
        for (int i = 0; i < max_pos * half; i++) {
            ((float *)a->rotary_cos.data)[i] = (float)cos(0.01 * i);
            ((float *)a->rotary_sin.data)[i] = (float)sin(0.01 * i);
        }
    }
    a->causal = 1;
    a->num_splits = c->splits;
    size_t at = GUARD;
    for (int t = 0; t < T_COUNT; t++) {
        if (!P->host[t]) continue;
        P->at[t] = at;
        at += (P->bytes[t] + 255) / 256 * 256 + GUARD;
    }
    P->arena_bytes = at;
}

/* The device copy of the arguments: the same tensors at their places in the arena (hostile: BAD_ROTARY's
 * tables cut to 40 positions, a view the host cannot tell too short). */
static fc_attn_args device_args(const hprob *P, int hostile) {
    fc_attn_args d = P->a;
    if (hostile && P->c.bad == BAD_ROTARY) d.rotary_cos.shape[0] = d.rotary_sin.shape[0] = 40;
    d.device = FC_DEVICE_CUDA;
    fc_tensor *t[T_COUNT] = {&d.q, &d.k, &d.v, &d.out, &d.lse, &d.cu_seqlens_q, &d.cu_seqlens_k, &d.seqused_k,
                             &d.page_table, &d.k_new, &d.v_new, &d.rotary_cos, &d.rotary_sin, &d.kv_batch_idx,
                             &d.kv_leftpad, &d.seqused_q};
    for (int i = 0; i < T_COUNT; i++)
        if (P->host[i]) t[i]->data = P->arena + P->at[i];
    return d;
}

/* Arena: guard bytes everywhere, then every tensor's host bytes. */
static void upload(hprob *P) {
    cuda_die(cudaMemsetAsync(P->arena, GUARD_BYTE, P->arena_bytes, g_stream), "cudaMemsetAsync");
    for (int t = 0; t < T_COUNT; t++)
        if (P->host[t])
            cuda_die(cudaMemcpyAsync(P->arena + P->at[t], P->host[t], P->bytes[t], cudaMemcpyHostToDevice, g_stream),
                     "cudaMemcpyAsync");
    cuda_die(cudaStreamSynchronize(g_stream), "upload");
}

/* Overwrites one int32 of tensor t on the device (and nowhere else). */
static void poke(hprob *P, int t, int index, int32_t value) {
    cuda_die(cudaMemcpyAsync(P->arena + P->at[t] + 4 * (size_t)index, &value, 4, cudaMemcpyHostToDevice, g_stream),
             "poke");
    cuda_die(cudaStreamSynchronize(g_stream), "poke");
}

/* The corruption of case c: the device value that lies. */
static void corrupt(hprob *P) {
    const hcase *c = &P->c;
    int len_q[B], len_k[B];
    lengths(c, len_q, len_k);
    switch (c->bad) {
    case BAD_USED_OVER: poke(P, T_USED, 1, c->s_new ? P->cap : P->cap + 1 + (c->kv == KV_DENSE ? 0 : c->page)); break;
    case BAD_USED_NEG: poke(P, T_USED, 2, -7); break;
    case BAD_PAGE_HIGH: poke(P, T_TABLE, 1 * MAX_PAGES + 0, NUM_PAGES); break;
    case BAD_PAGE_NEG: poke(P, T_TABLE, 2 * MAX_PAGES + 1, -1); break;
    case BAD_PAGE_MAX: poke(P, T_TABLE, 0, INT32_MAX); break;
    case BAD_CUQ_ORDER: poke(P, T_CUQ, 3, len_q[0] + len_q[1] - 1); break; /* below cu_seqlens_q[2] */
    case BAD_CUQ_PAST: poke(P, T_CUQ, 3, P->total_q + 1000); break;
    case BAD_CUQ_FIRST: poke(P, T_CUQ, 0, 5); break;
    case BAD_MAXQ: poke(P, T_CUQ, 1, len_q[0] + 30); break; /* sequence 0: 30 past max_seqlen_q (its longest) */
    case BAD_CUK_PAST: poke(P, T_CUK, 2, INT32_MAX); break;
    case BAD_CUK_NEG: poke(P, T_CUK, 1, INT32_MIN); break;
    case BAD_MAXK: poke(P, T_CUK, 1, len_k[0] + 40); break; /* sequence 0: 210 keys, max_seqlen_k 200 */
    case BAD_ROTARY: break; /* device_args gives the tables 40 positions, fewer than the keys need */
    case BAD_IDX_HIGH: poke(P, T_IDX, 1, B); break;
    case BAD_IDX_NEG: poke(P, T_IDX, 2, -1); break;
    case BAD_PAD_OVER: poke(P, T_PAD, 2, len_k[2] + c->s_new + 5); break;
    case BAD_USEDQ_OVER: poke(P, T_USEDQ, 1, len_q[0] + 9); break; /* dense q: past s_q = len_q[0], the longest */
    }
}

static int guards_intact(const hprob *P, const unsigned char *arena, char *why, size_t n) {
    size_t lo = 0; /* the bytes from lo to the next tensor (or the arena's end) are guard bytes */
    for (int t = 0; t <= T_COUNT; t++) {
        if (t < T_COUNT && !P->host[t]) continue;
        size_t hi = t < T_COUNT ? P->at[t] : P->arena_bytes;
        for (size_t i = lo; i < hi; i++)
            if (arena[i] != GUARD_BYTE) {
                snprintf(why, n, "guard byte %zu (before tensor %d) is 0x%02x", i, t, arena[i]);
                return 0;
            }
        if (t < T_COUNT) lo = P->at[t] + P->bytes[t];
    }
    /* Read-only tensors unchanged. */
    for (int t = 0; t < T_COUNT; t++) {
        if (!P->host[t] || t == T_OUT || t == T_LSE || t == T_K || t == T_V) continue;
        if (t == T_CUQ || t == T_CUK || t == T_USED || t == T_TABLE || t == T_IDX || t == T_PAD || t == T_USEDQ)
            continue; /* poked */
        if (memcmp(arena + P->at[t], P->host[t], P->bytes[t]) != 0) {
            snprintf(why, n, "read-only tensor %d was written", t);
            return 0;
        }
    }
    return 1;
}

static fc_status run_device(const fc_attn_args *d, void **ws, size_t *ws_bytes) {
    fc_status st = fc_attn_workspace_size(d, ws_bytes);
    if (st != FC_OK) return st;
    *ws = NULL;
    if (*ws_bytes) cuda_die(cudaMalloc(ws, *ws_bytes), "cudaMalloc workspace");
    return fc_attn_fwd(d, *ws, *ws_bytes, g_stream);
}

/* The repaired call on the GPU against the CPU backend on the host copies (the context still computes). */
static void check_valid_after(hprob *P) {
    upload(P);
    fc_attn_args d = device_args(P, 0);
    void *ws;
    size_t ws_bytes;
    fc_status st = run_device(&d, &ws, &ws_bytes);
    fc_status chk = fc_check_errors(g_stream);
    cudaError_t e = cudaStreamSynchronize(g_stream);
    if (!tu_check(st == FC_OK && chk == FC_OK && e == cudaSuccess, "%s: the repaired call: status %s, check %s (%s), cuda %s",
                  P->c.name, fc_status_string(st), fc_status_string(chk), fc_last_error(), cudaGetErrorString(e)))
        return;
    size_t out_bytes = P->bytes[T_OUT];
    uint16_t *got = malloc(out_bytes);
    cuda_die(cudaMemcpy(got, P->arena + P->at[T_OUT], out_bytes, cudaMemcpyDeviceToHost), "download out");
    if (ws) cudaFree(ws);
    st = fc_attn_fwd(&P->a, NULL, 0, NULL); /* the CPU on the host copies (appends into them too) */
    tu_check(st == FC_OK, "%s: CPU reference: %s", P->c.name, fc_last_error());
    double worst = 0;
    const uint16_t *want = P->host[T_OUT];
    for (size_t i = 0; i < out_bytes / 2; i++) {
        double diff = fabs(tu_load(got, FC_BF16, i) - tu_load(want, FC_BF16, i));
        if (!(diff <= worst)) worst = diff; /* NaN counts */
    }
    tu_check(worst <= 2e-2, "%s: the repaired call differs from the CPU by %g", P->c.name, worst);
    free(got);
}

/* Runs the hostile call (direct, or replaying graph exec) and checks what it left. */
static void check_hostile(hprob *P, const char *how, cudaGraphExec_t exec) {
    fc_attn_args d = device_args(P, 1);
    void *ws = NULL;
    size_t ws_bytes = 0;
    fc_status st = FC_OK;
    if (exec) cuda_die(cudaGraphLaunch(exec, g_stream), "cudaGraphLaunch");
    else st = run_device(&d, &ws, &ws_bytes);
    cudaError_t e = cudaStreamSynchronize(g_stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (!tu_check(st == FC_OK && e == cudaSuccess, "%s (%s): fc_attn_fwd %s (%s), CUDA %s", P->c.name, how,
                  fc_status_string(st), fc_last_error(), cudaGetErrorString(e))) {
        if (e != cudaSuccess) {
            tu_finish(); /* the context is gone: nothing later can run */
            exit(1);
        }
        return;
    }
    fc_status chk = fc_check_errors(g_stream);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", fc_last_error());
    size_t n = strlen(P->c.arg);
    tu_check(chk == FC_ERR_INVALID_ARGUMENT && strncmp(msg, P->c.arg, n) == 0 && msg[n] == ':',
             "%s (%s): fc_check_errors %s \"%s\", expected invalid argument \"%s: ...\"", P->c.name, how,
             fc_status_string(chk), msg, P->c.arg);
    tu_check(fc_check_errors(g_stream) == FC_OK, "%s (%s): the record was not cleared: %s", P->c.name, how, fc_last_error());
    unsigned char *arena = malloc(P->arena_bytes);
    cuda_die(cudaMemcpy(arena, P->arena, P->arena_bytes, cudaMemcpyDeviceToHost), "download arena");
    char why[200] = "";
    tu_check(guards_intact(P, arena, why, sizeof why), "%s (%s): %s", P->c.name, how, why);
    free(arena);
    if (ws) cudaFree(ws);
    if (getenv("FLASHC_HOSTILE_VERBOSE")) printf("  %-44s %-6s %s\n", P->c.name, how, msg);
}

static void run_case(const hcase *c) {
    hprob P;
    build(&P, c);
    cuda_die(cudaMalloc((void **)&P.arena, P.arena_bytes), "cudaMalloc arena");
    upload(&P);
    corrupt(&P);
    check_hostile(&P, "direct", NULL);
    check_valid_after(&P);
    cudaFree(P.arena);
    for (int t = 0; t < T_COUNT; t++) free(P.host[t]);
}

/* A graph captured over valid lengths, replayed after the lengths went bad, then after they were repaired. */
static void run_graph_case(const hcase *c) {
    hprob P;
    build(&P, c);
    cuda_die(cudaMalloc((void **)&P.arena, P.arena_bytes), "cudaMalloc arena");
    upload(&P);
    fc_attn_args d = device_args(&P, 0);
    size_t ws_bytes = 0;
    void *ws = NULL;
    tu_check(fc_attn_workspace_size(&d, &ws_bytes) == FC_OK, "%s: workspace: %s", c->name, fc_last_error());
    if (ws_bytes) cuda_die(cudaMalloc(&ws, ws_bytes), "cudaMalloc workspace");
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cuda_die(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    fc_status st = fc_attn_fwd(&d, ws, ws_bytes, g_stream);
    cuda_die(cudaStreamEndCapture(g_stream, &graph), "cudaStreamEndCapture");
    tu_check(st == FC_OK, "%s: captured call: %s", c->name, fc_last_error());
    cuda_die(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    corrupt(&P);
    check_hostile(&P, "graph", exec);
    upload(&P); /* repaired: the replay computes the CPU's result again */
    cuda_die(cudaGraphLaunch(exec, g_stream), "cudaGraphLaunch");
    tu_check(fc_check_errors(g_stream) == FC_OK, "%s: replay over repaired lengths: %s", c->name, fc_last_error());
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    if (ws) cudaFree(ws);
    check_valid_after(&P);
    cudaFree(P.arena);
    for (int t = 0; t < T_COUNT; t++) free(P.host[t]);
}

/* The cases: every corruption on the kernels that read it (decode s_q 1, prefill s_q ~150 on the wgmma kernel
 * at d 128, 192 and 256), unsplit and split. */
static const hcase CASES[] = {
    {"paged 16 decode: seqused past the table", "page_table", KV_PAGED, 1, 128, 16, 1, 0, 0, BAD_USED_OVER},
    {"paged 16 decode split: seqused past", "page_table", KV_PAGED, 1, 128, 16, 3, 0, 0, BAD_USED_OVER},
    {"paged 256 decode: append past the table", "page_table", KV_PAGED, 1, 128, 256, 1, 1, 0, BAD_USED_OVER},
    {"paged 256 prefill wgmma: seqused past", "page_table", KV_PAGED, 0, 128, 256, 1, 0, 0, BAD_USED_OVER},
    {"paged 16 prefill wgmma: append past", "page_table", KV_PAGED, 0, 128, 16, 2, 5, 0, BAD_USED_OVER},
    {"paged 16 prefill d256: seqused past", "page_table", KV_PAGED, 0, 256, 16, 1, 0, 0, BAD_USED_OVER},
    {"paged 16 decode: page = num_pages", "page_table", KV_PAGED, 1, 128, 16, 0, 0, 0, BAD_PAGE_HIGH},
    {"paged 16 decode: page = -1", "page_table", KV_PAGED, 1, 128, 16, 1, 0, 0, BAD_PAGE_NEG},
    {"paged 256 decode append: page = INT32_MAX", "page_table", KV_PAGED, 1, 128, 256, 1, 1, 0, BAD_PAGE_MAX},
    {"paged 256 prefill wgmma TMA: page = num_pages", "page_table", KV_PAGED, 0, 128, 256, 1, 0, 0, BAD_PAGE_HIGH},
    {"paged 16 prefill wgmma: page = -1", "page_table", KV_PAGED, 0, 128, 16, 3, 0, 0, BAD_PAGE_NEG},
    {"paged 64 prefill d256: page = INT32_MAX", "page_table", KV_PAGED, 0, 256, 64, 1, 0, 0, BAD_PAGE_MAX},
    {"paged 16 decode: seqused negative", "seqused_k", KV_PAGED, 1, 128, 16, 0, 0, 0, BAD_USED_NEG},
    {"dense decode: seqused past the cache", "seqused_k", KV_DENSE, 1, 128, 0, 0, 0, 0, BAD_USED_OVER},
    {"dense decode append: past the cache", "seqused_k", KV_DENSE, 1, 128, 0, 1, 2, 0, BAD_USED_OVER},
    {"dense prefill wgmma: seqused past", "seqused_k", KV_DENSE, 0, 128, 0, 1, 0, 0, BAD_USED_OVER},
    {"dense prefill d256 split: seqused past", "seqused_k", KV_DENSE, 0, 256, 0, 2, 0, 0, BAD_USED_OVER},
    {"dense prefill d192 split: seqused past", "seqused_k", KV_DENSE, 0, 192, 0, 2, 0, 0, BAD_USED_OVER},
    {"paged 16 prefill d192: page = INT32_MAX", "page_table", KV_PAGED, 0, 192, 16, 1, 0, 0, BAD_PAGE_MAX},
    {"varlen q d192 split: past max_seqlen_q", "max_seqlen_q", KV_PAGED, 0, 192, 64, 2, 0, 0, BAD_MAXQ},
    {"varlen k decode: seqused negative", "seqused_k", KV_VARLEN, 1, 128, 0, 0, 0, 0, BAD_USED_NEG},
    {"varlen q wgmma: cu_seqlens_q decreases", "cu_seqlens_q", KV_DENSE, 0, 128, 0, 1, 0, 0, BAD_CUQ_ORDER},
    {"varlen q d256: cu_seqlens_q past total", "cu_seqlens_q", KV_DENSE, 0, 256, 0, 1, 0, 0, BAD_CUQ_PAST},
    {"varlen q wgmma split: cu_seqlens_q past", "cu_seqlens_q", KV_PAGED, 0, 128, 16, 3, 0, 0, BAD_CUQ_PAST},
    {"varlen q: cu_seqlens_q[0] != 0", "cu_seqlens_q", KV_DENSE, 0, 128, 0, 1, 0, 0, BAD_CUQ_FIRST},
    {"varlen q wgmma: a sequence past max_seqlen_q", "max_seqlen_q", KV_DENSE, 0, 128, 0, 1, 0, 0, BAD_MAXQ},
    {"varlen q d256 split: past max_seqlen_q", "max_seqlen_q", KV_PAGED, 0, 256, 64, 2, 0, 0, BAD_MAXQ},
    {"varlen q decode: cu_seqlens_q past", "cu_seqlens_q", KV_PAGED, 1, 128, 16, 0, 0, 0, BAD_CUQ_PAST},
    {"varlen k wgmma: cu_seqlens_k = INT32_MAX", "cu_seqlens_k", KV_VARLEN, 0, 128, 0, 1, 0, 0, BAD_CUK_PAST},
    {"varlen k decode split: cu_seqlens_k = INT32_MIN", "cu_seqlens_k", KV_VARLEN, 1, 128, 0, 3, 0, 0, BAD_CUK_NEG},
    {"varlen k d256: a sequence past max_seqlen_k", "max_seqlen_k", KV_VARLEN, 0, 256, 0, 1, 0, 0, BAD_MAXK},
    {"paged 16 decode append rotary: tables short", "rotary_cos", KV_PAGED, 1, 128, 16, 1, 1, 1, BAD_ROTARY},
    {"dense prefill wgmma append rotary: short", "rotary_cos", KV_DENSE, 0, 128, 0, 1, 3, 1, BAD_ROTARY},
    {"dense decode: kv_batch_idx = rows", "kv_batch_idx", KV_DENSE, 1, 128, 0, 1, 0, 0, BAD_IDX_HIGH},
    {"dense decode append: kv_batch_idx = -1", "kv_batch_idx", KV_DENSE, 1, 128, 0, 1, 1, 0, BAD_IDX_NEG},
    {"dense prefill wgmma TMA: kv_batch_idx = rows", "kv_batch_idx", KV_DENSE, 0, 128, 0, 1, 0, 0, BAD_IDX_HIGH},
    {"dense prefill d256 split: kv_batch_idx = -1", "kv_batch_idx", KV_DENSE, 0, 256, 0, 2, 0, 0, BAD_IDX_NEG},
    {"dense decode split: kv_leftpad past the keys", "kv_leftpad", KV_DENSE, 1, 128, 0, 3, 0, 0, BAD_PAD_OVER},
    {"dense prefill wgmma append: leftpad past", "kv_leftpad", KV_DENSE, 0, 128, 0, 1, 2, 1, BAD_PAD_OVER},
    {"dense prefill wgmma: seqused_q past the rows", "seqused_q", KV_DENSE, 0, 128, 0, 1, 0, 0, BAD_USEDQ_OVER},
    {"paged 16 decode: seqused_q past the rows", "seqused_q", KV_PAGED, 1, 128, 16, 0, 0, 0, BAD_USEDQ_OVER},
};

static const hcase GRAPH_CASES[] = {
    {"graph: paged 16 decode split, seqused past", "page_table", KV_PAGED, 1, 128, 16, 3, 0, 0, BAD_USED_OVER},
    {"graph: paged 256 decode append, page -1", "page_table", KV_PAGED, 1, 128, 256, 1, 1, 0, BAD_PAGE_NEG},
    {"graph: dense prefill wgmma, seqused negative", "seqused_k", KV_DENSE, 0, 128, 0, 1, 0, 0, BAD_USED_NEG},
};


/* ---------------------------------------------------------------------------------------------- */
/* NaN and Inf inputs: the GPU's NaN pattern must be the CPU's                                       */

enum { NAN_Q, NAN_K, INF_V, NAN_PAST };

/* Sets feature c of head `head` of query row / key `row` of sequence b in host tensor t (q, k or v) to x. */
static void set_elem(hprob *P, int t, int b, int row, int head, int c, double x) {
    const fc_tensor *v = t == T_Q ? &P->a.q : t == T_K ? &P->a.k : &P->a.v;
    int64_t idx[4] = {b, row, head, c};
    if (t != T_Q && P->c.kv == KV_PAGED) { /* key row of sequence b: (page of its table, row in the page) */
        idx[0] = ((const int32_t *)P->host[T_TABLE])[b * MAX_PAGES + row / P->c.page];
        idx[1] = row % P->c.page;
    }
    tu_store(P->host[t], FC_BF16, tu_offset(v, idx), x);
}

/* NaN in every K and V element that holds no key of the call: rows past each sequence's keys (a dense
 * cache's tail, the rest of a sequence's last page, its unused table pages) and pages no table names, as in
 * a cache allocated with torch.empty. An append writes over the first s_new of them first. */
static void poison_past_keys(hprob *P, const int *len_k) {
    int rows = P->c.kv == KV_PAGED ? MAX_PAGES * P->c.page : P->cap;
    for (int b = 0; b < B; b++)
        for (int row = len_k[b]; row < rows; row++)
            for (int h = 0; h < HK; h++)
                for (int c = 0; c < P->c.d; c++) set_elem(P, T_K, b, row, h, c, NAN), set_elem(P, T_V, b, row, h, c, NAN);
    if (P->c.kv != KV_PAGED) return;
    int used[NUM_PAGES] = {0};
    for (int i = 0; i < B * MAX_PAGES; i++) used[((const int32_t *)P->host[T_TABLE])[i]] = 1;
    int64_t page_elems = (int64_t)P->c.page * HK * P->c.d;
    for (int pg = 0; pg < NUM_PAGES; pg++)
        for (int64_t i = 0; !used[pg] && i < page_elems; i++) {
            tu_store(P->host[T_K], FC_BF16, pg * page_elems + i, NAN);
            tu_store(P->host[T_V], FC_BF16, pg * page_elems + i, NAN);
        }
}

/* Counts the elements of n that are finite in one of got, want and not in the other, or finite in both
 * and more than tol apart (flashc.h: a NaN or Inf input makes a result non-finite, NaN or Inf as the
 * products fall: p * inf is inf, or NaN where p rounds to 0); nan_exact: a NaN must be NaN on both (no Inf
 * among the inputs). *nans: want's NaN elements. */
static int64_t nan_pattern_diff(const void *got, const void *want, fc_dtype dt, int64_t n, double tol, int nan_exact,
                                int64_t *nans) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = tu_load(got, dt, i), w = tu_load(want, dt, i);
        *nans += isnan(w) || (!nan_exact && isinf(w));
        if (isfinite(g) != isfinite(w) || (isfinite(w) && !(fabs(g - w) <= tol))) bad++;
        else if (nan_exact && isnan(g) != isnan(w)) bad++;
    }
    return bad;
}

static void run_nan_case(const hcase *c, int what) {
    static const char *WHAT[4] = {"NaN in q", "NaN in a key some rows see", "Inf in a visible value",
                                  "NaN in every cache slot past the keys"};
    hprob P;
    build(&P, c);
    int len_q[B], len_k[B];
    lengths(c, len_q, len_k);
    if (what == NAN_Q) { /* query row 2 of sequence 1, or its last where row 2 sees no key (causal, s_q > s_k) */
        int sq = P.a.cu_seqlens_q.data ? len_q[1] : (int)P.a.q.shape[1]; /* dense q: every sequence has s_q rows */
        int row = sq > 2 && 2 + len_k[1] + c->s_new - sq >= 0 ? 2 : sq - 1;
        set_elem(&P, T_Q, 1, row, 1, 5, NAN);
    }
    if (what == NAN_K) set_elem(&P, T_K, 0, 3, 0, 7, NAN);   /* key 3 of sequence 0: causal rows before it do not see it */
    if (what == INF_V) { /* no mask: every row of sequence 2 sees it (on CUDA a hidden key's Inf can reach rows of
                            its tile: 0 * inf, flashc.h) */
        set_elem(&P, T_V, 2, len_k[2] - 1, 1, 9, INFINITY);
        P.a.causal = 0;
    }
    if (what == NAN_PAST) poison_past_keys(&P, len_k);
    cuda_die(cudaMalloc((void **)&P.arena, P.arena_bytes), "cudaMalloc arena");
    upload(&P);
    fc_attn_args d = device_args(&P, 0);
    void *ws;
    size_t ws_bytes;
    fc_status st = run_device(&d, &ws, &ws_bytes);
    fc_status chk = fc_check_errors(g_stream);
    char name[200];
    snprintf(name, sizeof name, "%s, %s", c->name, WHAT[what]);
    if (tu_check(st == FC_OK && chk == FC_OK, "%s: status %s, check %s: %s", name, fc_status_string(st), fc_status_string(chk),
                 fc_last_error())) {
        void *out = malloc(P.bytes[T_OUT]), *lse = malloc(P.bytes[T_LSE]);
        cuda_die(cudaMemcpy(out, P.arena + P.at[T_OUT], P.bytes[T_OUT], cudaMemcpyDeviceToHost), "download out");
        cuda_die(cudaMemcpy(lse, P.arena + P.at[T_LSE], P.bytes[T_LSE], cudaMemcpyDeviceToHost), "download lse");
        tu_check(fc_attn_fwd(&P.a, NULL, 0, NULL) == FC_OK, "%s: CPU: %s", name, fc_last_error());
        int64_t nans = 0, lse_nans = 0;
        int exact = what != INF_V;
        int64_t bad = nan_pattern_diff(out, P.host[T_OUT], FC_BF16, (int64_t)P.bytes[T_OUT] / 2, 3e-2, exact, &nans);
        int64_t lbad = nan_pattern_diff(lse, P.host[T_LSE], FC_FP32, (int64_t)P.bytes[T_LSE] / 4, 1e-3, exact, &lse_nans);
        if (what == NAN_PAST) /* keys past a sequence's length never matter, on any kernel */
            tu_check(nans == 0 && lse_nans == 0, "%s: the CPU's result has %lld NaN out, %lld NaN lse", name, (long long)nans,
                     (long long)lse_nans);
        else
            tu_check(nans > 0, "%s: the CPU's out has no NaN%s (the input did not reach a row)", name, exact ? "" : " or Inf");
        tu_check(bad == 0 && lbad == 0, "%s: %lld out and %lld lse elements differ from the CPU's in finiteness or value (CPU: "
                 "%lld non-finite out, %lld lse)", name, (long long)bad, (long long)lbad, (long long)nans, (long long)lse_nans);
        free(out);
        free(lse);
    }
    if (ws) cudaFree(ws);
    cudaFree(P.arena);
    for (int t = 0; t < T_COUNT; t++) free(P.host[t]);
}

/* fc_merge_states with NaN, +inf and all-empty partials: the GPU's NaN pattern must be the CPU's. */
static void run_nan_merge(void) {
    enum { N = 3, ROWS = 5, H = 2, DV = 64 };
    static const float L[ROWS][N] = {{NAN, -INFINITY, -INFINITY}, {NAN, 1, 2}, {-INFINITY, -INFINITY, -INFINITY},
                                     {INFINITY, 0, -INFINITY}, {0.5f, -1, 3}};
    float op[N][ROWS][H][DV], lp[N][ROWS][H];
    for (int s = 0; s < N; s++)
        for (int r = 0; r < ROWS; r++)
            for (int h = 0; h < H; h++) {
                lp[s][r][h] = L[r][s];
                for (int c = 0; c < DV; c++) op[s][r][h][c] = (float)(2.0 * tu_uniform(&g_rng) - 1.0);
            }
    uint16_t out_cpu[ROWS][H][DV], out_gpu[ROWS][H][DV];
    float lse_cpu[ROWS][H], lse_gpu[ROWS][H];
    void *d_op, *d_lp, *d_out, *d_lse;
    cuda_die(cudaMalloc(&d_op, sizeof op), "cudaMalloc");
    cuda_die(cudaMalloc(&d_lp, sizeof lp), "cudaMalloc");
    cuda_die(cudaMalloc(&d_out, sizeof out_gpu), "cudaMalloc");
    cuda_die(cudaMalloc(&d_lse, sizeof lse_gpu), "cudaMalloc");
    cuda_die(cudaMemcpy(d_op, op, sizeof op, cudaMemcpyHostToDevice), "upload");
    cuda_die(cudaMemcpy(d_lp, lp, sizeof lp, cudaMemcpyHostToDevice), "upload");
    fc_merge_args m = {FC_DEVICE_CPU, fc_tensor_4d(op, FC_FP32, N, ROWS, H, DV), fc_tensor_3d(lp, FC_FP32, N, ROWS, H),
                       fc_tensor_3d(out_cpu, FC_BF16, ROWS, H, DV), fc_tensor_2d(lse_cpu, FC_FP32, ROWS, H)};
    tu_check(fc_merge_states(&m, NULL) == FC_OK, "merge NaN: CPU: %s", fc_last_error());
    m.device = FC_DEVICE_CUDA;
    m.out_partial.data = d_op, m.lse_partial.data = d_lp, m.out.data = d_out, m.lse.data = d_lse;
    tu_check(fc_merge_states(&m, g_stream) == FC_OK, "merge NaN: GPU: %s", fc_last_error());
    cuda_die(cudaStreamSynchronize(g_stream), "merge");
    cuda_die(cudaMemcpy(out_gpu, d_out, sizeof out_gpu, cudaMemcpyDeviceToHost), "download");
    cuda_die(cudaMemcpy(lse_gpu, d_lse, sizeof lse_gpu, cudaMemcpyDeviceToHost), "download");
    int64_t nans = 0, lnans = 0;
    int64_t bad = nan_pattern_diff(out_gpu, out_cpu, FC_BF16, ROWS * H * DV, 2e-2, 1, &nans);
    int64_t lbad = nan_pattern_diff(lse_gpu, lse_cpu, FC_FP32, ROWS * H, 1e-4, 1, &lnans);
    tu_check(lnans == 3 * H, "merge NaN: the CPU gives %lld NaN lse, expected %d (rows 0, 1, 3)", (long long)lnans, 3 * H);
    tu_check(bad == 0 && lbad == 0, "merge NaN: %lld out, %lld lse elements differ from the CPU's", (long long)bad, (long long)lbad);
    cudaFree(d_op), cudaFree(d_lp), cudaFree(d_out), cudaFree(d_lse);
}

/* NaN/Inf on each kernel: decode (split and not), wgmma prefill (d 128, 192, 256), paged. */
static const hcase NAN_CASES[] = {
    {"dense decode", "", KV_DENSE, 1, 128, 0, 1, 0, 0, 0},
    {"paged 16 decode split", "", KV_PAGED, 1, 128, 16, 3, 0, 0, 0},
    {"dense prefill wgmma", "", KV_DENSE, 0, 128, 0, 1, 0, 0, 0},
    {"paged 256 prefill wgmma split", "", KV_PAGED, 0, 128, 256, 2, 0, 0, 0},
    {"dense prefill d256", "", KV_DENSE, 0, 256, 0, 1, 0, 0, 0},
    {"paged 16 prefill d256 split", "", KV_PAGED, 0, 256, 16, 2, 0, 0, 0},
    {"dense prefill d192", "", KV_DENSE, 0, 192, 0, 1, 0, 0, 0},
    {"paged 16 decode append", "", KV_PAGED, 1, 128, 16, 1, 1, 0, 0},
    {"paged 64 prefill append split", "", KV_PAGED, 0, 128, 64, 2, 3, 0, 0},
};

int main(void) {
    if (!cuda_device_present()) {
        printf("gpu_hostile: no CUDA device: nothing run\n");
        return 2;
    }
    cuda_die(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    tu_check(fc_check_errors(g_stream) == FC_OK, "a fresh process has no device error: %s", fc_last_error());
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(&CASES[i]);
    for (size_t i = 0; i < sizeof GRAPH_CASES / sizeof GRAPH_CASES[0]; i++) run_graph_case(&GRAPH_CASES[i]);
    for (size_t i = 0; i < sizeof NAN_CASES / sizeof NAN_CASES[0]; i++)
        for (int what = NAN_Q; what <= NAN_PAST; what++) run_nan_case(&NAN_CASES[i], what);
    run_nan_merge();
    cudaStreamDestroy(g_stream);
    return tu_finish();
}
