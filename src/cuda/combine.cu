// combine.cu — merging partial attention states on the GPU: the split-KV combine and fc_merge_states, one kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "cuda.cuh"
#include "tile/math.cuh"
#include "tile/pdl.cuh"
#include "trace.cuh"

#define MERGE_THREADS 256 // threads per block; `lanes` consecutive threads serve one (row, head)
#define PRE 8              // partials per thread loaded ahead of the lse (merge_kernel)

// What one merge reads and writes. n partial states of `rows` global rows by h heads, d_v features:
//   partial (s, g, hh, c) at op[s*op_sn + g*op_sr + hh*op_sh + c],  its lse at lp[s*lp_sn + g*lp_sr + hh*lp_sh]
//   out (g, hh, c) at out[b*o_sb + r*o_sr + hh*o_sh + c],            lse at lse[b*l_sb + r*l_sr + hh*l_sh]
// with (b, r) = (g / rows_per_seq, g % rows_per_seq): a dense attention output is (batch, s_q, ...);
// everything else has rows_per_seq = rows (b = 0). Rows g >= *rows_used are left alone (NULL: none).
typedef struct merge_desc {
    int n, h, d_v;
    int lanes;                 // threads per (row, head): a power of 2 in 1 .. 32
    int64_t rows, rows_per_seq;
    const int32_t *rows_used;  // device pointer (varlen: cu_seqlens_q + batch) or NULL
    const void *op;
    int64_t op_sn, op_sr, op_sh;
    const float *lp;
    int64_t lp_sn, lp_sr, lp_sh;
    void *out;
    int64_t o_sb, o_sr, o_sh;
    float *lse;                // NULL: not written
    int64_t l_sb, l_sr, l_sh;
} merge_desc;

// Largest elements per access for a dtype: 16 bytes.
static constexpr int max_vec(fc_dtype dt) { return dt == FC_FP32 ? 4 : 8; }

// x[0..VEC) = elements off .. off+VEC-1 of a DT array (one access of VEC * sizeof(DT) bytes).
template <fc_dtype DT, int VEC>
__device__ __forceinline__ void load_vec(const void *base, int64_t off, float *x) {
    if constexpr (DT == FC_FP32) {
        const float *src = (const float *)base + off;
        if constexpr (VEC == 4) {
            float4 v = *(const float4 *)src;
            x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
        } else {
            for (int i = 0; i < VEC; i++) x[i] = src[i];
        }
    } else {
        const uint16_t *src = (const uint16_t *)base + off;
        uint16_t e[VEC];
        if constexpr (VEC == 8) {
            uint4 v = *(const uint4 *)src;
            memcpy(e, &v, 16);
        } else {
            for (int i = 0; i < VEC; i++) e[i] = src[i];
        }
        for (int i = 0; i < VEC; i++)
            x[i] = DT == FC_BF16 ? fc_bf16_to_f32(e[i]) : __half2float(__ushort_as_half(e[i]));
    }
}

// Elements off .. off+VEC-1 of a bf16/fp16 array = x[0..VEC), rounded to nearest even.
template <fc_dtype DT, int VEC>
__device__ __forceinline__ void store_vec(void *base, int64_t off, const float *x) {
    uint16_t e[VEC];
    for (int i = 0; i < VEC; i++)
        e[i] = DT == FC_BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x[i])) : __half_as_ushort(__float2half_rn(x[i]));
    uint16_t *dst = (uint16_t *)base + off;
    if constexpr (VEC == 8) {
        uint4 v;
        memcpy(&v, e, 16);
        *(uint4 *)dst = v;
    } else if constexpr (VEC == 4) {
        uint2 v;
        memcpy(&v, e, 8);
        *(uint2 *)dst = v;
    } else {
        for (int i = 0; i < VEC; i++) dst[i] = e[i];
    }
}

