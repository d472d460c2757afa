// fwd.cu — the forward kernels' dispatch over dtype and head dims (to the units of fwd_launch.cuh), split
// planning, the description of a call's kernel.
#include "fwd_launch.cuh"

// fp8 caches (e4m3 / e5m2 under bf16 / fp16 queries): the decode kernel, whose stages hold the fp8 rows and
// whose MMAs take K's and V's fragments from them, converted in registers (fwd_kernel.cuh, qk_block_fp8 /
// pv_block_fp8), at kernel dims 64, 128 and 256 (the others padded up to them); d and d_v multiples of 16 (whole
// 16-byte chunks of fp8). Prefill shapes (s_q x group > 16): not yet.
static fc_status dispatch_fp8(const fc_problem *p, fc_split_ws ws, cudaStream_t stream, cfg_info *info) {
    if (!use_decode_cfg(p))
        return fc_fail(FC_ERR_UNSUPPORTED, "k", "fp8 caches run on CUDA for decode only so far (s_q x h_q / h_k <= 16 "
                       "packed query rows; this call has %lld)", (long long)p->s_q * (p->h_q / p->h_k));
    if (p->d % 16 || p->d_v % 16)
        return fc_fail(FC_ERR_UNSUPPORTED, "k", "fp8 caches on CUDA need d and d_v multiples of 16 (d %d, d_v %d)", p->d,
                       p->d_v);
    int dim = p->d > p->d_v ? p->d : p->d_v;
#define FC_FP8_DIMS(T)                                                                                     \
    if (dim <= 64) return fwd_launch_unit<T, 64, 64, unsigned char>(p, ws, stream, info);                  \
    if (dim <= 128) return fwd_launch_unit<T, 128, 128, unsigned char>(p, ws, stream, info);               \
    return fwd_launch_unit<T, 256, 256, unsigned char>(p, ws, stream, info);
    if (p->dtype == FC_BF16) { FC_FP8_DIMS(__nv_bfloat16) } else { FC_FP8_DIMS(__half) }
#undef FC_FP8_DIMS
}

// FP8 attention (q, k and v e4m3, out bf16 / fp16; flashc.h): the wgmma prefill on e4m3 tiles at kernel dims
// 64 (max(d, d_v) <= 64), 128 and 256; d and d_v multiples of 16 (whole 16-byte chunks), no rotary.
static fc_status dispatch_fp8q(const fc_problem *p, fc_split_ws ws, cudaStream_t stream, cfg_info *info) {
    if (p->q_dtype != FC_E4M3)
        return fc_fail(FC_ERR_UNSUPPORTED, "q", "fp8 queries on CUDA: e4m3 only (e5m2 runs on the CPU)");
    if (p->d % 16 || p->d_v % 16)
        return fc_fail(FC_ERR_UNSUPPORTED, "q", "fp8 queries on CUDA need d and d_v multiples of 16 (d %d, d_v %d)", p->d,
                       p->d_v);
    if (p->rotary_cos)
        return fc_fail(FC_ERR_UNSUPPORTED, "rotary_cos", "rotary with fp8 queries runs on the CPU only");
    int dim = p->d > p->d_v ? p->d : p->d_v;
#define FC_FP8Q_DIMS(T)                                                                                    \
    return dim <= 64    ? fwd_launch_fp8q<T, 64>(p, ws, stream, info)                                      \
           : dim <= 128 ? fwd_launch_fp8q<T, 128>(p, ws, stream, info)                                     \
                        : fwd_launch_fp8q<T, 256>(p, ws, stream, info);
    if (p->dtype == FC_BF16) { FC_FP8Q_DIMS(__nv_bfloat16) } else { FC_FP8Q_DIMS(__half) }
#undef FC_FP8Q_DIMS
}

// The one dispatch over dtype and head dims: launches, or (info != NULL) only reports the config.
// The kernel head dim of a head dim (a multiple of 8 up to 256): the next of 64, 96, 128, 192, 256.
static int kernel_dim(int d) { return d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : 256; }

// d = d_v of the five kernel dims and d 192 / d_v 128 have their own kernels; any other pair runs padded to
// the kernel dim of max(d, d_v) (both kernels zero-fill the features past d and d_v).
static fc_status dispatch(const fc_problem *p, fc_split_ws ws, cudaStream_t stream, cfg_info *info) {
    if (p->q_dtype != p->dtype) return dispatch_fp8q(p, ws, stream, info);
    if (p->kv_dtype != p->dtype) return dispatch_fp8(p, ws, stream, info);
#define FC_DIMS(T)                                                                                         \
    if (p->d == 192 && p->d_v == 128) return fwd_launch_unit<T, 192, 128, T>(p, ws, stream, info);         \
    switch (kernel_dim(p->d > p->d_v ? p->d : p->d_v)) {                                                   \
    case 64: return fwd_launch_unit<T, 64, 64, T>(p, ws, stream, info);                                    \
    case 96: return fwd_launch_unit<T, 96, 96, T>(p, ws, stream, info);                                    \
    case 128: return fwd_launch_unit<T, 128, 128, T>(p, ws, stream, info);                                 \
    case 192: return fwd_launch_unit<T, 192, 192, T>(p, ws, stream, info);                                 \
    case 256: return fwd_launch_unit<T, 256, 256, T>(p, ws, stream, info);                                 \
    }
    if (p->dtype == FC_BF16) { FC_DIMS(__nv_bfloat16) } else { FC_DIMS(__half) }
#undef FC_DIMS
    return fc_fail(FC_ERR_UNSUPPORTED, "q", "head dims d %d, d_v %d have no CUDA kernel (multiples of 8 up to 256)",
                   p->d, p->d_v);
}

