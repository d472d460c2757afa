// gpu_append.cu — device test of fc_cuda_append: the cache after the append equals the CPU backend's, byte for byte.
//
// Builds fc_problems by hand (dense, varlen and paged caches; bf16/fp16; rotary off, interleaved or
// half-split with fp32 or dtype tables, full or partial rotary_dim; padded and packed strides), runs
// the CPU backend's fc_cpu_append on host copies and fc_cuda_append on device copies, and compares the
// whole k and v allocations (random fill everywhere, so anything written outside the new rows shows).
// Exit: 0 all passed, 1 something failed, 2 no CUDA device.
#include <stdarg.h>

#define restrict __restrict__
#include "../src/dtype.c"
#include "../src/cpu/append.c"
#include "../src/cuda/append.cu"
#include "gpu_util.h"

extern "C" fc_status fc_fail(fc_status status, const char *arg, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("  fc_fail(%s): ", arg);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    return status;
}

// A host buffer with a device twin.
typedef struct twin {
    size_t bytes;
    void *host, *dev;
} twin;

static twin twin_make(size_t bytes) {
    twin t;
    t.bytes = bytes ? bytes : 4;
    t.host = calloc(1, t.bytes);
    cuda_die(cudaMalloc(&t.dev, t.bytes), "cudaMalloc");
    return t;
}
static void twin_up(twin *t) { cuda_die(cudaMemcpy(t->dev, t->host, t->bytes, cudaMemcpyHostToDevice), "H2D"); }
static void twin_free(twin *t) {
    free(t->host);
    cuda_die(cudaFree(t->dev), "cudaFree");
}

typedef struct append_case {
    fc_dtype dt;
    fc_dtype kvt;        // the cache's dtype: dt, or FC_E4M3 / FC_E5M2 (quantised with k_descale / v_descale)
    fc_kv_layout layout;
    int page_size;
    int batch, h_k, d, d_v, s_new;
    int rotary;          // 0 off, 1 interleaved, 2 half-split
    int rot_table_dtype; // 1: tables in dt, else fp32
    int rot_partial;     // 1: rotary_dim = d/2
    int pad;             // extra elements per head row (3: odd, no 16-byte path)
    uint64_t seed;
} append_case;

