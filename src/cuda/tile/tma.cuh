// tma.cuh — tensor copies (TMA): a box of a global tensor, described by a CUtensorMap, into shared memory.
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
