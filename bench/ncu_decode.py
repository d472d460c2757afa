# ncu_decode.py — one paged decode shape through flashc and torch SDPA's cuDNN backend, three calls each, for ncu to
# compare the kernels side by side (as ncu_cmp.py does for the prefill). Run on the GPU machine from the repository root:
#   FLASHC_LIB=$PWD/build/libflashc.so ncu --clock-control none --launch-skip 0 --launch-count 40 \
#       --section SpeedOfLight --section LaunchStats --section Occupancy --csv --page details \
#       python3 bench/ncu_decode.py 8 32768 [page] [splits]   # b, s_k (32 / 8 heads, d 128, bf16), page 16
# flashc reads the paged cache, cuDNN the same K/V as one dense (b, s_k, h_k, d) tensor seen as (b, h_k, s_k, d).
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashc  # noqa: E402

b, s_k = int(sys.argv[1]), int(sys.argv[2])
ps = int(sys.argv[3]) if len(sys.argv) > 3 else 16
splits = int(sys.argv[4]) if len(sys.argv) > 4 else 0
h_q, h_k, d = 32, 8, 128
pps = (s_k + ps - 1) // ps
q = torch.randn(b, 1, h_q, d, device="cuda", dtype=torch.bfloat16)
kc, vc = (torch.randn(b * pps, ps, h_k, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
table = torch.randperm(b * pps, device="cuda").to(torch.int32).view(b, pps)
seqlens = torch.full((b,), s_k, device="cuda", dtype=torch.int32)
kd, vd = (x[table.long()].reshape(b, pps * ps, h_k, d)[:, :s_k].contiguous() for x in (kc, vc))
for _ in range(3):
    flashc.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table, num_splits=splits)
qt, kt, vt = (x.transpose(1, 2) for x in (q, kd, vd))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
torch.cuda.synchronize()
