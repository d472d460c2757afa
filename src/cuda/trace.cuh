// trace.cuh — development timeline probe (built only with -DFC_TRACE): %globaltimer stamps per CTA.
#pragma once
#ifdef FC_TRACE
#define FC_TRACE_CTAS 4096
// One table per translation unit (no relocatable device code): fc_trace[cta][k], ns. fwd_kernel:
// k = 0 start, 1 first key block landed, 2 last block landed, 3 end; merge_kernel: 0 start, 3 end.
static __device__ unsigned long long fc_trace[FC_TRACE_CTAS][4];
// This unit's table, copied to the host.
static inline void fc_trace_copy(unsigned long long (*dst)[4]) {
    cudaDeviceSynchronize();
    cudaMemcpyFromSymbol(dst, fc_trace, sizeof(unsigned long long) * FC_TRACE_CTAS * 4);
}
__device__ __forceinline__ unsigned long long fc_gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define FC_STAMP(k)                                                                           \
    do {                                                                                           \
        unsigned cta_ = blockIdx.x + blockIdx.y * gridDim.x + blockIdx.z * gridDim.x * gridDim.y;  \
        if (threadIdx.x == 0 && cta_ < FC_TRACE_CTAS) fc_trace[cta_][k] = fc_gtimer();                 \
    } while (0)
#else
#define FC_STAMP(k) do { } while (0)
#endif
