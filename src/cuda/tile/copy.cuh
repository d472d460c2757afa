// copy.cuh — asynchronous global→shared copies (cp.async, 16 bytes, zero-fill) and their fences; shared loads/stores
// at 32-bit addresses (4 bytes; ldmatrix / stmatrix).
#pragma once
#include <stdint.h>

// Shared-memory address as the 32-bit value PTX wants.
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 4 bytes from / to shared memory at a 32-bit address (one register an address, where a pointer takes two).
__device__ __forceinline__ uint32_t lds_u32(uint32_t a) {
    uint32_t x;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(x) : "r"(a) : "memory");
    return x;
}
__device__ __forceinline__ void sts_u32(uint32_t a, uint32_t x) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(x) : "memory");
}

// Four 8x8 matrices of 16-bit units at 32-bit shared addresses, lane l giving row l % 8 of matrix l / 8;
// ldsm_x4_trans: lane l gets in r[i] rows 2(l % 4) (low half) and 2(l % 4) + 1 of column l / 4 of matrix i;
// stsm_x4: lane l's r[i] goes to row l / 4, columns 2(l % 4) (low half) and 2(l % 4) + 1 of matrix i.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t a, uint32_t r[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}
__device__ __forceinline__ void stsm_x4(uint32_t a, const uint32_t r[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(a), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3])
                 : "memory");
}

// Copy 16 bytes from global src to shared dst; when !valid, write 16 zero bytes and read nothing.
// Bypasses L1 (.cg): K/V tiles are streamed once per CTA.
__device__ __forceinline__ void cp_async_16(void *dst, const void *src, bool valid) {
    int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
}

// Bring the 128-byte line holding global address p into L2 (a hint: nothing waits for it).
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// Close the group of cp.async issued so far by this thread.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most N groups of this thread are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Bulk copy (the TMA engine, no tensor map): `bytes` (a multiple of 16; both addresses 16-byte aligned)
// from global src to shared dst; completion is counted on the mbarrier `bar` as transaction bytes.
__device__ __forceinline__ void bulk_copy_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

// Order this thread's earlier generic shared-memory accesses before its later async-proxy ones (bulk
// copies into a buffer that plain stores or loads touched before).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
