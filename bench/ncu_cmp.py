# ncu_cmp.py — one prefill shape through flashc and torch SDPA's cuDNN backend, three calls each, for ncu to compare
# the two kernels side by side (PERF.md step 106). Run on the GPU machine from the repository root, e.g.
#   FLASHC_LIB=$PWD/build/libflashc.so ncu --clock-control none -k regex:'fwd_wgmma|sdpa' --launch-skip 2 \
#       --launch-count 4 --section SpeedOfLight --section LaunchStats --section WarpStateStats --csv --page details \
#       python3 bench/ncu_cmp.py 32 512 32 64 1        # b, s, h, d, causal: flashc's third call, cuDNN's three
# A sixth argument fp8: flashc's FP8 attention (q, k, v e4m3, descales of one value, as compare.py --fp8); cuDNN bf16.
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashc  # noqa: E402

b, s, h, d, causal = [int(x) for x in sys.argv[1:6]]
q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
fq, fk, fv, descales = q, k, v, {}
if len(sys.argv) > 6 and sys.argv[6] == "fp8":
    one = torch.ones(1, device="cuda", dtype=torch.float32)
    fq, fk, fv = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
    descales = dict(q_descale=one, k_descale=one, v_descale=one)
for _ in range(3):
    flashc.flash_attn_func(fq, fk, fv, causal=bool(causal), **descales)
qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal))
torch.cuda.synchronize()
