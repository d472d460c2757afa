/* gpu_merge.c — fc_merge_states on CUDA against the CPU backend: dtypes, strided layouts, empty partials. */
/*
 * Each case: random partial outputs and lse (some -inf, whose out_s are NaN: they must never be read;
 * row 0 all -inf, row 1 one partial left), the same inputs on the host and the GPU, NaN-poisoned
 * outputs on both. FC_DEVICE_CPU merges the host copies; FC_DEVICE_CUDA the device copies on a
 * non-default stream. Checks: out within 1 ulp of the output dtype of the CPU's (expf/logf differ by
 * an ulp or so between libm and CUDA), lse within 4e-6 (1 + |lse|), all-empty rows exactly 0 / -inf,
 * padding between rows untouched (still the poison), a CUDA graph replay equal to a direct call, and
 * the error paths (fp32 out on CUDA: FC_ERR_UNSUPPORTED and nothing written).
 * Exit: 0 all passed, 1 something failed, 2 no CUDA device.
 */
#include "gpu_util.h"

static cudaStream_t g_stream;

/* ---------------------------------------------------------------------------------------------- */
/* A strided tensor mirrored on host (cpu: CPU-backend copy, gpu: copy back from the device) and GPU */

typedef struct mirror {
    fc_dtype dt;
    size_t elems;      /* allocation, in elements (base offset included) */
    int64_t base;      /* element offset of the view in the allocation (misaligns it when odd) */
    void *cpu, *gpu, *dev;
    fc_tensor view;    /* host view (over cpu); the device view swaps in dev */
} mirror;

static void mirror_make(mirror *m, fc_dtype dt, int ndim, const int64_t *shape, const int64_t *stride, int64_t base) {
    memset(m, 0, sizeof *m);
    m->dt = dt;
    m->base = base;
    int64_t last = 0;
    for (int i = 0; i < ndim; i++) last += (shape[i] - 1) * stride[i];
    m->elems = (size_t)(base + last + 1);
    size_t bytes = m->elems * tu_esize(dt);
    m->cpu = malloc(bytes);
    m->gpu = malloc(bytes);
    cuda_die(cudaMalloc(&m->dev, bytes), "cudaMalloc");
    m->view.dtype = dt;
    m->view.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        m->view.shape[i] = shape[i];
        m->view.stride[i] = stride[i];
    }
}

static fc_tensor mirror_view(const mirror *m, int on_dev) {
    fc_tensor t = m->view;
    t.data = (char *)(on_dev ? m->dev : m->cpu) + m->base * tu_esize(m->dt);
    return t;
}

