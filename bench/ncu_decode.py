# ncu_decode.py — one paged decode shape through flashc and torch SDPA's cuDNN backend, three calls each, for ncu to
# compare the kernels side by side (as ncu_cmp.py does for the prefill). Run on the GPU machine from the repository root:
#   FLASHC_LIB=$PWD/build/libflashc.so ncu --clock-control none --launch-skip 0 --launch-count 40 \
#       --section SpeedOfLight --section LaunchStats --section Occupancy --csv --page details \
#       python3 bench/ncu_decode.py 8 32768 [page] [splits] [fp8]   # b, s_k (32 / 8 heads, d 128, bf16), page 16
# flashc reads the paged cache, cuDNN the same K/V as one dense (b, s_k, h_k, d) tensor seen as (b, h_k, s_k, d).
# fp8: flashc's cache in e4m3 (descales of one value, as compare.py --kv-fp8); cuDNN's stays bf16.
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as C  # noqa: E402  (its inputs and its SDPA call, as compare.py's decode set builds them)

b, s_k = int(sys.argv[1]), int(sys.argv[2])
ps = int(sys.argv[3]) if len(sys.argv) > 3 else 16
splits = int(sys.argv[4]) if len(sys.argv) > 4 else 0
fp8 = len(sys.argv) > 5 and sys.argv[5] == "fp8"
x = C.make_decode_inputs(dict(b=b, s_k=s_k, h_q=32, h_k=8, d=128, page=ps), 1, torch.Generator(device="cuda"))[0]
kc, vc, descales = x["kc"], x["vc"], {}
if fp8:
    one = torch.ones(1, device="cuda", dtype=torch.float32)
    kc, vc, descales = kc.to(torch.float8_e4m3fn), vc.to(torch.float8_e4m3fn), dict(k_descale=one, v_descale=one)
for _ in range(3):
    C.flashc.flash_attn_with_kvcache(x["q"], kc, vc, cache_seqlens=x["seqlens"], block_table=x["table"],
                                     num_splits=splits, **descales)
cudnn = C.sdpa_call(C.SDPBackend.CUDNN_ATTENTION, x["q"], x["kd"], x["vd"], False, "gqa")
for _ in range(3):
    cudnn()
torch.cuda.synchronize()
