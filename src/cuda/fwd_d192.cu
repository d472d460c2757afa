// fwd_d192.cu — the forward kernels of head dims 192 / 192 and 192 / 128, bf16 and fp16: one unit of fwd_launch.cuh.
#include "fwd_launch.cuh"

FC_FWD_UNIT(__nv_bfloat16, 192, 192, __nv_bfloat16);
FC_FWD_UNIT(__half, 192, 192, __half);
FC_FWD_UNIT(__nv_bfloat16, 192, 128, __nv_bfloat16);
FC_FWD_UNIT(__half, 192, 128, __half);
FC_FWD_TRACE_UNIT(d192)