static void run_case(const append_case *c, cudaStream_t stream) {
    uint64_t rng = c->seed;
    size_t es = tu_esize(c->kvt), nes = tu_esize(c->dt); // cache, new rows
    int B = c->batch, hk = c->h_k, d = c->d, dv = c->d_v, sn = c->s_new;
    int cap = sn + tu_randint(&rng, 0, 40); // keys per sequence (dense capacity / varlen length / paged use)
    char desc[160];
    static const char *LAY[3] = {"dense", "varlen", "paged"};
    snprintf(desc, sizeof desc, "%s%s%s %s%s b%d hk%d d%d dv%d s_new%d rot%d%s%s pad%d", tu_dtype_name(c->dt),
             c->kvt != c->dt ? " cache " : "", c->kvt != c->dt ? tu_dtype_name(c->kvt) : "",
             LAY[c->layout], c->layout == FC_KV_PAGED ? (c->page_size == 1 ? "1" : c->page_size == 3 ? "3" : "16") : "",
             B, hk, d, dv, sn, c->rotary, c->rotary ? (c->rot_table_dtype ? " tab-dt" : " tab-f32") : "",
             c->rot_partial ? " partial" : "", c->pad);

    fc_problem p;
    memset(&p, 0, sizeof p);
    p.device = FC_DEVICE_CUDA;
    p.dtype = c->dt;
    p.kv_dtype = c->kvt;
    p.k_batch = c->batch;
    p.batch = B; p.h_q = hk; p.h_k = hk; p.d = d; p.d_v = dv;
    p.s_q = 1;
    p.kv_layout = c->layout;
    p.s_new = sn;

    // seqused_k, cu_seqlens_k, page table
    twin seqused = twin_make(sizeof(int32_t) * B), cuk = twin_make(sizeof(int32_t) * (B + 1));
    int32_t *su = (int32_t *)seqused.host, *cu = (int32_t *)cuk.host;
    int max_pos = 0;
    cu[0] = 0;
    for (int b = 0; b < B; b++) {
        int len = c->layout == FC_KV_VARLEN ? sn + tu_randint(&rng, 0, 20) : cap;
        su[b] = tu_randint(&rng, 0, len - sn);
        cu[b + 1] = cu[b] + len;
        if (su[b] + sn > max_pos) max_pos = su[b] + sn;
    }
    int ps = c->page_size > 0 ? c->page_size : 1;
    int max_pages = (cap + ps - 1) / ps, num_pages = B * max_pages + 3;
    twin pt = twin_make(sizeof(int32_t) * B * max_pages);
    int32_t *ptab = (int32_t *)pt.host;
    int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * num_pages); // pages in shuffled order
    for (int i = 0; i < num_pages; i++) perm[i] = i;
    for (int i = num_pages - 1; i > 0; i--) {
        int j = tu_randint(&rng, 0, i);
        int32_t x = perm[i]; perm[i] = perm[j]; perm[j] = x;
    }
    for (int i = 0; i < B * max_pages; i++) ptab[i] = perm[i];
    free(perm);

    // cache k, v and new rows (head rows padded by c->pad elements)
    int64_t khs = d + c->pad, vhs = dv + c->pad;
    int64_t rows_total = c->layout == FC_KV_DENSE ? (int64_t)B * cap : c->layout == FC_KV_VARLEN ? cu[B]
                                                                                                 : (int64_t)num_pages * ps;
    twin k = twin_make(rows_total * hk * khs * es), v = twin_make(rows_total * hk * vhs * es);
    p.k.sh = khs; p.k.sr = hk * khs; p.v.sh = vhs; p.v.sr = hk * vhs;
    if (c->layout == FC_KV_DENSE) {
        p.k.sb = cap * p.k.sr; p.v.sb = cap * p.v.sr; p.s_k = cap;
    } else if (c->layout == FC_KV_PAGED) {
        p.k.sb = ps * p.k.sr; p.v.sb = ps * p.v.sr;
        p.page_size = ps; p.num_pages = num_pages; p.max_pages = max_pages; p.page_table_sb = max_pages;
        fc_fast_div_init((uint32_t)ps, &p.page_div_mul, &p.page_div_shift); /* as api.c does */
        p.s_k = max_pages * ps;
    } else { // varlen, as api.c normalises it: every row of k, the longest sequence (the kernels cut to these)
        p.total_k = cu[B];
        for (int b = 0; b < B; b++) p.s_k = cu[b + 1] - cu[b] > p.s_k ? cu[b + 1] - cu[b] : p.s_k;
    }
    int64_t knhs = d + c->pad, vnhs = dv + c->pad;
    twin kn = twin_make((size_t)B * sn * hk * knhs * nes), vn = twin_make((size_t)B * sn * hk * vnhs * nes);
    p.k_new.sh = knhs; p.k_new.sr = hk * knhs; p.k_new.sb = sn * p.k_new.sr;
    p.v_new.sh = vnhs; p.v_new.sr = hk * vnhs; p.v_new.sb = sn * p.v_new.sr;
    for (size_t i = 0; i < k.bytes / es; i++) tu_store(k.host, c->kvt, (int64_t)i, tu_normal(&rng));
    for (size_t i = 0; i < v.bytes / es; i++) tu_store(v.host, c->kvt, (int64_t)i, tu_normal(&rng));
    for (size_t i = 0; i < kn.bytes / nes; i++) tu_store(kn.host, c->dt, (int64_t)i, 4 * tu_normal(&rng));
    for (size_t i = 0; i < vn.bytes / nes; i++) tu_store(vn.host, c->dt, (int64_t)i, tu_normal(&rng));
    // fp8 cache: descales per (b, h_k) in [1/4, 2], and some values past e4m3's 448 after the division
    twin kds = twin_make(sizeof(float) * B * hk), vds = twin_make(sizeof(float) * B * hk);
    for (int i = 0; i < B * hk; i++) {
        ((float *)kds.host)[i] = (float)(0.25 + 1.75 * tu_uniform(&rng)) / (i % 5 == 0 ? 64.0f : 1.0f);
        ((float *)vds.host)[i] = (float)(0.25 + 1.75 * tu_uniform(&rng));
    }
    if (c->kvt != c->dt) {
        p.k_descale_sb = hk, p.k_descale_sh = 1, p.v_descale_sb = hk, p.v_descale_sh = 1;
        twin_up(&kds), twin_up(&vds);
    }

    // rotary tables (max_pos, rotary_dim/2), row stride padded by 2
    int rd = c->rot_partial ? d / 2 : d, half = rd / 2;
    fc_dtype rdt = c->rot_table_dtype ? c->dt : FC_FP32;
    int64_t rsr = half + 2;
    twin rc = twin_make((size_t)(max_pos + 1) * rsr * tu_esize(rdt)), rs = twin_make(rc.bytes);
    for (int pos = 0; pos <= max_pos; pos++)
        for (int m = 0; m < half; m++) {
            double ang = pos * pow(10000.0, -2.0 * m / rd);
            tu_store(rc.host, rdt, pos * rsr + m, cos(ang));
            tu_store(rs.host, rdt, pos * rsr + m, sin(ang));
        }
    if (c->rotary) {
        p.rotary_dtype = rdt; p.rotary_sr = rsr; p.rotary_dim = rd; p.rotary_max_pos = max_pos + 1;
        p.rotary_interleaved = c->rotary == 1;
    }

    twin *all[8] = {&seqused, &cuk, &pt, &k, &v, &kn, &vn, &rc};
    for (int i = 0; i < 8; i++) twin_up(all[i]);
    twin_up(&rs);

    // device problem
    fc_problem pd = p;
    pd.seqused_k = (const int32_t *)seqused.dev;
    pd.cu_seqlens_k = c->layout == FC_KV_VARLEN ? (const int32_t *)cuk.dev : NULL;
    pd.page_table = c->layout == FC_KV_PAGED ? (const int32_t *)pt.dev : NULL;
    pd.k.data = k.dev; pd.v.data = v.dev; pd.k_new.data = kn.dev; pd.v_new.data = vn.dev;
    if (c->kvt != c->dt) pd.k_descale = (const float *)kds.dev, pd.v_descale = (const float *)vds.dev;
    if (c->rotary) { pd.rotary_cos = rc.dev; pd.rotary_sin = rs.dev; }
    // host problem
    fc_problem ph = p;
    ph.device = FC_DEVICE_CPU;
    ph.seqused_k = su;
    ph.cu_seqlens_k = c->layout == FC_KV_VARLEN ? cu : NULL;
    ph.page_table = c->layout == FC_KV_PAGED ? ptab : NULL;
    ph.k.data = k.host; ph.v.data = v.host; ph.k_new.data = kn.host; ph.v_new.data = vn.host;
    if (c->kvt != c->dt) ph.k_descale = (const float *)kds.host, ph.v_descale = (const float *)vds.host;
    if (c->rotary) { ph.rotary_cos = rc.host; ph.rotary_sin = rs.host; }

    fc_status st = fc_cuda_append(&pd, stream);
    cuda_die(cudaStreamSynchronize(stream), "cudaStreamSynchronize after fc_cuda_append");
    float *row = (float *)malloc(sizeof(float) * (d > dv ? d : dv)); // a key or a value row (fc_cpu_append)
    fc_cpu_append(&ph, row);
    free(row);

    void *kg = malloc(k.bytes), *vg = malloc(v.bytes);
    cuda_die(cudaMemcpy(kg, k.dev, k.bytes, cudaMemcpyDeviceToHost), "D2H");
    cuda_die(cudaMemcpy(vg, v.dev, v.bytes, cudaMemcpyDeviceToHost), "D2H");
    size_t kbad = 0, vbad = 0;
    for (size_t i = 0; i < k.bytes / es; i++) kbad += memcmp((char *)kg + i * es, (char *)k.host + i * es, es) != 0;
    for (size_t i = 0; i < v.bytes / es; i++) vbad += memcmp((char *)vg + i * es, (char *)v.host + i * es, es) != 0;
    int ok = tu_check(st == FC_OK, "%s: status %d", desc, (int)st);
    ok &= tu_check(kbad == 0, "%s: %zu k cache elements differ from the CPU's", desc, kbad);
    ok &= tu_check(vbad == 0, "%s: %zu v cache elements differ from the CPU's", desc, vbad);
    printf("  %-72s %s\n", desc, ok ? "ok" : "FAIL");
    free(kg);
    free(vg);
    for (int i = 0; i < 8; i++) twin_free(all[i]);
    twin_free(&rs), twin_free(&kds), twin_free(&vds);
}

