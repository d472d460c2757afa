// tile.cuh — the tile layer in one include: async copies, mbarriers, swizzle, tensor-core ops (mma.sync, wgmma, FP8 operands), math.
#pragma once
#include "copy.cuh"
#include "math.cuh"
#include "mbarrier.cuh"
#include "mma.cuh"
#include "swizzle.cuh"
#include "wgmma.cuh"
#include "fp8.cuh"
#include "pdl.cuh"
#include "tma.cuh"
