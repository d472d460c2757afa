// fwd_d128.cu — the forward kernels of head dim 128, bf16 and fp16: one unit of fwd_launch.cuh.
#include "fwd_launch.cuh"

FC_FWD_UNIT(__nv_bfloat16, 128, 128, __nv_bfloat16);
FC_FWD_UNIT(__half, 128, 128, __half);
FC_FWD_TRACE_UNIT(d128)