// Reductions over the `lanes` consecutive threads that serve one (row, head) within a split group. The max
// carries a NaN lse (fc_merge_states: a NaN partial makes the row NaN, even when the others are empty).
__device__ __forceinline__ float group_max(float x, int lanes) {
    for (int o = lanes / 2; o > 0; o /= 2) x = fmax_nan(x, __shfl_xor_sync(0xffffffffu, x, o, lanes));
    return x;
}
__device__ __forceinline__ float group_sum(float x, int lanes) {
    for (int o = lanes / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o, lanes);
    return x;
}

// Combine one value per split group through shared memory (SG > 1): max or sum over slot[0 .. SG).
template <int SG, bool MAX>
__device__ __forceinline__ float across_groups(float x, float *slot, int sg, int lane) {
    if constexpr (SG == 1) return x;
    if (lane == 0) slot[sg] = x;
    __syncthreads();
    float r = slot[0];
    for (int i = 1; i < SG; i++) r = MAX ? fmax_nan(r, slot[i]) : r + slot[i];
    __syncthreads();
    return r;
}

// grid: ceil(rows * h / ITEMS) blocks of MERGE_THREADS threads, ITEMS = MERGE_THREADS / (SG * lanes).
// An item (g, hh) has SG split groups of `lanes` threads: group sg takes the partials s = sg, sg + SG,
// ...; lane owns the feature chunks [c0, c0 + VEC), c0 = lane*VEC + k*lanes*VEC. The lse spreads all
// partials over the item's threads. out = sum_s exp(lse_s - l) * out_s in fp32 (several partials'
// loads in flight per thread; groups summed in a fixed order); an all-empty row gets out = 0,
// lse = -inf; the values of empty partials are ignored. Shared memory (SG > 1): ITEMS * SG * (d_v + 1) floats.
template <fc_dtype PD, fc_dtype OD, int VEC, int SG>
__global__ void __launch_bounds__(MERGE_THREADS) merge_kernel(merge_desc m) {
    extern __shared__ float red[];
    pdl_launch_dependents(); // the next kernel may start launching now (a decode forward warms its L2) ...
    pdl_wait();              // ... and this one was launched early (PDL): the partials are complete past here
    FC_STAMP(0);
    int per_item = m.lanes * SG, items = MERGE_THREADS / per_item, local = threadIdx.x / per_item;
    int t = threadIdx.x % per_item, sg = t / m.lanes, lane = t % m.lanes;
    int64_t item = (int64_t)blockIdx.x * items + local;
    int64_t g = item / m.h;
    int hh = (int)(item % m.h);
    // No early return: the split groups of an item meet at barriers.
    bool active = item < m.rows * m.h && !(m.rows_used && g >= *m.rows_used);
    float *acc_slots = red + (int64_t)local * SG * (m.d_v + 1), *lse_slots = acc_slots + SG * m.d_v;
    int64_t op_off = g * m.op_sr + hh * m.op_sh; // partial s at element op_off + s*op_sn

    // The first pass's first PRE partials of this thread, loaded before the lse: they do not depend on
    // it, so the merge waits for one round of loads instead of two (values of empty partials are ignored).
    float pre[PRE][VEC];
    bool pre_in = active && lane * VEC < m.d_v;
#pragma unroll
    for (int k = 0; k < PRE; k++)
        if (pre_in && sg + k * SG < m.n) load_vec<PD, VEC>(m.op, op_off + (sg + k * SG) * m.op_sn + lane * VEC, pre[k]);

    const float *lp = m.lp + g * m.lp_sr + hh * m.lp_sh;
    float lmax = -INFINITY;
    for (int s = t; active && s < m.n; s += per_item) lmax = fmax_nan(lmax, lp[s * m.lp_sn]);
    lmax = across_groups<SG, true>(group_max(lmax, m.lanes), lse_slots, sg, lane);
    float sum = 0.0f;
    for (int s = t; active && lmax != -INFINITY && s < m.n; s += per_item) {
        float ls = lp[s * m.lp_sn];
        sum += ls == -INFINITY ? 0.0f : expf(ls - lmax);
    }
    sum = across_groups<SG, false>(group_sum(sum, m.lanes), lse_slots, sg, lane);
    float l = lmax == -INFINITY ? -INFINITY : lmax + logf(sum);
    float inv = 1.0f / sum; // weights exp(ls - lmax) / sum: they add up to 1 even where lse rounds (|lse| ~ 1e8)

    int64_t b = g / m.rows_per_seq, r = g % m.rows_per_seq;
    int64_t out_off = b * m.o_sb + r * m.o_sr + hh * m.o_sh;
    for (int base = 0; base < m.d_v; base += m.lanes * VEC) { // same trip count for every thread (barriers)
        int c0 = base + lane * VEC;
        bool in = c0 < m.d_v;
        float acc[VEC];
        for (int i = 0; i < VEC; i++) acc[i] = 0.0f;
        if (active && in && l != -INFINITY) {
            int s = sg;
            if (base == 0) // the preloaded partials
#pragma unroll
                for (int k = 0; k < PRE && s < m.n; k++, s += SG) {
                    float ls = lp[s * m.lp_sn], w = expf(ls - lmax) * inv;
                    for (int i = 0; i < VEC; i++) acc[i] = ls != -INFINITY ? fmaf(w, pre[k][i], acc[i]) : acc[i];
                }
#pragma unroll 4
            for (; s < m.n; s += SG) {
                float ls = lp[s * m.lp_sn], x[VEC];
                bool live = ls != -INFINITY;
                if (live) load_vec<PD, VEC>(m.op, op_off + s * m.op_sn + c0, x);
                float w = live ? expf(ls - lmax) * inv : 0.0f;
                for (int i = 0; i < VEC; i++) acc[i] = live ? fmaf(w, x[i], acc[i]) : acc[i];
            }
        }
        if constexpr (SG > 1) {
            for (int i = 0; i < VEC && in; i++) acc_slots[sg * m.d_v + c0 + i] = acc[i];
            __syncthreads();
            for (int i = 0; i < VEC && in; i++) {
                acc[i] = acc_slots[c0 + i];
                for (int k = 1; k < SG; k++) acc[i] += acc_slots[k * m.d_v + c0 + i];
            }
            __syncthreads();
        }
        if (active && in && sg == 0) store_vec<OD, VEC>(m.out, out_off + c0, acc);
    }
    if (active && sg == 0 && lane == 0 && m.lse) m.lse[b * m.l_sb + r * m.l_sr + hh * m.l_sh] = l;
    FC_STAMP(3);
}

