// combine.cu — merging partial attention states on the GPU: the split-KV combine and fc_merge_states, one kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "cuda.cuh"

#define MERGE_THREADS 256 // threads per block; `lanes` consecutive threads serve one (row, head)

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

// Reductions over the `lanes` threads that serve one (row, head); mask: those threads.
__device__ __forceinline__ float group_max(float x, int lanes, unsigned mask) {
    for (int o = lanes / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(mask, x, o, lanes));
    return x;
}
__device__ __forceinline__ float group_sum(float x, int lanes, unsigned mask) {
    for (int o = lanes / 2; o > 0; o /= 2) x += __shfl_xor_sync(mask, x, o, lanes);
    return x;
}

// l = lmax + log(sum_s exp(lse_s - lmax)) over the non-empty partials, the splits spread over the
// group's lanes (independent loads in flight, not n round trips in a row).
__device__ __forceinline__ float merged_lse(const float *lp, int64_t lp_sn, int n, int lane, int lanes, unsigned mask) {
    float lmax = -INFINITY;
    for (int s = lane; s < n; s += lanes) lmax = fmaxf(lmax, lp[s * lp_sn]);
    lmax = group_max(lmax, lanes, mask);
    if (lmax == -INFINITY) return -INFINITY;
    float sum = 0.0f;
    for (int s = lane; s < n; s += lanes) {
        float ls = lp[s * lp_sn];
        sum += ls == -INFINITY ? 0.0f : expf(ls - lmax);
    }
    return lmax + logf(group_sum(sum, lanes, mask));
}

// grid: ceil(rows * h * lanes / MERGE_THREADS) blocks of MERGE_THREADS threads.
// Item (g, hh) = ((thread / lanes) / h, (thread / lanes) % h); lane thread % lanes owns the feature
// chunks [c0, c0 + VEC) with c0 = lane*VEC + k*lanes*VEC. out = sum_s exp(lse_s - l) * out_s in fp32
// (fma in s order, loads of several splits in flight); an all-empty row gets out = 0, lse = -inf;
// empty partials are never read.
template <fc_dtype PD, fc_dtype OD, int VEC>
__global__ void __launch_bounds__(MERGE_THREADS) merge_kernel(merge_desc m) {
    int64_t item = ((int64_t)blockIdx.x * MERGE_THREADS + threadIdx.x) / m.lanes;
    int lane = threadIdx.x & (m.lanes - 1);
    if (item >= m.rows * m.h) return; // whole groups leave together: lanes divides the warp
    int64_t g = item / m.h;
    int hh = (int)(item % m.h);
    if (m.rows_used && g >= *m.rows_used) return;
    unsigned mask = m.lanes == 32 ? 0xffffffffu : ((1u << m.lanes) - 1u) << (threadIdx.x & 31 & ~(m.lanes - 1));

    const float *lp = m.lp + g * m.lp_sr + hh * m.lp_sh;
    int64_t op_off = g * m.op_sr + hh * m.op_sh; // partial s at element op_off + s*op_sn
    int64_t b = g / m.rows_per_seq, r = g % m.rows_per_seq;
    int64_t out_off = b * m.o_sb + r * m.o_sr + hh * m.o_sh;

    float l = merged_lse(lp, m.lp_sn, m.n, lane, m.lanes, mask);
    for (int c0 = lane * VEC; c0 < m.d_v; c0 += m.lanes * VEC) {
        float acc[VEC];
        for (int i = 0; i < VEC; i++) acc[i] = 0.0f;
        if (l != -INFINITY) {
#pragma unroll 4
            for (int s = 0; s < m.n; s++) {
                float ls = lp[s * m.lp_sn], x[VEC];
                bool live = ls != -INFINITY;
                if (live) load_vec<PD, VEC>(m.op, op_off + s * m.op_sn + c0, x);
                float w = live ? expf(ls - l) : 0.0f;
                for (int i = 0; i < VEC; i++) acc[i] = live ? fmaf(w, x[i], acc[i]) : acc[i];
            }
        }
        store_vec<OD, VEC>(m.out, out_off + c0, acc);
    }
    if (m.lse && lane == 0) m.lse[b * m.l_sb + r * m.l_sr + hh * m.l_sh] = l;
}

