// tile.cuh — the tile layer in one include: async copies, mbarriers, swizzle, tensor-core ops, math.
#pragma once
#include "copy.cuh"
#include "math.cuh"
#include "mbarrier.cuh"
#include "mma.cuh"
#include "swizzle.cuh"
