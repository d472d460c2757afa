// fwd_d96.cu — the forward kernels of head dim 96, bf16 and fp16: one unit of fwd_launch.cuh.
#include "fwd_launch.cuh"

FC_FWD_UNIT(__nv_bfloat16, 96, 96, __nv_bfloat16);
FC_FWD_UNIT(__half, 96, 96, __half);
FC_FWD_TRACE_UNIT(d96)
