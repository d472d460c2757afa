// fwd_d256.cu — the forward kernels of head dim 256, bf16 and fp16: one unit of fwd_launch.cuh.
#include "fwd_launch.cuh"

FC_FWD_UNIT(__nv_bfloat16, 256, 256, __nv_bfloat16);
FC_FWD_UNIT(__half, 256, 256, __half);
FC_FWD_TRACE_UNIT(d256)
