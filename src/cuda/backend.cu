// backend.cu — the CUDA backend's entry points: device discovery now; the kernels arrive with issue 3.
#include <cuda_runtime.h>

#include "internal.h"

extern "C" int fc_cuda_built(void) { return 1; }

extern "C" int fc_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no device" error so later calls start clean
        return 0;
    }
    return n;
}

static fc_status not_yet(const char *what) {
    return fc_fail(FC_ERR_UNSUPPORTED, "device", "%s has no CUDA kernel in flashc %s yet (CPU backend only)",
                   what, fc_version());
}

extern "C" fc_status fc_cuda_attn_workspace_size(const fc_problem *p, size_t *bytes) {
    *bytes = 0;
    return not_yet("attention");
}

extern "C" fc_status fc_cuda_attn_fwd(const fc_problem *p, void *ws, size_t ws_bytes, void *stream) {
    return not_yet("attention");
}

extern "C" fc_status fc_cuda_merge(const fc_merge_problem *m, void *stream) {
    return not_yet("fc_merge_states");
}
