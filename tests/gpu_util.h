/* gpu_util.h — the GPU tests' CUDA runtime helpers: stop on a harness failure, see whether a device is there. */
#ifndef FLASHC_GPU_UTIL_H
#define FLASHC_GPU_UTIL_H

#include <cuda_runtime_api.h>

#include "testutil.h"

/* A CUDA runtime failure in the harness itself: counted as failed, then exit (nothing sensible can follow). */
static inline void cuda_die(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return;
    printf("  FAIL: %s: %s\n", what, cudaGetErrorString(e));
    tu_failed++;
    tu_finish();
    exit(1);
}

/* 1 if the CUDA runtime sees a device. */
static inline int cuda_device_present(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#endif /* FLASHC_GPU_UTIL_H */