// VEC elements per access when every partial and output chunk start is VEC-aligned, else 1.
static int pick_vec(const merge_desc *m, fc_dtype pd, fc_dtype od) {
    int v = max_vec(pd);
    int64_t strides = m->op_sn | m->op_sr | m->op_sh | m->o_sb | m->o_sr | m->o_sh | m->d_v;
    uintptr_t op_bytes = (uintptr_t)v * fc_dtype_size(pd), out_bytes = (uintptr_t)v * fc_dtype_size(od);
    if (strides % v == 0 && (uintptr_t)m->op % op_bytes == 0 && (uintptr_t)m->out % out_bytes == 0) return v;
    return 1;
}

// How a merge is spread: VEC elements per access, `lanes` threads over d_v, SG split groups.
struct merge_shape {
    int vec, sg;
    unsigned blocks;
    size_t smem;
    cudaError_t err; // of the launch
};

template <fc_dtype PD, fc_dtype OD, int SG>
static void launch_sg(const merge_desc *m, merge_shape *sh, cudaStream_t stream) {
    auto kernel = sh->vec > 1 ? merge_kernel<PD, OD, max_vec(PD), SG> : merge_kernel<PD, OD, 1, SG>;
    sh->err = fc_launch_pdl(kernel, dim3(sh->blocks), dim3(MERGE_THREADS), sh->smem, stream, *m);
}

template <fc_dtype PD, fc_dtype OD>
static void launch_typed(const merge_desc *m, merge_shape *sh, cudaStream_t stream) {
    if (sh->sg > 1) launch_sg<PD, OD, 8>(m, sh, stream);
    else launch_sg<PD, OD, 1>(m, sh, stream);
}

