# ncu_cmp.py — one prefill shape through flashc and torch SDPA's cuDNN backend, three calls each, for ncu to compare
# the two kernels side by side (PERF.md step 106). Run on the GPU machine from the repository root, e.g.
#   FLASHC_LIB=$PWD/build/libflashc.so ncu --clock-control none -k regex:'fwd_wgmma|sdpa' --launch-skip 2 \
#       --launch-count 4 --section SpeedOfLight --section LaunchStats --section WarpStateStats --csv --page details \
#       python3 bench/ncu_cmp.py 32 512 32 64 1        # b, s, h, d, causal: flashc's third call, cuDNN's three
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashc  # noqa: E402

b, s, h, d, causal = [int(x) for x in sys.argv[1:6]]
q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for _ in range(3):
    flashc.flash_attn_func(q, k, v, causal=bool(causal))
qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal))
torch.cuda.synchronize()
