// fwd.cu — host side of the forward kernel: tile configs, split planning, launch per head dim and dtype.
#include "fwd_kernel.cuh"

// Two configs: decode (1 warp, 16 packed rows: s_q * group <= 16) and prefill (4 warps, 64 rows).
// Keys per block: 64 up to d 128, 32 above (registers for the d_v accumulator, shared memory).
template <int D> struct block_n { static constexpr int value = D <= 128 ? 64 : 32; };

static int use_decode_cfg(const fc_problem *p) { return p->s_q * (p->h_q / p->h_k) <= 16; }

static int cfg_rows(const fc_problem *p) { return use_decode_cfg(p) ? 16 : 64; }
static int cfg_bn(const fc_problem *p) { return p->d <= 128 && p->d_v <= 128 ? 64 : 32; }

// CTAs of one config that fit on an SM (shared memory bound), for the split heuristic.
static int ctas_per_sm(const fc_problem *p) {
    int bn = cfg_bn(p), rows = cfg_rows(p);
    int pitch = (p->d / 8 + 7) / 8 * 8 * 16, pitch_v = (p->d_v / 8 + 7) / 8 * 8 * 16;
    int smem = rows * pitch + 2 * bn * (pitch + pitch_v);
    int n = (227 * 1024) / (smem + 1024);
    return n < 1 ? 1 : n > 8 ? 8 : n;
}

static int sm_count(void) {
    int dev = 0, sms = 132;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        cudaGetLastError();
        sms = 132;
    }
    return sms;
}

int fc_cuda_plan_splits(const fc_problem *p) {
    int rows = cfg_rows(p), bn = cfg_bn(p), group = p->h_q / p->h_k;
    int64_t m_tiles = ((int64_t)p->s_q * group + rows - 1) / rows;
    int64_t items = m_tiles * p->h_k * p->batch;
    int n_blocks = (p->s_k + bn - 1) / bn;
    return fc_plan_num_splits(p->num_splits, items, n_blocks, sm_count() * ctas_per_sm(p));
}

template <class C>
static fc_status launch(const fc_problem *p, fc_split_ws ws, cudaStream_t stream) {
    int group = p->h_q / p->h_k;
    int64_t m_tiles = ((int64_t)p->s_q * group + C::BM - 1) / C::BM;
    int64_t z = (int64_t)p->batch * p->h_k;
    if (m_tiles == 0 || z == 0) return FC_OK;
    if (m_tiles > 0x7fffffff || z > 65535 || ws.splits > 65535)
        return fc_fail(FC_ERR_UNSUPPORTED, "q", "grid too large for the CUDA kernel (%lld x %d x %lld)", (long long)m_tiles,
                       ws.splits, (long long)z);
    FC_CUDA_TRY(cudaFuncSetAttribute(fwd_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES));
    dim3 grid((unsigned)m_tiles, (unsigned)ws.splits, (unsigned)z);
    fwd_kernel<C><<<grid, C::THREADS, C::SMEM_BYTES, stream>>>(*p, ws);
    FC_CUDA_LAUNCHED("fwd_kernel");
    return FC_OK;
}

template <typename T, int D, int DV>
static fc_status launch_dims(const fc_problem *p, fc_split_ws ws, cudaStream_t stream) {
    if (use_decode_cfg(p)) return launch<fwd_cfg<T, D, DV, 1, block_n<(D > DV ? D : DV)>::value>>(p, ws, stream);
    return launch<fwd_cfg<T, D, DV, 4, block_n<(D > DV ? D : DV)>::value>>(p, ws, stream);
}

template <typename T>
static fc_status launch_dtype(const fc_problem *p, fc_split_ws ws, cudaStream_t stream) {
    if (p->d == p->d_v) {
        switch (p->d) {
        case 64: return launch_dims<T, 64, 64>(p, ws, stream);
        case 96: return launch_dims<T, 96, 96>(p, ws, stream);
        case 128: return launch_dims<T, 128, 128>(p, ws, stream);
        case 192: return launch_dims<T, 192, 192>(p, ws, stream);
        case 256: return launch_dims<T, 256, 256>(p, ws, stream);
        }
    }
    if (p->d == 192 && p->d_v == 128) return launch_dims<T, 192, 128>(p, ws, stream);
    return fc_fail(FC_ERR_UNSUPPORTED, "v", "d %d with d_v %d has no CUDA kernel (d_v = d, or d 192 with d_v 128)", p->d,
                   p->d_v);
}

fc_status fc_cuda_launch_fwd(const fc_problem *p, fc_split_ws ws, cudaStream_t stream) {
    return p->dtype == FC_BF16 ? launch_dtype<__nv_bfloat16>(p, ws, stream) : launch_dtype<__half>(p, ws, stream);
}
