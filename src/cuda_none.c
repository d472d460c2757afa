/* cuda_none.c — the CUDA entry points of a build made without nvcc: each says there is no CUDA backend. */
#include "internal.h"

static fc_status no_cuda(void) {
    return fc_fail(FC_ERR_NO_DEVICE, "device", "this flashc was built without CUDA (nvcc not found at build time)");
}

int fc_cuda_built(void) { return 0; }
int fc_cuda_device_count(void) { return 0; }
int fc_cuda_splits(const fc_problem *p) { (void)p; return 1; }
int fc_cuda_capability(void) { return 0; }

fc_status fc_cuda_attn_workspace_size(const fc_problem *p, size_t *bytes, size_t *least) {
    (void)p;
    *bytes = *least = 0;
    return no_cuda();
}
fc_status fc_cuda_attn_fwd(const fc_problem *p, void *ws, size_t ws_bytes, void *stream) {
    (void)p; (void)ws; (void)ws_bytes; (void)stream;
    return no_cuda();
}
fc_status fc_cuda_describe(const fc_problem *p, char *buf, size_t n) {
    (void)p; (void)buf; (void)n;
    return no_cuda();
}
fc_status fc_cuda_merge(const fc_merge_problem *m, void *stream) {
    (void)m; (void)stream;
    return no_cuda();
}
/* fc_check_errors: no kernel ran, nothing was recorded. */
fc_status fc_check_errors(void *stream) {
    (void)stream;
    fc_clear_error();
    return FC_OK;
}