// Case i's shape (page size, batch, heads, head dims, partial rotary, all drawn from i), of dtype dt into a
// cache of kvt, in layout lay with rotary mode rot; the caller sets s_new, the table dtype, pad and seed.
static append_case case_shape(int i, fc_dtype dt, fc_dtype kvt, int lay, int rot) {
    static const int DS[4] = {64, 128, 96, 256}, PS[3] = {1, 3, 16};
    append_case c;
    c.dt = dt;
    c.kvt = kvt;
    c.layout = (fc_kv_layout)lay;
    c.page_size = PS[i % 3];
    c.batch = 1 + i % 4;
    c.h_k = 1 + i % 3;
    c.d = DS[i % 4];
    c.d_v = DS[(i + 1) % 4];
    c.rotary = rot;
    c.rot_partial = (i / 2) % 2;
    return c;
}

int main(void) {
    if (!cuda_device_present()) {
        printf("gpu_append: no CUDA device: skipped, nothing passed\n");
        return 2;
    }
    cudaStream_t stream;
    cuda_die(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    printf("fc_cuda_append vs the CPU backend's append (byte for byte)\n");
    static const fc_dtype DT[2] = {FC_BF16, FC_FP16};
    int i = 0;
    for (int t = 0; t < 2; t++)
        for (int lay = 0; lay < 3; lay++)
            for (int rot = 0; rot < 3; rot++)
                for (int k = 0; k < 2; k++, i++) {
                    append_case c = case_shape(i, DT[t], DT[t], lay, rot);
                    c.s_new = k ? 1 + i % 7 : 1;
                    c.rot_table_dtype = k;
                    c.pad = (i % 3 == 1) ? 3 : (i % 3 == 2 ? 8 : 0);
                    c.seed = 500 + (uint64_t)i;
                    run_case(&c, stream);
                }
    // fp8 caches (e4m3, e5m2) under both dtypes: the quantising append, with and without rotary
    for (int f = 0; f < 2; f++)
        for (int lay = 0; lay < 3; lay++)
            for (int rot = 0; rot < 3; rot += 2, i++) {
                append_case c = case_shape(i, DT[i % 2], f ? FC_E5M2 : FC_E4M3, lay, rot);
                c.s_new = 1 + i % 5;
                c.rot_table_dtype = i % 2;
                c.pad = i % 3 == 1 ? 3 : 0;
                c.seed = 900 + (uint64_t)i;
                run_case(&c, stream);
            }
    // nothing to append: no launch, FC_OK
    fc_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 2; p.h_k = 2; p.d = 64; p.d_v = 64; p.s_new = 0; p.k_new.data = (void *)&p;
    fc_status st = fc_cuda_append(&p, stream);
    cuda_die(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    tu_check(st == FC_OK, "s_new = 0: status %d", (int)st);
    cuda_die(cudaStreamDestroy(stream), "cudaStreamDestroy");
    return tu_finish();
}
