// fwd_fp8.cu — the forward kernels of fp8 caches (decode at kernel dims 64, 128, 256), bf16 and fp16: one unit of fwd_launch.cuh.
#include "fwd_launch.cuh"

FC_FWD_UNIT(__nv_bfloat16, 64, 64, unsigned char);
FC_FWD_UNIT(__half, 64, 64, unsigned char);
FC_FWD_UNIT(__nv_bfloat16, 128, 128, unsigned char);
FC_FWD_UNIT(__half, 128, 128, unsigned char);
FC_FWD_UNIT(__nv_bfloat16, 256, 256, unsigned char);
FC_FWD_UNIT(__half, 256, 256, unsigned char);
FC_FWD_TRACE_UNIT(fp8)
