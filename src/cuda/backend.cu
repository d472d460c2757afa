// backend.cu — the CUDA backend's entry points: device discovery, workspace size, append → forward → combine.
#include <cuda_runtime.h>

#include "cuda.cuh"

extern "C" int fc_cuda_built(void) { return 1; }

extern "C" int fc_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no device" error so later calls start clean
        return 0;
    }
    return n;
}

extern "C" fc_status fc_cuda_attn_workspace_size(const fc_problem *p, size_t *bytes) {
    *bytes = 0;
    fc_status st = fc_cuda_fwd_supported(p);
    if (st != FC_OK) return st;
    *bytes = fc_cuda_split_ws_bytes(p, fc_cuda_plan_splits(p));
    return FC_OK;
}

// The run step: no allocation, no synchronisation (capturable in a CUDA graph). api.c has checked the
// workspace against fc_cuda_attn_workspace_size.
extern "C" fc_status fc_cuda_attn_fwd(const fc_problem *p, void *workspace, size_t workspace_bytes, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    fc_status st = fc_cuda_fwd_supported(p);
    if (st != FC_OK) return st;
    if (p->k_new.data && p->s_new > 0 && (st = fc_cuda_append(p, s)) != FC_OK) return st;
    fc_split_ws ws = fc_cuda_split_ws(p, fc_cuda_plan_splits(p), workspace);
    if ((st = fc_cuda_launch_fwd(p, ws, s)) != FC_OK) return st;
    return fc_cuda_combine(p, ws, s); // nothing when ws.splits == 1
}