// Splits: enough CTAs for one wave over the SMs (plan.c), counting how many CTAs of the chosen config
// fit on an SM by shared memory and threads; the decode kernels' (mma.sync) by the fill of their waves.
int fc_cuda_plan_splits(const fc_problem *p) {
    if (p->seqused_q) return 1; // the merge would read the partials of rows past seqused_q, which no tile writes
    cfg_info c = {16, 64, 64 * 1024, 32, 1, false, 0, 0, 16, 1, 0, false};
    fc_split_ws none = {1, NULL, NULL};
    if (dispatch(p, none, 0, &c) != FC_OK) return 1;
    int n_blocks = (p->s_k + c.bn - 1) / c.bn / c.kw; // blocks per key warp at one split
    int slots = sm_count() * ctas_per_sm(c.smem, c.threads);
    if (c.wg) return fc_plan_num_splits(p->num_splits, tiles_of_problem(p, c.rows), n_blocks, slots);
    return fc_plan_splits_by_waves(p->num_splits, tiles_of_problem(p, c.rows), n_blocks, slots);
}

fc_status fc_cuda_fwd_supported(const fc_problem *p) {
    cfg_info c = {};
    fc_split_ws none = {1, NULL, NULL};
    return dispatch(p, none, 0, &c);
}

fc_status fc_cuda_describe(const fc_problem *p, char *buf, size_t n) {
    cfg_info c = {};
    fc_split_ws none = {1, NULL, NULL};
    int splits = fc_cuda_plan_splits(p);
    c.plain_splits = splits < 1 ? 1 : splits;
    fc_status st = dispatch(p, none, 0, &c);
    if (st != FC_OK) return st;
    const char *app = p->k_new.data && p->s_new > 0 ? "append, then " : "";
    int64_t m_tiles = ((int64_t)p->s_q * (p->h_q / p->h_k) + c.tile_rows - 1) / c.tile_rows;
    bool persistent = c.wg && wg_walk_ctas(p, m_tiles, 0, splits, // (whether it walks; its CTAs need no skip_bm)
                                            (int64_t)sm_count() * ctas_per_sm(c.smem, c.threads)) > 0;
    if (c.wg)
        snprintf(buf, n, "cuda: %swgmma prefill (kernel d %d / d_v %d%s%s): %d-row tiles %s, %d-key "
                 "blocks, %d Q buffer%s; %d split%s", app, c.d, c.dv, p->q_dtype != p->dtype ? ", e4m3 tiles" : "",
                 persistent && c.plain ? ", plain calls' kernel" : "", c.tile_rows,
                 persistent ? "walked by persistent CTAs" : "four or two per CTA", c.bn, c.qbuf, c.qbuf == 1 ? "" : "s", splits,
                 splits == 1 ? "" : "s + merge");
    else
        snprintf(buf, n, "cuda: %smma.sync decode (kernel d %d / d_v %d%s): %d-row tiles, %d key warp%s, %d-key blocks; %d split%s",
                 app, c.d, c.dv, p->kv_dtype != p->dtype ? ", fp8 cache converted in registers" : "", c.tile_rows, c.kw,
                 c.kw == 1 ? "" : "s", c.bn, splits, splits == 1 ? "" : "s + merge");
    return FC_OK;
}

fc_status fc_cuda_launch_fwd(const fc_problem *p, fc_split_ws ws, cudaStream_t stream) {
    return dispatch(p, ws, stream, NULL);
}

#ifdef FC_TRACE
// The forward kernels' trace: the units' tables merged (the last call's stamps are in one of them).
extern "C" void fc_cuda_trace_fwd_copy(unsigned long long (*dst)[4]) {
    static unsigned long long t[FC_TRACE_CTAS][4];
    void (*units[])(unsigned long long (*)[4]) = {fc_trace_copy_d64, fc_trace_copy_d96, fc_trace_copy_d128,
                                                  fc_trace_copy_d192, fc_trace_copy_d256, fc_trace_copy_fp8};
    memset(dst, 0, sizeof t);
    for (auto copy : units) {
        copy(t);
        for (int i = 0; i < FC_TRACE_CTAS; i++)
            for (int k = 0; k < 4; k++)
                if (t[i][k] > dst[i][k]) dst[i][k] = t[i][k];
    }
}
#endif
