// swizzle.cuh — XOR-swizzled shared-memory tiles of rows made of 16-byte chunks (conflict-free ldmatrix).
#pragma once
#include <stdint.h>

// A tile of `rows` rows, each `chunks` 16-byte chunks (chunks a multiple of 8). Chunk c of row r is
// stored at chunk (c ^ (r % 8)) within its 128-byte group, so 8 consecutive rows read at the same
// logical chunk hit 8 different bank groups. Offsets are in bytes from the tile's base.
__device__ __forceinline__ uint32_t swz_offset(int row, int chunk, int chunks) {
    return (uint32_t)(row * chunks + (chunk ^ (row & 7))) * 16u;
}

// Byte offset of element `col` (a multiple of 8 for 16-bit types) of row `row`, for 2-byte elements.
__device__ __forceinline__ uint32_t swz_offset_b16(int row, int col, int chunks) {
    return swz_offset(row, col >> 3, chunks);
}
