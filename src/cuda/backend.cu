// backend.cu — the CUDA backend's entry points: device discovery, workspace size, append → forward → combine.
#include <cuda_runtime.h>
#include <string.h>

#include "seqlen.cuh"

// The error record of each device the process uses (seqlen.cuh): a module variable, so its address is
// fixed for the life of the context and a captured graph keeps writing the same record.
__device__ fc_dev_err g_dev_err;

extern "C" int fc_cuda_built(void) { return 1; }

extern "C" int fc_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no device" error so later calls start clean
        return 0;
    }
    return n;
}

extern "C" int fc_cuda_splits(const fc_problem *p) { return fc_cuda_plan_splits(p); }

// Compute capability of the current device as 10 major + minor (90: H100 / H200), 0 when there is none;
// looked up once per device.
extern "C" int fc_cuda_capability(void) {
    static int cc[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    int c = dev < 64 ? __atomic_load_n(&cc[dev], __ATOMIC_ACQUIRE) : 0;
    if (!c) {
        int major = 0, minor = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        c = 10 * major + minor;
        if (dev < 64) __atomic_store_n(&cc[dev], c, __ATOMIC_RELEASE);
    }
    return c;
}

extern "C" fc_status fc_cuda_attn_workspace_size(const fc_problem *p, size_t *bytes, size_t *least) {
    *bytes = *least = 0;
    fc_status st = fc_cuda_fwd_supported(p);
    if (st != FC_OK) return st;
    int splits = fc_cuda_plan_splits(p);
    *bytes = *least = fc_cuda_split_ws_bytes(p, splits);
    if (*bytes != SIZE_MAX && splits == 1) *bytes += fc_cuda_tail_ws_bytes(p);
    if (*bytes == SIZE_MAX)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "q", "the split-KV workspace for %lld rows x %d heads does not fit a size_t",
                       (long long)p->total_q, p->h_q);
    return FC_OK;
}

// The current device's error record, looked up once per device.
static fc_status dev_err_of_device(void **rec) {
    static void *addr[64];
    int dev = 0;
    FC_CUDA_TRY(cudaGetDevice(&dev));
    void *a = dev < 64 ? __atomic_load_n(&addr[dev], __ATOMIC_ACQUIRE) : NULL;
    if (!a) {
        FC_CUDA_TRY(cudaGetSymbolAddress(&a, g_dev_err));
        if (dev < 64) __atomic_store_n(&addr[dev], a, __ATOMIC_RELEASE);
    }
    *rec = a;
    return FC_OK;
}

// The run step: no allocation, no synchronisation (capturable in a CUDA graph). api.c has checked the
// workspace against fc_cuda_attn_workspace_size.
extern "C" fc_status fc_cuda_attn_fwd(const fc_problem *problem, void *workspace, size_t workspace_bytes, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    fc_status st = fc_cuda_fwd_supported(problem);
    if (st != FC_OK) return st;
    fc_problem pd = *problem, *p = &pd; // with the device's error record
    if ((st = dev_err_of_device(&pd.dev_err)) != FC_OK) return st;
    if (p->k_new.data && p->s_new > 0 && (st = fc_cuda_append(p, s)) != FC_OK) return st;
    fc_split_ws ws = fc_cuda_split_ws(p, fc_cuda_plan_splits(p), workspace, workspace_bytes);
    if ((st = fc_cuda_launch_fwd(p, ws, s)) != FC_OK) return st;
    return fc_cuda_combine(p, ws, s); // nothing when ws.splits == 1
}

// The message of a device error record, in the words the CPU path's checks use (api.c).
static fc_status fail_recorded(const fc_dev_err *e) {
    const char *cu = e->code == FC_DERR_CU_Q ? "cu_seqlens_q" : "cu_seqlens_k";
    switch (e->code) {
    case FC_DERR_CU_Q: case FC_DERR_CU_K:
        if (e->i == 0) return fc_fail(FC_ERR_INVALID_ARGUMENT, cu, "[0] = %lld, must be 0", e->value);
        if (e->value < 0) return fc_fail(FC_ERR_INVALID_ARGUMENT, cu, "[%d] = %lld is negative", e->i, e->value);
        if (e->value < e->extra)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, cu, "decreases at [%d] (%lld < %lld)", e->i, e->value, e->extra);
        return fc_fail(FC_ERR_INVALID_ARGUMENT, cu, "[%d] = %lld exceeds the %lld rows of the tensor", e->i, e->value, e->limit);
    case FC_DERR_MAX_Q: case FC_DERR_MAX_K:
        return fc_fail(FC_ERR_INVALID_ARGUMENT, e->code == FC_DERR_MAX_Q ? "max_seqlen_q" : "max_seqlen_k",
                       "= %lld, but sequence %d has %lld", e->limit, e->b, e->value);
    case FC_DERR_SEQUSED:
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "seqused_k", "[%d] = %lld is negative", e->b, e->value);
    case FC_DERR_CAPACITY: return fc_fail_capacity((fc_kv_layout)e->layout, e->b, e->value, e->extra, e->limit, e->i);
    case FC_DERR_PAGE:
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "page_table", "[%d][%d] = %lld is not a page in [0, %lld)", e->b, e->i,
                       e->value, e->limit);
    case FC_DERR_ROTARY:
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "rotary_cos", "has %lld positions, sequence %d needs position %lld", e->limit,
                       e->b, e->value);
    case FC_DERR_BATCH_IDX:
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "kv_batch_idx", "[%d] = %lld is not a row of the cache [0, %lld)", e->b,
                       e->value, e->limit);
    case FC_DERR_SEQUSED_Q:
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "seqused_q", "[%d] = %lld is outside [0, %lld] (the sequence's query "
                       "rows)", e->b, e->value, e->limit);
    case FC_DERR_LEFTPAD:
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "kv_leftpad", "[%d] = %lld is outside [0, %lld] (the sequence's keys "
                       "counted from row 0)", e->b, e->value, e->limit);
    }
    return fc_fail(FC_ERR_INTERNAL, "device", "unknown device error record %d", e->code);
}

extern "C" fc_status fc_check_errors(void *stream) {
    if (fc_cuda_device_count() == 0) {
        fc_clear_error();
        return FC_OK; // no kernel can have run
    }
    FC_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    fc_dev_err e, none;
    memset(&none, 0, sizeof none);
    FC_CUDA_TRY(cudaMemcpyFromSymbol(&e, g_dev_err, sizeof e));
    if (e.code == FC_DERR_NONE) {
        fc_clear_error();
        return FC_OK;
    }
    FC_CUDA_TRY(cudaMemcpyToSymbol(g_dev_err, &none, sizeof none));
    return fail_recorded(&e);
}
