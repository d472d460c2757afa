// tma.cuh — tensor copies (TMA): a box of a global tensor, described by a CUtensorMap, into or out of shared memory.
#pragma once
#include <cuda.h>

#include "copy.cuh"

// Copy the box of `map` at coordinates (c0, c1, c2, c3), fastest dimension first, to dst (laid out and
// swizzled as the map says; dst 1024-byte aligned for the 128-byte swizzle); the bytes are counted on
// mbarrier bar as transactions (mbar_arrive_expect_tx). Out-of-bounds elements arrive as zeros.
__device__ __forceinline__ void tma_load_4d(void *dst, const CUtensorMap *map, int c0, int c1, int c2, int c3,
                                            uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(
                     smem_u32(dst)),
                 "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(bar))
                 : "memory");
}

// Copy a box from src (laid out as tma_load_4d's dst) to `map` at (c0, c1, c2, c3); elements past the
// tensor's end are not written, but a box may not start at a negative coordinate (a load's may: those come as
// zeros): the store faults, illegal instruction (PERF.md step 175). Asynchronous: tma_store_commit closes this
// thread's group of stores, and tma_store_wait_read waits until their shared memory has been read (it may be written
// again).
// The threads that wrote src fence it first (fence_proxy_async): the copy reads through the async proxy.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap *map, const void *src, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(map),
                 "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