template <fc_dtype OD>
static void launch_out(const merge_desc *m, fc_dtype pd, merge_shape *sh, cudaStream_t stream) {
    switch (pd) {
    case FC_FP32: launch_typed<FC_FP32, OD>(m, sh, stream); break;
    case FC_BF16: launch_typed<FC_BF16, OD>(m, sh, stream); break;
    default: launch_typed<FC_FP16, OD>(m, sh, stream); break;
    }
}

// Launch the merge of m (partials pd: fp32/bf16/fp16; out od: bf16/fp16). Nothing when it is empty.
// Many partials per row (split-KV decode: up to 128) get 8 split groups, so one row's partials are
// read by 8 warps at once instead of one thread walking them all.
static fc_status launch_merge(merge_desc m, fc_dtype pd, fc_dtype od, cudaStream_t stream) {
    if (m.rows <= 0 || m.h <= 0 || m.n <= 0) return FC_OK;
    if (od != FC_BF16 && od != FC_FP16)
        return fc_fail(FC_ERR_UNSUPPORTED, "out", "merge output dtype must be bf16 or fp16 on CUDA");
    merge_shape sh;
    sh.vec = pick_vec(&m, pd, od);
    int chunks = (m.d_v + sh.vec - 1) / sh.vec;
    m.lanes = 1;
    while (m.lanes < 32 && m.lanes < chunks) m.lanes *= 2;
    int items = MERGE_THREADS / (m.lanes * 8);
    size_t smem8 = (size_t)items * 8 * (m.d_v + 1) * sizeof(float);
    sh.sg = m.n >= 16 && smem8 <= 48 * 1024 ? 8 : 1;
    items = MERGE_THREADS / (m.lanes * sh.sg);
    sh.smem = sh.sg > 1 ? smem8 : 0;
    sh.blocks = (unsigned)((m.rows * m.h + items - 1) / items);
    if (od == FC_BF16) launch_out<FC_BF16>(&m, pd, &sh, stream);
    else launch_out<FC_FP16>(&m, pd, &sh, stream);
    FC_CUDA_TRY(sh.err);
    return FC_OK;
}

// ------------------------------------------------------------------------------------------------
// Split-KV workspace: part_out (splits, total_q, h_q, d_v) then part_lse (splits, total_q, h_q), fp32,
// each piece starting on a 256-byte boundary.

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

static size_t split_states(const fc_problem *p, int splits) {
    return (size_t)splits * (size_t)p->total_q * (size_t)p->h_q;
}

// SIZE_MAX when the size does not fit a size_t (fc_cuda_attn_workspace_size rejects it).
size_t fc_cuda_split_ws_bytes(const fc_problem *p, int splits) {
    if (splits <= 1) return 0;
    size_t states, out_bytes;
    if (__builtin_mul_overflow((size_t)splits * (size_t)p->h_q, (size_t)p->total_q, &states) ||
        __builtin_mul_overflow(states, (size_t)p->d_v * sizeof(float), &out_bytes) || out_bytes > SIZE_MAX / 2)
        return SIZE_MAX;
    return align256(out_bytes) + align256(states * sizeof(float));
}

fc_split_ws fc_cuda_split_ws(const fc_problem *p, int splits, void *workspace, size_t bytes) {
    fc_split_ws ws = {splits, NULL, NULL, NULL, 0, NULL, NULL};
    size_t used = fc_cuda_split_ws_bytes(p, splits);
    if (workspace && used < bytes) ws.tail = (char *)workspace + used, ws.tail_bytes = bytes - used;
    if (splits <= 1) return ws;
    size_t out_bytes = align256(split_states(p, splits) * (size_t)p->d_v * sizeof(float));
    ws.part_out = (float *)workspace;
    ws.part_lse = (float *)((char *)workspace + out_bytes);
    return ws;
}

// ------------------------------------------------------------------------------------------------