static void mirror_upload(mirror *m) {
    cuda_die(cudaMemcpy(m->dev, m->cpu, m->elems * tu_esize(m->dt), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

static void mirror_download(mirror *m) {
    cuda_die(cudaMemcpy(m->gpu, m->dev, m->elems * tu_esize(m->dt), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

static void mirror_free(mirror *m) {
    free(m->cpu);
    free(m->gpu);
    cuda_die(cudaFree(m->dev), "cudaFree");
}

/* ---------------------------------------------------------------------------------------------- */
/* Layouts of a case                                                                               */

enum {
    L_CONTIG,    /* everything contiguous */
    L_PADDED,    /* odd row padding (no vector path), lse_partial (rows, h, n) in memory, lse (h, rows) */
    L_ROWMAJOR,  /* partials (rows, n, h, d_v + 8) in memory, out (h, rows, d_v): strided, still aligned */
    L_MISALIGN,  /* contiguous, but out_partial and out start one element off their allocation */
    L_COUNT
};
static const char *LAYOUT_NAME[L_COUNT] = {"contig", "padded", "rowmajor", "misaligned"};

typedef struct merge_case {
    int n, rows, h, dv;
    fc_dtype pdt, odt;
    int with_lse, layout;
    uint64_t seed;
} merge_case;

/* Shapes and strides of the four tensors for a case. */
static void case_layout(const merge_case *c, int64_t op_st[4], int64_t lp_st[3], int64_t o_st[3], int64_t l_st[2],
                        int64_t *op_base, int64_t *o_base) {
    int64_t n = c->n, r = c->rows, h = c->h, dv = c->dv;
    *op_base = *o_base = 0;
    switch (c->layout) {
    case L_PADDED: {
        int64_t ds = dv + 5, dso = dv + 3;
        op_st[3] = 1; op_st[2] = ds; op_st[1] = h * ds; op_st[0] = r * h * ds + 16;
        lp_st[0] = 1; lp_st[2] = n; lp_st[1] = n * h;
        o_st[2] = 1; o_st[1] = dso; o_st[0] = h * dso;
        l_st[0] = 1; l_st[1] = r;
        break;
    }
    case L_ROWMAJOR: {
        int64_t ds = dv + 8;
        op_st[3] = 1; op_st[2] = ds; op_st[0] = h * ds; op_st[1] = n * h * ds;
        lp_st[2] = 1; lp_st[1] = h; lp_st[0] = r * h;
        o_st[2] = 1; o_st[0] = dv; o_st[1] = r * dv; /* memory order (h, rows, d_v) */
        l_st[1] = 1; l_st[0] = h + 3;
        break;
    }
    default:
        op_st[3] = 1; op_st[2] = dv; op_st[1] = h * dv; op_st[0] = r * h * dv;
        lp_st[2] = 1; lp_st[1] = h; lp_st[0] = r * h;
        o_st[2] = 1; o_st[1] = dv; o_st[0] = h * dv;
        l_st[1] = 1; l_st[0] = h;
        if (c->layout == L_MISALIGN) *op_base = *o_base = 1;
        break;
    }
}

/* Fill partials: lse 3*N(0,1), -inf for row 0 (all), row 1 (all but partial 0) and ~15% at random;
 * out_s = N(0,1), NaN where lse_s = -inf (never to be read). */
static void fill_inputs(const merge_case *c, mirror *op, mirror *lp) {
    uint64_t rng = c->seed;
    for (size_t i = 0; i < op->elems; i++) tu_store(op->cpu, op->dt, (int64_t)i, tu_normal(&rng));
    for (size_t i = 0; i < lp->elems; i++) ((float *)lp->cpu)[i] = NAN; /* gaps: never read */
    for (int s = 0; s < c->n; s++)
        for (int r = 0; r < c->rows; r++)
            for (int hh = 0; hh < c->h; hh++) {
                int64_t li = lp->base + s * lp->view.stride[0] + r * lp->view.stride[1] + hh * lp->view.stride[2];
                float l = (float)(3 * tu_normal(&rng));
                if (r == 0 || (r == 1 && s > 0) || tu_uniform(&rng) < 0.15) l = -INFINITY;
                ((float *)lp->cpu)[li] = l;
                if (l == -INFINITY) {
                    int64_t oi = op->base + s * op->view.stride[0] + r * op->view.stride[1] + hh * op->view.stride[2];
                    for (int e = 0; e < c->dv; e++) tu_store(op->cpu, op->dt, oi + e, NAN);
                }
            }
}

static fc_merge_args merge_args(fc_device dev, mirror *op, mirror *lp, mirror *o, mirror *l) {
    int on_dev = dev == FC_DEVICE_CUDA;
    fc_merge_args a;
    memset(&a, 0, sizeof a);
    a.device = dev;
    a.out_partial = mirror_view(op, on_dev);
    a.lse_partial = mirror_view(lp, on_dev);
    a.out = mirror_view(o, on_dev);
    if (l) a.lse = mirror_view(l, on_dev);
    return a;
}

/* 1 when element i of the allocation lies inside the view (else it is padding). */
static int in_view(const mirror *m, int64_t i, int64_t *idx) {
    int64_t rem = i - m->base;
    if (rem < 0) return 0;
    /* views here nest (each stride spans the dims below it): peel the largest stride first */
    int order[4] = {0, 1, 2, 3}, nd = m->view.ndim;
    for (int a = 0; a < nd; a++)
        for (int b = a + 1; b < nd; b++)
            if (m->view.stride[order[b]] > m->view.stride[order[a]]) {
                int t = order[a]; order[a] = order[b]; order[b] = t;
            }
    for (int k = 0; k < nd; k++) {
        int d = order[k];
        idx[d] = 0;
        if (m->view.shape[d] == 1) continue; /* its stride may tie another's */
        int64_t q = rem / m->view.stride[d];
        if (q >= m->view.shape[d]) return 0;
        idx[d] = q;
        rem -= q * m->view.stride[d];
    }
    return rem == 0;
}

/* Compare the GPU's out and lse with the CPU's. */
static void compare(const merge_case *c, const char *desc, mirror *o, mirror *l) {
    int64_t bad = 0, pad_bad = 0, exact = 0, total = 0;
    double worst = 0;
    double eps = tu_eps(c->odt);
    int64_t idx[4];
    for (size_t i = 0; i < o->elems; i++) {
        double g = tu_load(o->gpu, c->odt, (int64_t)i), x = tu_load(o->cpu, c->odt, (int64_t)i);
        if (!in_view(o, (int64_t)i, idx)) { /* padding: both still poisoned, bit for bit */
            if (memcmp((char *)o->gpu + i * 2, (char *)o->cpu + i * 2, 2) != 0) pad_bad++;
            continue;
        }
        total++;
        double tol = eps * fabs(x) + 1e-6;
        double err = fabs(g - x);
        if (!(err <= tol) || (x == 0 && g != 0)) bad++;
        if (g == x) exact++;
        double ratio = isnan(err) ? INFINITY : err / tol;
        if (ratio > worst) worst = ratio;
    }
    tu_check(bad == 0, "%s: %lld of %lld out elements off the CPU's by more than 1 ulp (worst err/tol %.3g)", desc,
             (long long)bad, (long long)total, worst);
    tu_check(pad_bad == 0, "%s: %lld padding elements of out written", desc, (long long)pad_bad);
    int64_t lbad = 0, lpad = 0;
    double lworst = 0;
    if (l) {
        for (size_t i = 0; i < l->elems; i++) {
            float g = ((float *)l->gpu)[i], x = ((float *)l->cpu)[i];
            if (!in_view(l, (int64_t)i, idx)) {
                if (memcmp(&g, &x, 4) != 0) lpad++;
                continue;
            }
            double tol = 4e-6 * (1 + fabs(x));
            if (x == -INFINITY ? g != -INFINITY : !(fabs((double)g - x) <= tol)) lbad++;
            if (x != -INFINITY && fabs((double)g - x) / tol > lworst) lworst = fabs((double)g - x) / tol;
        }
        tu_check(lbad == 0, "%s: %lld lse elements off the CPU's (worst err/tol %.3g)", desc, (long long)lbad, lworst);
        tu_check(lpad == 0, "%s: %lld padding elements of lse written", desc, (long long)lpad);
    }
    printf("  %-58s %s  exact %5.1f%%  out err/tol %.3f  lse err/tol %.3f\n", desc,
           bad || pad_bad || lbad || lpad ? "FAIL" : "ok  ", total ? 100.0 * exact / total : 100.0, worst, lworst);
}

static void run_case(const merge_case *c) {
    char desc[128];
    snprintf(desc, sizeof desc, "n%d rows%d h%d dv%d %s->%s%s %s", c->n, c->rows, c->h, c->dv, tu_dtype_name(c->pdt),
             tu_dtype_name(c->odt), c->with_lse ? " lse" : "", LAYOUT_NAME[c->layout]);
    int64_t op_st[4], lp_st[3], o_st[3], l_st[2], op_base, o_base;
    case_layout(c, op_st, lp_st, o_st, l_st, &op_base, &o_base);
    int64_t op_sh[4] = {c->n, c->rows, c->h, c->dv}, lp_sh[3] = {c->n, c->rows, c->h};
    int64_t o_sh[3] = {c->rows, c->h, c->dv}, l_sh[2] = {c->rows, c->h};
    mirror op, lp, o, l;
    mirror_make(&op, c->pdt, 4, op_sh, op_st, op_base);
    mirror_make(&lp, FC_FP32, 3, lp_sh, lp_st, 0);
    mirror_make(&o, c->odt, 3, o_sh, o_st, o_base);
    mirror_make(&l, FC_FP32, 2, l_sh, l_st, 0);
    fill_inputs(c, &op, &lp);
    tu_poison(o.cpu, c->odt, (int64_t)o.elems);
    tu_poison(l.cpu, FC_FP32, (int64_t)l.elems);
    mirror_upload(&op);
    mirror_upload(&lp);
    mirror_upload(&o);
    mirror_upload(&l);

    fc_merge_args ac = merge_args(FC_DEVICE_CPU, &op, &lp, &o, c->with_lse ? &l : NULL);
    fc_status st = fc_merge_states(&ac, NULL);
    int ok = tu_check(st == FC_OK, "%s: CPU status %s: %s", desc, fc_status_string(st), fc_last_error());
    fc_merge_args ag = merge_args(FC_DEVICE_CUDA, &op, &lp, &o, c->with_lse ? &l : NULL);
    st = fc_merge_states(&ag, g_stream);
    ok &= tu_check(st == FC_OK, "%s: CUDA status %s: %s", desc, fc_status_string(st), fc_last_error());
    cuda_die(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize after fc_merge_states");
    if (ok) {
        mirror_download(&o);
        mirror_download(&l);
        compare(c, desc, &o, c->with_lse ? &l : NULL);
    }
    mirror_free(&op); mirror_free(&lp); mirror_free(&o); mirror_free(&l);
}

/* ---------------------------------------------------------------------------------------------- */

static void sweep(void) {
    static const fc_dtype PDT[3] = {FC_FP32, FC_BF16, FC_FP16}, ODT[2] = {FC_BF16, FC_FP16};
    static const int NS[6] = {1, 2, 3, 7, 33, 128};
    static const int DVS[10] = {64, 96, 128, 192, 256, 1, 3, 40, 100, 520};
    int i = 0;
    for (int p = 0; p < 3; p++)
        for (int o = 0; o < 2; o++)
            for (int L = 0; L < L_COUNT; L++)
                for (int k = 0; k < 2; k++, i++) {
                    merge_case c = {NS[i % 6], 2 + (i * 7) % 37, 1 + i % 5, DVS[i % 10], PDT[p], ODT[o], (i % 3) != 1,
                                    L, 1000 + (uint64_t)i};
                    run_case(&c);
                }
    /* larger: many blocks, vector path, split-KV-like shapes */
    merge_case big[4] = {
        {4, 1000, 16, 128, FC_FP32, FC_BF16, 1, L_CONTIG, 91},
        {16, 300, 32, 64, FC_FP32, FC_FP16, 1, L_ROWMAJOR, 92},
        {2, 513, 8, 256, FC_BF16, FC_BF16, 1, L_PADDED, 93},
        {128, 37, 4, 96, FC_FP16, FC_FP16, 0, L_CONTIG, 94},
    };
    for (int k = 0; k < 4; k++) run_case(&big[k]);
}

/* A merge captured into a CUDA graph and replayed gives what a direct call gives. */
static void graph_case(void) {
    merge_case c = {3, 64, 4, 128, FC_FP32, FC_BF16, 1, L_CONTIG, 4242};
    const char *desc = "graph capture n3 rows64 h4 dv128 fp32->bf16";
    int64_t op_st[4], lp_st[3], o_st[3], l_st[2], ob, oob;
    case_layout(&c, op_st, lp_st, o_st, l_st, &ob, &oob);
    int64_t op_sh[4] = {c.n, c.rows, c.h, c.dv}, lp_sh[3] = {c.n, c.rows, c.h};
    int64_t o_sh[3] = {c.rows, c.h, c.dv}, l_sh[2] = {c.rows, c.h};
    mirror op, lp, o, l;
    mirror_make(&op, c.pdt, 4, op_sh, op_st, 0);
    mirror_make(&lp, FC_FP32, 3, lp_sh, lp_st, 0);
    mirror_make(&o, c.odt, 3, o_sh, o_st, 0);
    mirror_make(&l, FC_FP32, 2, l_sh, l_st, 0);
    fill_inputs(&c, &op, &lp);
    tu_poison(o.cpu, c.odt, (int64_t)o.elems);
    tu_poison(l.cpu, FC_FP32, (int64_t)l.elems);
    mirror_upload(&op); mirror_upload(&lp); mirror_upload(&o); mirror_upload(&l);

    fc_merge_args ag = merge_args(FC_DEVICE_CUDA, &op, &lp, &o, &l);
    fc_status st = fc_merge_states(&ag, g_stream); /* direct: the expected result */
    cuda_die(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
    tu_check(st == FC_OK, "%s: direct status %s", desc, fc_status_string(st));
    mirror_download(&o);
    mirror_download(&l);
    memcpy(o.cpu, o.gpu, o.elems * 2);
    memcpy(l.cpu, l.gpu, l.elems * 4);
    tu_poison(o.gpu, c.odt, (int64_t)o.elems);
    tu_poison(l.gpu, FC_FP32, (int64_t)l.elems);
    cuda_die(cudaMemcpy(o.dev, o.gpu, o.elems * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_die(cudaMemcpy(l.dev, l.gpu, l.elems * 4, cudaMemcpyHostToDevice), "cudaMemcpy");

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cuda_die(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    st = fc_merge_states(&ag, g_stream);
    cuda_die(cudaStreamEndCapture(g_stream, &graph), "cudaStreamEndCapture");
    tu_check(st == FC_OK, "%s: captured status %s: %s", desc, fc_status_string(st), fc_last_error());
    cuda_die(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    cuda_die(cudaGraphLaunch(exec, g_stream), "cudaGraphLaunch");
    cuda_die(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
    mirror_download(&o);
    mirror_download(&l);
    int same = memcmp(o.gpu, o.cpu, o.elems * 2) == 0 && memcmp(l.gpu, l.cpu, l.elems * 4) == 0;
    tu_check(same, "%s: graph replay differs from the direct call", desc);
    printf("  %-58s %s\n", desc, same ? "ok" : "FAIL");
    cuda_die(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
    cuda_die(cudaGraphDestroy(graph), "cudaGraphDestroy");
    mirror_free(&op); mirror_free(&lp); mirror_free(&o); mirror_free(&l);
}

/* Error paths: the status, and nothing written. */
static void error_cases(void) {
    int64_t op_sh[4] = {2, 8, 2, 64}, op_st[4] = {8 * 2 * 64, 2 * 64, 64, 1};
    int64_t lp_sh[3] = {2, 8, 2}, lp_st[3] = {16, 2, 1};
    int64_t o_sh[3] = {8, 2, 64}, o_st[3] = {128, 64, 1};
    int64_t l_sh[2] = {8, 2}, l_st[2] = {2, 1};
    mirror op, lp, o32, l;
    mirror_make(&op, FC_FP32, 4, op_sh, op_st, 0);
    mirror_make(&lp, FC_FP32, 3, lp_sh, lp_st, 0);
    mirror_make(&o32, FC_FP32, 3, o_sh, o_st, 0);
    mirror_make(&l, FC_FP32, 2, l_sh, l_st, 0);
    merge_case c = {2, 8, 2, 64, FC_FP32, FC_FP32, 1, L_CONTIG, 7};
    fill_inputs(&c, &op, &lp);
    tu_poison(o32.cpu, FC_FP32, (int64_t)o32.elems);
    tu_poison(l.cpu, FC_FP32, (int64_t)l.elems);
    mirror_upload(&op); mirror_upload(&lp); mirror_upload(&o32); mirror_upload(&l);

    fc_merge_args a = merge_args(FC_DEVICE_CUDA, &op, &lp, &o32, &l);
    fc_status st = fc_merge_states(&a, g_stream);
    cuda_die(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
    mirror_download(&o32);
    mirror_download(&l);
    tu_check(st == FC_ERR_UNSUPPORTED, "fp32 out on CUDA: status %s, expected unsupported", fc_status_string(st));
    tu_check(memcmp(o32.gpu, o32.cpu, o32.elems * 4) == 0 && memcmp(l.gpu, l.cpu, l.elems * 4) == 0,
             "fp32 out on CUDA: something was written");
    printf("  %-58s %s (%s)\n", "fp32 out on CUDA", st == FC_ERR_UNSUPPORTED ? "ok" : "FAIL", fc_last_error());

    a.out.dtype = FC_INT32; /* int32 output: invalid argument */
    st = fc_merge_states(&a, g_stream);
    tu_check(st == FC_ERR_INVALID_ARGUMENT, "int32 out on CUDA: status %s, expected invalid argument",
             fc_status_string(st));
    a = merge_args(FC_DEVICE_CUDA, &op, &lp, &o32, &l);
    a.out.dtype = FC_BF16;
    a.out.stride[0] = 128; a.out.stride[1] = 64;
    a.lse.shape[1] = 3; /* lse (rows, h) mismatch */
    st = fc_merge_states(&a, g_stream);
    tu_check(st == FC_ERR_INVALID_ARGUMENT, "lse shape mismatch on CUDA: status %s, expected invalid argument",
             fc_status_string(st));
    cuda_die(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
    mirror_download(&o32);
    tu_check(memcmp(o32.gpu, o32.cpu, o32.elems * 4) == 0, "invalid merges on CUDA: something was written");
    mirror_free(&op); mirror_free(&lp); mirror_free(&o32); mirror_free(&l);
}

int main(void) {
    if (!cuda_device_present() || !fc_cuda_available()) {
        printf("gpu_merge: no CUDA device (or a build without CUDA): skipped, nothing passed\n");
        return 2;
    }
    cuda_die(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    printf("fc_merge_states: CUDA vs CPU\n");
    sweep();
    graph_case();
    error_cases();
    cuda_die(cudaStreamDestroy(g_stream), "cudaStreamDestroy");
    return tu_finish();
}
