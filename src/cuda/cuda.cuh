// cuda.cuh — the CUDA backend's internal interface: error checks, launchers, the split-KV workspace.
#pragma once
#include <cuda_runtime.h>

#include "internal.h"

// Return FC_ERR_CUDA naming the call when a CUDA runtime call fails.
static inline fc_status fc_cuda_status(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return FC_OK;
    return fc_fail(FC_ERR_CUDA, "cuda", "%s: %s", what, cudaGetErrorString(e));
}
#define FC_CUDA_TRY(call) do { fc_status st_ = fc_cuda_status((call), #call); if (st_ != FC_OK) return st_; } while (0)
// After a launch: the launch error (bad config), without synchronising.
#define FC_CUDA_LAUNCHED(name) FC_CUDA_TRY(cudaGetLastError())

// Launch kernel<<<grid, block, smem, stream>>>(args...) with programmatic dependent launch: its CTAs may
// become resident while the previous kernel in the stream finishes; the kernel must call pdl_wait()
// (tile/pdl.cuh) before touching global memory.
template <typename... P, typename... A>
static inline cudaError_t fc_launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                        A &&...args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
#ifdef FC_NO_PDL
    cfg.numAttrs = 0; // A/B builds only
#endif
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<A &&>(args)...);
}

// Split-KV partials in the workspace, fp32, for the global query row g (dense: b*s_q + r; varlen:
// cu_seqlens_q[b] + r) and query head h:
//   part_out[((split * total_q + g) * h_q + h) * d_v + c]     part_lse[(split * total_q + g) * h_q + h]
// part_lse is natural-log; -inf marks an empty split.
// Past the partials, the workspace's rest (tail, tail_bytes) is Stream-K's tail of the unmasked persistent prefill walk
// where it is large enough (fwd_launch.cuh wg_tail_plan): the launch carves it into tail_count (a counter per tail tile
// and consumer warp, zeroed before the launch) and tail_dump (two slots a CTA: each consumer thread's O fragment and
// its rows' m and l).
typedef struct fc_split_ws {
    int splits;
    float *part_out, *part_lse;
    void *tail;
    size_t tail_bytes;
    int *tail_count;
    float *tail_dump;
} fc_split_ws;

// Bytes of workspace for `splits` partials of p (0 when splits == 1), with 256-byte aligned pieces.
size_t fc_cuda_split_ws_bytes(const fc_problem *p, int splits);
// The workspace of bytes at `workspace` laid out: the partials, then the rest for the tail.
fc_split_ws fc_cuda_split_ws(const fc_problem *p, int splits, void *workspace, size_t bytes);
// Bytes of Stream-K's tail for p at one split (fwd.cu; 0 where its walk has none).
size_t fc_cuda_tail_ws_bytes(const fc_problem *p);

// Global query row of row r of sequence b.
FC_HD int64_t fc_global_row(const fc_problem *p, const fc_seqlen *s, int b, int r) {
    return p->cu_seqlens_q ? s->q_row0 + r : (int64_t)b * p->s_q + r;
}

// append.cu: write k_new/v_new (k_new rotated when rotary is set) into the cache at seqused_k[b] + t.
fc_status fc_cuda_append(const fc_problem *p, cudaStream_t stream);

// combine.cu: merge ws.splits partials into p->out (p->dtype) and p->lse (if set).
fc_status fc_cuda_combine(const fc_problem *p, fc_split_ws ws, cudaStream_t stream);

// fwd.cu: the attention kernel (one of fwd_launch.cuh's units); writes p->out/p->lse when ws.splits == 1,
// else the partials.
fc_status fc_cuda_launch_fwd(const fc_problem *p, fc_split_ws ws, cudaStream_t stream);

// FC_OK when a forward kernel exists for p's dtype and head dims, else FC_ERR_UNSUPPORTED naming "v".
fc_status fc_cuda_fwd_supported(const fc_problem *p);

// Number of splits the CUDA backend uses for p (plan.c's heuristic over the SM count).
int fc_cuda_plan_splits(const fc_problem *p);