fc_status fc_cuda_combine(const fc_problem *p, fc_split_ws ws, cudaStream_t stream) {
    if (ws.splits <= 1) return FC_OK; // the forward wrote out/lse itself
    int64_t rows = p->total_q;
    merge_desc m;
    memset(&m, 0, sizeof m);
    m.n = ws.splits; m.h = p->h_q; m.d_v = p->d_v;
    m.rows = rows;
    m.rows_per_seq = p->cu_seqlens_q ? (rows > 0 ? rows : 1) : (p->s_q > 0 ? p->s_q : 1);
    m.rows_used = p->cu_seqlens_q ? p->cu_seqlens_q + p->batch : NULL;
    m.op = ws.part_out;
    m.op_sh = p->d_v; m.op_sr = (int64_t)p->h_q * p->d_v; m.op_sn = rows * m.op_sr;
    m.lp = ws.part_lse;
    m.lp_sh = 1; m.lp_sr = p->h_q; m.lp_sn = rows * p->h_q;
    m.out = p->out.data;
    m.o_sb = p->out.sb; m.o_sr = p->out.sr; m.o_sh = p->out.sh;
    m.lse = p->lse;
    m.l_sb = p->lse_sb; m.l_sr = p->lse_sr; m.l_sh = p->lse_sh;
    return launch_merge(m, FC_FP32, p->dtype, stream);
}

extern "C" fc_status fc_cuda_merge(const fc_merge_problem *mp, void *stream) {
    merge_desc m;
    memset(&m, 0, sizeof m);
    m.n = mp->n; m.h = mp->h; m.d_v = mp->d_v;
    m.rows = mp->rows;
    m.rows_per_seq = mp->rows > 0 ? mp->rows : 1;
    m.op = mp->out_partial;
    m.op_sn = mp->op_sn; m.op_sr = mp->op_sr; m.op_sh = mp->op_sh;
    m.lp = mp->lse_partial;
    m.lp_sn = mp->lp_sn; m.lp_sr = mp->lp_sr; m.lp_sh = mp->lp_sh;
    m.out = mp->out;
    m.o_sr = mp->o_sr; m.o_sh = mp->o_sh;
    m.lse = mp->lse;
    m.l_sr = mp->l_sr; m.l_sh = mp->l_sh;
    return launch_merge(m, mp->partial_dtype, mp->out_dtype, (cudaStream_t)stream);
}

#ifdef FC_TRACE
#include <stdio.h>
#include <stdlib.h>
extern "C" void fc_cuda_trace_fwd_copy(unsigned long long (*dst)[4]);

static int cmp_u64(const void *a, const void *b) {
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

// Print the last call's timeline: per stamp, min / median / max over CTAs, in µs from the first start.
extern "C" void fc_cuda_trace_print(void) {
    static unsigned long long f[FC_TRACE_CTAS][4], m[FC_TRACE_CTAS][4], col[FC_TRACE_CTAS];
    fc_cuda_trace_fwd_copy(f);
    fc_trace_copy(m);
    unsigned long long t0 = ~0ull, newest = 0;
    for (int i = 0; i < FC_TRACE_CTAS; i++) if (f[i][3] > newest) newest = f[i][3];
    const char *names[2][4] = {{"fwd start", "fwd first block", "fwd last block", "fwd end"}, {"merge start", "", "", "merge end"}};
    for (int i = 0; i < FC_TRACE_CTAS; i++) if (f[i][0] && newest - f[i][3] < 2000000 && f[i][0] < t0) t0 = f[i][0];
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 4; k++) {
            if (!names[a][k][0]) continue;
            int n = 0;
            for (int i = 0; i < FC_TRACE_CTAS; i++) {
                unsigned long long v = a ? m[i][k] : f[i][k];
                if (v >= t0 && v - t0 < 2000000) col[n++] = v - t0;
            }
            if (!n) continue;
            qsort(col, n, sizeof col[0], cmp_u64);
            printf("trace %-16s n %5d  min %7.2f  p10 %7.2f  med %7.2f  p90 %7.2f  max %7.2f us\n", names[a][k], n,
                   col[0] / 1e3, col[n / 10] / 1e3, col[n / 2] / 1e3, col[n * 9 / 10] / 1e3, col[n - 1] / 1e3);
        }
}
#endif
