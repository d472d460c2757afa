// fwd_fp8q.cu — the FP8 attention kernels (q, k, v e4m3; out bf16 or fp16): one unit of fwd_launch.cuh.
#include "fwd_launch.cuh"

FC_FP8Q_UNIT(__nv_bfloat16, 64);
FC_FP8Q_UNIT(__half, 64);
FC_FP8Q_UNIT(__nv_bfloat16, 128);
FC_FP8Q_UNIT(__half, 128);
FC_FP8Q_UNIT(__nv_bfloat16, 256);
FC_FP8Q_UNIT(__half, 256);
