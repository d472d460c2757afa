# ncu_decode.py — one paged decode shape through flashc and torch SDPA's cuDNN backend, three calls each, for ncu to
# compare the kernels side by side (as ncu_cmp.py does for the prefill). Run on the GPU machine from the repository root:
#   FLASHC_LIB=$PWD/build/libflashc.so ncu --clock-control none --launch-skip 0 --launch-count 40 \
#       --section SpeedOfLight --section LaunchStats --section Occupancy --csv --page details \
#       python3 bench/ncu_decode.py 8 32768 [page] [splits]   # b, s_k (32 / 8 heads, d 128, bf16), page 16
# flashc reads the paged cache, cuDNN the same K/V as one dense (b, s_k, h_k, d) tensor seen as (b, h_k, s_k, d).
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as C  # noqa: E402  (its inputs and its SDPA call, as compare.py's decode set builds them)

b, s_k = int(sys.argv[1]), int(sys.argv[2])
ps = int(sys.argv[3]) if len(sys.argv) > 3 else 16
splits = int(sys.argv[4]) if len(sys.argv) > 4 else 0
x = C.make_decode_inputs(dict(b=b, s_k=s_k, h_q=32, h_k=8, d=128, page=ps), 1, torch.Generator(device="cuda"))[0]
for _ in range(3):
    C.flashc.flash_attn_with_kvcache(x["q"], x["kc"], x["vc"], cache_seqlens=x["seqlens"], block_table=x["table"],
                                     num_splits=splits)
cudnn = C.sdpa_call(C.SDPBackend.CUDNN_ATTENTION, x["q"], x["kd"], x["vd"], False, "gqa")
for _ in range(3):
    cudnn()
torch.cuda.synchronize()