// VEC elements per access when every partial and output chunk start is VEC-aligned, else 1.
static int pick_vec(const merge_desc *m, fc_dtype pd, fc_dtype od) {
    int v = max_vec(pd);
    int64_t strides = m->op_sn | m->op_sr | m->op_sh | m->o_sb | m->o_sr | m->o_sh | m->d_v;
    uintptr_t op_bytes = (uintptr_t)v * fc_dtype_size(pd), out_bytes = (uintptr_t)v * fc_dtype_size(od);
    if (strides % v == 0 && (uintptr_t)m->op % op_bytes == 0 && (uintptr_t)m->out % out_bytes == 0) return v;
    return 1;
}

template <fc_dtype PD, fc_dtype OD>
static void launch_typed(const merge_desc *m, int vec, unsigned blocks, cudaStream_t stream) {
    if (vec > 1) merge_kernel<PD, OD, max_vec(PD)><<<blocks, MERGE_THREADS, 0, stream>>>(*m);
    else merge_kernel<PD, OD, 1><<<blocks, MERGE_THREADS, 0, stream>>>(*m);
}

template <fc_dtype OD>
static void launch_out(const merge_desc *m, fc_dtype pd, int vec, unsigned blocks, cudaStream_t stream) {
    switch (pd) {
    case FC_FP32: launch_typed<FC_FP32, OD>(m, vec, blocks, stream); break;
    case FC_BF16: launch_typed<FC_BF16, OD>(m, vec, blocks, stream); break;
    default: launch_typed<FC_FP16, OD>(m, vec, blocks, stream); break;
    }
}

// Launch the merge of m (partials pd: fp32/bf16/fp16; out od: bf16/fp16). Nothing when it is empty.
static fc_status launch_merge(merge_desc m, fc_dtype pd, fc_dtype od, cudaStream_t stream) {
    if (m.rows <= 0 || m.h <= 0 || m.n <= 0) return FC_OK;
    if (od != FC_BF16 && od != FC_FP16)
        return fc_fail(FC_ERR_UNSUPPORTED, "out", "merge output dtype must be bf16 or fp16 on CUDA");
    int vec = pick_vec(&m, pd, od);
    int chunks = (m.d_v + vec - 1) / vec;
    m.lanes = 1;
    while (m.lanes < 32 && m.lanes < chunks) m.lanes *= 2;
    int64_t threads = m.rows * m.h * m.lanes;
    unsigned blocks = (unsigned)((threads + MERGE_THREADS - 1) / MERGE_THREADS);
    if (od == FC_BF16) launch_out<FC_BF16>(&m, pd, vec, blocks, stream);
    else launch_out<FC_FP16>(&m, pd, vec, blocks, stream);
    FC_CUDA_LAUNCHED("merge_kernel");
    return FC_OK;
}

// ------------------------------------------------------------------------------------------------
// Split-KV workspace: part_out (splits, total_q, h_q, d_v) then part_lse (splits, total_q, h_q), fp32,
// each piece starting on a 256-byte boundary.

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

static size_t split_states(const fc_problem *p, int splits) {
    return (size_t)splits * (size_t)p->total_q * (size_t)p->h_q;
}

size_t fc_cuda_split_ws_bytes(const fc_problem *p, int splits) {
    if (splits <= 1) return 0;
    size_t states = split_states(p, splits);
    return align256(states * (size_t)p->d_v * sizeof(float)) + align256(states * sizeof(float));
}

fc_split_ws fc_cuda_split_ws(const fc_problem *p, int splits, void *workspace) {
    fc_split_ws ws = {splits, NULL, NULL};
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
