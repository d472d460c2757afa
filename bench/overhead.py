#!/usr/bin/env python3
"""overhead.py — CPU time per call of the Python paths against the bare C call, on a tiny decode step.

For each Python call, the bare C call of the same arguments (fc_attn_fwd on a prebuilt fc_attn_args,
through ctypes: the floor of any Python path) is timed next to it. Prints the time per call (median of
repeats; thread CPU time on the CPU, wall time on CUDA where the kernel runs asynchronously) and the
cost above the bare C call. Issue 12's targets: a plan's run at most 8 us above, the flash_attn-style
functions at most 15 us. Usage:

    python3 bench/overhead.py [--device cpu|cuda] [--numpy] [--n 20000]

Shape (the issue's): b 1, s_q 1, s_k 16 (cache 16, paged 16 per page for the paged rows), h 1, d 64, bf16.
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
import flashc  # noqa: E402
from flashc import _arrays as A  # noqa: E402

_lib = sys.modules["flashc._lib"]  # (flashc._lib the attribute is the loader function)


def timed(fn, n, repeats, clock):
    """Median seconds per call of fn over repeats runs of n calls."""
    fn()
    per = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(n):
            fn()
        per.append((clock() - t0) / n)
    return statistics.median(per)


def bare_c(fn, args, kw):
    """fc_attn_fwd on the prebuilt fc_attn_args of fn(*args, **kw) (a plan's): the floor of any Python path."""
    p = flashc.plan(fn, *args, **kw)
    fwd, ref, stream, ws, n = _lib.lib().fc_attn_fwd, p._ref, None, None, p._ws_bytes
    if p._cuda:
        import torch
        stream = torch.cuda.current_stream().cuda_stream
        ws = torch.empty(n, dtype=torch.uint8, device="cuda") if n else None
    wsp = None if ws is None else ws.data_ptr()
    out = p._new_out()  # the plan keeps no output: point the struct at one held here
    p._views[-2].data = out.data_ptr() if hasattr(out, "data_ptr") else out.ctypes.data

    def call():
        fwd(ref, wsp, n, stream)
    call.keep = (p, out, ws)
    return call


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--numpy", action="store_true", help="numpy arrays instead of torch tensors (CPU)")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    o = ap.parse_args()
    flashc.set_num_threads(1)
    b, s_q, s_k, h, d = 1, 1, 16, 1, 64
    if o.numpy:
        import numpy as np
        import ml_dtypes
        dt = ml_dtypes.bfloat16
        rng = np.random.default_rng(0)
        mk = lambda *s: rng.standard_normal(s).astype(dt)  # noqa: E731
        q, kc, vc, kn, vn = mk(b, s_q, h, d), mk(b, s_k + 1, h, d), mk(b, s_k + 1, h, d), mk(b, 1, h, d), mk(b, 1, h, d)
        lens = np.full((b,), s_k, np.int32)
        out = np.empty((b, s_q, h, d), dt)
        sync = None
        lib = "numpy"
    else:
        import torch
        dev = torch.device(o.device)
        mk = lambda *s: torch.randn(*s, device=dev, dtype=torch.bfloat16)  # noqa: E731
        q, kc, vc, kn, vn = mk(b, s_q, h, d), mk(b, s_k + 1, h, d), mk(b, s_k + 1, h, d), mk(b, 1, h, d), mk(b, 1, h, d)
        lens = torch.full((b,), s_k, dtype=torch.int32, device=dev)
        out = torch.empty(b, s_q, h, d, device=dev, dtype=torch.bfloat16)
        sync = torch.cuda.synchronize if dev.type == "cuda" else None
        lib = "torch " + torch.__version__
    clock = time.thread_time if sync is None else time.perf_counter
    kv = flashc.flash_attn_with_kvcache
    rows = [  # (name, python call, fn, args, kwargs of the same C call)
        ("plan.run(q, k_cache, v_cache)", None, kv, (q, kc, vc), dict(cache_seqlens=lens)),
        ("plan.run(q, k_cache, v_cache, out=out)", None, kv, (q, kc, vc), dict(cache_seqlens=lens)),
        ("flash_attn_with_kvcache(q, kc, vc, cache_seqlens=t)", lambda: kv(q, kc, vc, cache_seqlens=lens),
         kv, (q, kc, vc), dict(cache_seqlens=lens)),
        ("flash_attn_with_kvcache(q, kc, vc, cache_seqlens=16)", lambda: kv(q, kc, vc, cache_seqlens=s_k),
         kv, (q, kc, vc), dict(cache_seqlens=lens)),
        ("flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=t)", lambda: kv(q, kc, vc, kn, vn, cache_seqlens=lens),
         kv, (q, kc, vc, kn, vn), dict(cache_seqlens=lens)),
        ("flash_attn_func(q, k, v)", lambda: flashc.flash_attn_func(q, kc, vc), flashc.flash_attn_func, (q, kc, vc), {}),
    ]
    p = flashc.plan(kv, q, kc, vc, cache_seqlens=lens)
    rows[0] = rows[0][:1] + (lambda: p.run(q, kc, vc),) + rows[0][2:]
    rows[1] = rows[1][:1] + (lambda: p.run(q, kc, vc, out=out),) + rows[1][2:]
    print("overhead: %s, %s, b %d s_q %d s_k %d h %d d %d bf16, %s per call" %
          (o.device, lib, b, s_q, s_k, h, d, "thread CPU time" if sync is None else "wall time (async launches)"))
    print("  %-58s %8s %8s %8s" % ("python call", "python", "C call", "above C"))
    for name, fn, cfn, args, kw in rows:
        c = timed(bare_c(cfn, args, kw), o.n, o.repeats, clock)
        t = timed(fn, o.n, o.repeats, clock)
        if sync is not None:
            sync()
        print("  %-58s %6.2f us %6.2f us %+6.2f us" % (name, t * 1e6, c * 1e6, (t - c) * 1e6))


if __name__ == "__main__":
    main()
