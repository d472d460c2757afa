"""compare.py — times flashc against torch SDPA (cuDNN and flash backends) on one Hopper GPU, in one process.

usage: python3 bench/compare.py [--set decode|prefill|all|table] [--json PATH] [--png PATH] [--eager]
                                [--samples N] [--warmup N] [--only SUBSTRING] [--fresh] [--flashc-only] [--kv-fp8] [--fp8]
                                [--kv-dense]

Shapes are the performance targets of docs/PERF.md: paged decode (page 16; batch 1, 8, 32, 128 x context
1k, 8k, 32k; page 1 and 256 at batch 8 x 32k; 32 query heads over 8 KV heads, d 128, bf16) and prefill
(d 128, h 16, 16k tokens at seqlen 2k .. 16k, causal and not). flashc runs paged decode through
flash_attn_with_kvcache; torch has no paged attention, so its SDPA gets the same logical K/V as one
contiguous (b, h_k, s_k, d) tensor per input with enable_gqa=True (expanded to h_q heads where a
backend refuses GQA; the table says which) — its best case. --kv-dense: flashc reads that same dense K/V
(no page table), so both read the same bytes in the same layout (issue 12's restated eager target).

Method: CUDA events around one pass over enough input sets that K/V exceed 4x the L2, divided by the
sets, with the GPU kept busy (a short sleep kernel) while the pass is launched, so host launch latency
stays out of the timed window; warm-up, median of many samples; by default each pass is a captured CUDA graph (kernel time, as
a serving engine runs decode), --eager times plain calls (launch overhead included). The streaming-read
ceiling is measured in the same run (a large tensor's .sum(): bytes read / time; a copy is shown too)
and decode GB/s (K+V bytes read once) is reported as a percentage of it. A backend that cannot run a
shape (or flashc without CUDA kernels: FlashcError) shows n/a.

--fresh runs each shape in its own child process (the parent measures the ceiling and prints the one
table). Measured on an H100: after the set's earlier shapes have allocated and freed tens of GB, some
shapes read slower than in a fresh process, flashc's paged reads and torch's dense ones alike (paged
b128 x 1k 221 vs 187 us; the page-256 anchors 419 vs 355 us), so figures depended on the shapes run
before them. A serving engine allocates its KV pool once, as a fresh process does.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

try:
    import flashc
    from flashc import FlashcError
except Exception as e:  # the binding itself is missing: flashc columns are n/a
    class FlashcError(Exception):
        pass
    flashc = None
    FLASHC_IMPORT_ERROR = str(e)
else:
    FLASHC_IMPORT_ERROR = None

DT = torch.bfloat16


# ------------------------------------------------------------------------------------------------
# Shapes

def decode_shapes():
    """(name, kind, params): paged decode targets."""
    out = []
    for b in (1, 8, 32, 128):
        for ctx in (1024, 8192, 32768):
            out.append(("decode-p16-b%d-%dk" % (b, ctx // 1024), "decode",
                        dict(b=b, s_k=ctx, h_q=32, h_k=8, d=128, page=16)))
    for page in (1, 256):
        out.append(("decode-p%d-b8-32k" % page, "decode", dict(b=8, s_k=32768, h_q=32, h_k=8, d=128, page=page)))
    return out


def prefill_shapes():
    out = []
    for s in (2048, 4096, 8192, 16384):
        for causal in (False, True):
            out.append(("prefill-16k-s%dk%s" % (s // 1024, "-causal" if causal else ""), "prefill",
                        dict(b=16384 // s, s=s, h=16, d=128, causal=causal)))
    return out


def table_shapes():
    """The prefill table of every head dim flashc has a kernel for: 16k tokens per batch, heads = 2048 // d,
    seqlen 512 .. 16k, causal and not; d 192 / d_v 128 as DeepSeek's prefill. Named prefill-d<d>[v<d_v>]-s<len>."""
    out = []
    for d, dv in ((64, 64), (96, 96), (128, 128), (192, 192), (256, 256), (192, 128)):
        for s in (512, 1024, 2048, 4096, 8192, 16384):
            for causal in (False, True):
                name = "prefill-d%d%s-s%s%s" % (d, "" if dv == d else "v%d" % dv,
                                                "%dk" % (s // 1024) if s >= 1024 else str(s), "-causal" if causal else "")
                out.append((name, "prefill", dict(b=16384 // s, s=s, h=2048 // d, d=d, d_v=dv, causal=causal)))
    return out


def visible_pairs(s_q, s_k, causal):
    if not causal:
        return s_q * s_k
    off = s_k - s_q
    return sum(max(0, min(s_k, i + off + 1)) for i in range(s_q))


# ------------------------------------------------------------------------------------------------
# Timing

def capture_graph(run):
    """A CUDA graph of run() (after a warm-up on a side stream), or raises."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    return g


def timed_fn(calls, use_graph):
    """(fn, mode): one pass over calls (one per input set) as a CUDA graph replay where capture works, else eager."""
    def run():
        for c in calls:
            c()

    if use_graph:
        try:
            return capture_graph(run).replay, "graph"
        except Exception:
            torch.cuda.synchronize()
    return run, "eager"


def time_passes(call_lists, samples, warmup, use_graph):
    """Median ms of one call for each list of calls: events around one pass over a list, / its length. The lists take
    turns sample by sample (the order rotated each sample), so that all of them see the same clock and power state
    (a long cell at the power cap reads two-valued over seconds: PERF.md step 204). Returns [(ms, mode)]."""
    fns = [timed_fn(calls, use_graph) for calls in call_lists]
    for fn, _ in fns:
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = [[] for _ in fns]
    for i in range(samples):
        for j in range(len(fns)):
            k = (i + j) % len(fns)
            torch.cuda._sleep(200_000)  # ~0.1 ms of GPU busy-wait: the launch below is queued before e0 runs,
            e0.record()                 # so the CPU's launch latency stays out of the timed window
            fns[k][0]()
            e1.record()
            e1.synchronize()
            times[k].append(e0.elapsed_time(e1) / len(call_lists[k]))
    return [(statistics.median(t), fn[1]) for t, fn in zip(times, fns)]


def time_pass(calls, samples, warmup, use_graph):
    """Median ms of one call over one list of calls (time_passes): (ms, mode) with mode 'graph' or 'eager'."""
    return time_passes([calls], samples, warmup, use_graph)[0]


def read_ceiling(gib=4.0):
    """Streaming-read rate of this GPU (GB/s): the best of a few reductions over a large tensor (bytes
    read / time; each alone can fall short of the memory's rate); and a copy's read+write rate."""
    n = int(gib * 2**30 / 2)
    x = torch.randn(n, device="cuda", dtype=DT)
    y = torch.empty_like(x)
    probes = {"bf16 sum": lambda: x.sum(), "fp32-view sum": lambda: x.view(torch.float32).sum(),
              "int32-view max": lambda: x.view(torch.int32).max()}
    reads = {}
    for name, fn in probes.items():
        ms, _ = time_pass([fn], 20, 3, False)
        reads[name] = n * 2 / (ms * 1e-3) / 1e9
    copy_ms, _ = time_pass([lambda: y.copy_(x)], 20, 3, False)
    return max(reads.values()), reads, 2 * n * 2 / (copy_ms * 1e-3) / 1e9


def fp8_gemm_ceiling(n=8192):
    """TFLOP/s of torch._scaled_mm on e4m3 n x n x n (bf16 out, scales of one): the FP8 tensor-core ceiling that
    issue 13's FP8 prefill figures are read against; None where this torch has no _scaled_mm."""
    try:
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        one = torch.ones((), device="cuda")
        ms, _ = time_pass([lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)],
                          20, 3, False)
        return 2.0 * n ** 3 / (ms * 1e-3) / 1e12
    except Exception as e:  # noqa: BLE001 (printed: the figure is a reference, not a result)
        print("fp8 GEMM ceiling: n/a (%s)" % e)
        return None


def num_sets(bytes_per_set, l2):
    return max(1, min(256, math.ceil(4 * l2 / max(bytes_per_set, 1))))


# ------------------------------------------------------------------------------------------------
# Implementations: each returns a zero-arg callable for one input set (or raises)

def sdpa_call(backend, q, k, v, causal, gqa):
    """torch SDPA on (b, s, h, d) tensors (passed as (b, h, s, d) views) with one backend."""
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if gqa == "expand":
        rep = qt.shape[1] // kt.shape[1]
        kt, vt = kt.repeat_interleave(rep, dim=1), vt.repeat_interleave(rep, dim=1)
    kw = {"enable_gqa": True} if gqa == "gqa" and qt.shape[1] != kt.shape[1] else {}

    def call():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, **kw)
    return call


def first_working(make_calls, modes):
    """The first mode whose calls run: (calls, mode, first output); raises the last error otherwise."""
    err = None
    for mode in modes:
        try:
            calls = make_calls(mode)
            out = calls[0]()
            torch.cuda.synchronize()
            return calls, mode, out
        except Exception as e:  # a backend refusing the shape
            err = e
            torch.cuda.synchronize()
    raise err


# ------------------------------------------------------------------------------------------------
# One shape

def make_decode_inputs(p, n, gen):
    """n sets of (q, paged k/v, page table, seqlens, dense k/v) with the same logical K/V per set."""
    b, s_k, h_q, h_k, d, ps = p["b"], p["s_k"], p["h_q"], p["h_k"], p["d"], p["page"]
    pps = (s_k + ps - 1) // ps
    sets = []
    for _ in range(n):
        q = torch.randn(b, 1, h_q, d, device="cuda", dtype=DT, generator=gen)
        kc = torch.randn(b * pps, ps, h_k, d, device="cuda", dtype=DT, generator=gen)
        vc = torch.randn(b * pps, ps, h_k, d, device="cuda", dtype=DT, generator=gen)
        table = torch.randperm(b * pps, device="cuda", generator=gen).to(torch.int32).view(b, pps)
        seqlens = torch.full((b,), s_k, device="cuda", dtype=torch.int32)
        kd = kc[table.long()].reshape(b, pps * ps, h_k, d)[:, :s_k].contiguous()
        vd = vc[table.long()].reshape(b, pps * ps, h_k, d)[:, :s_k].contiguous()
        sets.append(dict(q=q, kc=kc, vc=vc, table=table, seqlens=seqlens, kd=kd, vd=vd))
    return sets


def run_decode(name, p, args, l2, gen):
    b, s_k, h_k, d = p["b"], p["s_k"], p["h_k"], p["d"]
    kv_bytes = 2 * b * s_k * h_k * d * 2
    n = num_sets(kv_bytes, l2)
    sets = make_decode_inputs(p, n, gen)
    layout = "dense (the K/V torch reads)" if args.kv_dense else "paged (page %d)" % p["page"]
    for s in sets:  # what flashc reads: the paged cache, or (--kv-dense) the dense K/V torch reads, no page table
        s["kf"], s["vf"], s["tf"] = (s["kd"], s["vd"], None) if args.kv_dense else (s["kc"], s["vc"], s["table"])
    row = dict(name=name, kind="decode", params=p, sets=n, kv_bytes=kv_bytes,
               note="flashc %s; torch dense contiguous K/V" % layout)
    fp8 = {}
    if args.kv_fp8:  # flashc reads the cache in e4m3 (half the bytes; descales of one value, as vLLM passes them)
        for s in sets:
            s["kf"], s["vf"] = s["kf"].to(torch.float8_e4m3fn), s["vf"].to(torch.float8_e4m3fn)
        one = torch.ones(1, device="cuda", dtype=torch.float32)
        fp8 = dict(k_descale=one, v_descale=one)
        row["flashc_kv_bytes"] = kv_bytes // 2
        row["note"] = "flashc %s, e4m3; torch dense contiguous bf16 K/V" % layout

    def flashc_calls(_mode):
        return [lambda s=s: flashc.flash_attn_with_kvcache(s["q"], s["kf"], s["vf"], cache_seqlens=s["seqlens"],
                                                           block_table=s["tf"], **fp8) for s in sets]

    def torch_calls(backend):
        return lambda mode: [sdpa_call(backend, s["q"], s["kd"], s["vd"], False, mode) for s in sets]

    measure(row, args, flashc_calls, torch_calls, ["gqa", "expand"])
    for key in ("flashc", "cudnn", "flash"):
        ms = row[key]["ms"]
        row[key]["gbps"] = row.get("%s_kv_bytes" % key, kv_bytes) / (ms * 1e-3) / 1e9 if ms else None
    return row


def run_prefill(name, p, args, l2, gen):
    b, s, h, d, causal = p["b"], p["s"], p["h"], p["d"], p["causal"]
    dv = p.get("d_v", d)
    per_set = (2 * d + dv) * b * s * h * 2
    n = num_sets(per_set, l2)
    sets = [[torch.randn(b, s, h, x, device="cuda", dtype=DT, generator=gen) for x in (d, d, dv)] for _ in range(n)]
    flops = 2.0 * visible_pairs(s, s, causal) * (d + dv) * h * b
    row = dict(name=name, kind="prefill", params=p, sets=n, flops=flops, note="")
    fp8, fsets = {}, sets
    if args.fp8:  # flashc's FP8 attention: q, k, v in e4m3 (descales of one value, as FA3 is called), P e4m3
        fsets = [[x.to(torch.float8_e4m3fn) for x in t] for t in sets]
        one = torch.ones(1, device="cuda", dtype=torch.float32)
        fp8 = dict(q_descale=one, k_descale=one, v_descale=one)
        row["note"] = "flashc q, k, v e4m3 (bf16 out); torch bf16"

    def flashc_calls(_mode):
        return [lambda t=t: flashc.flash_attn_func(t[0], t[1], t[2], causal=causal, **fp8) for t in fsets]

    def torch_calls(backend):
        return lambda mode: [sdpa_call(backend, t[0], t[1], t[2], causal, mode) for t in sets]

    measure(row, args, flashc_calls, torch_calls, ["mha"])
    for key in ("flashc", "cudnn", "flash"):
        ms = row[key]["ms"]
        row[key]["tflops"] = flops / (ms * 1e-3) / 1e12 if ms else None
    if args.fp8 and row["flashc"]["ms"]:  # flashc's own bf16 in the same process: the FP8 target is a ratio to it
        bf16 = [lambda t=t: flashc.flash_attn_func(t[0], t[1], t[2], causal=causal) for t in sets]
        ms, _ = time_pass(bf16, args.samples, args.warmup, not args.eager)
        row["flashc_bf16_tflops"] = flops / (ms * 1e-3) / 1e12
        row["note"] += "; flashc bf16 %.0f TF/s, e4m3 %.2fx" % (row["flashc_bf16_tflops"], ms / row["flashc"]["ms"])
    return row


def measure(row, args, flashc_calls, torch_calls, torch_modes):
    """Fills row['flashc'], row['cudnn'], row['flash'] with ms, mode and error; and the max difference
    of flashc's output from torch's. The implementations that run are timed together (time_passes: turns sample
    by sample) --rounds times, each keeping its fastest median. Timed one after another, each saw its own state
    (PERF.md step 204): the power cap's, where d 128 8k prefill read flashc / cuDNN 0.95 and 1.13 in two runs a minute
    apart; and the L2's, where flashc's decode read up to 5% faster after its own pass than after a torch kernel (as
    a serving engine runs it: after other kernels) while cuDNN's did not move."""
    outs, timed = {}, []
    impls = [("flashc", flashc_calls, ["-"]),
             ("cudnn", torch_calls(SDPBackend.CUDNN_ATTENTION), torch_modes),
             ("flash", torch_calls(SDPBackend.FLASH_ATTENTION), torch_modes)]
    for key, make, modes in impls:
        res = dict(ms=None, mode=None, gqa=None, error=None)
        if key == "flashc" and flashc is None:
            res["error"] = "flashc not importable: %s" % FLASHC_IMPORT_ERROR
        elif key != "flashc" and args.flashc_only:
            res["error"] = "not run (--flashc-only)"
        else:
            try:
                calls, mode, out = first_working(make, modes)
                outs[key] = out.transpose(1, 2) if key != "flashc" else out  # torch gives (b, h, s, d)
                res["gqa"] = mode if key != "flashc" else None
                timed.append((res, calls))
            except FlashcError as e:
                res["error"] = "FlashcError: %s" % e
            except Exception as e:
                res["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        row[key] = res
        torch.cuda.synchronize()
    for r in range(args.rounds):
        if not timed:
            break
        for (res, _), (ms, mode) in zip(timed, time_passes([c for _, c in timed], args.samples, args.warmup,
                                                           not args.eager)):
            res["ms"], res["mode"] = (ms if res["ms"] is None else min(res["ms"], ms)), mode
    ref = outs.get("flash", outs.get("cudnn"))
    if "flashc" in outs and ref is not None:
        row["max_abs_diff_vs_torch"] = (outs["flashc"].float() - ref.float()).abs().max().item()


# ------------------------------------------------------------------------------------------------
# Output

def fmt_ms(r):
    if r["ms"] is None:
        return "n/a"
    mark = "" if r["mode"] == "graph" else "*"
    return "%.4f%s" % (r["ms"], mark)


def fmt_ratio(a, b):
    return "%.2fx" % (a["ms"] / b["ms"]) if a["ms"] and b["ms"] else "n/a"


def print_table(rows, ceiling):
    head = "%-30s %10s %10s %10s %14s %14s %14s %7s %7s %8s  %s" % (
        "shape", "flashc ms", "cuDNN ms", "flash ms", "flashc", "cuDNN", "flash", "cuDNN/", "flash/", "max|d|",
        "note")
    print(head)
    print("%-30s %10s %10s %10s %14s %14s %14s %7s %7s %8s" % ("", "", "", "", "", "", "", "flashc", "flashc",
                                                              "vs torch"))
    for r in rows:
        if r["kind"] == "decode":
            rate = lambda k: ("%.0f GB/s" % r[k]["gbps"]) if r[k].get("gbps") else "n/a"
            pct = lambda k: (" %3.0f%%" % (100 * r[k]["gbps"] / ceiling)) if r[k].get("gbps") and ceiling else ""
            cols = [rate(k) + pct(k) for k in ("flashc", "cudnn", "flash")]
        else:
            cols = [("%.0f TF/s" % r[k]["tflops"]) if r[k].get("tflops") else "n/a" for k in ("flashc", "cudnn", "flash")]
        note = r["note"]
        gq = [r[k]["gqa"] for k in ("cudnn", "flash") if r[k].get("gqa") == "expand"]
        if gq:
            note += "; K/V expanded to h_q for a backend without GQA"
        diff = r.get("max_abs_diff_vs_torch")
        print("%-30s %10s %10s %10s %14s %14s %14s %7s %7s %8s  %s" % (
            r["name"], fmt_ms(r["flashc"]), fmt_ms(r["cudnn"]), fmt_ms(r["flash"]), cols[0], cols[1], cols[2],
            fmt_ratio(r["cudnn"], r["flashc"]), fmt_ratio(r["flash"], r["flashc"]),
            "%.1e" % diff if diff is not None else "n/a", note))
    pre = [r["cudnn"]["ms"] / r["flashc"]["ms"] for r in rows
           if r["kind"] == "prefill" and r["cudnn"]["ms"] and r["flashc"]["ms"]]
    if pre:
        print("prefill, cuDNN/flashc over %d shapes: geometric mean %.2fx, min %.2fx, %d below 1.0x" % (
            len(pre), math.exp(sum(math.log(x) for x in pre) / len(pre)), min(pre), sum(x < 1.0 for x in pre)))
    errors = sorted({"%s: %s" % (k, r[k]["error"]) for r in rows for k in ("flashc", "cudnn", "flash") if r[k]["error"]})
    for e in errors:
        print("  n/a because %s" % e)
    print("ratios: torch time / flashc time (> 1: flashc faster). * = eager timing (graph capture failed). "
          "Decode %% = GB/s of K+V read once over the streaming-read ceiling. max|d|: flashc's output against "
          "torch flash's (or cuDNN's).")


def write_png(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--png: matplotlib not importable here: plot skipped")
        return
    groups = [("decode", "GB/s (K+V read once)", "gbps"), ("prefill", "TFLOP/s", "tflops")]
    groups = [g for g in groups if any(r["kind"] == g[0] for r in rows)]
    fig, axes = plt.subplots(len(groups), 1, figsize=(14, 5 * len(groups)), squeeze=False)
    for ax, (kind, label, key) in zip(axes[:, 0], groups):
        sel = [r for r in rows if r["kind"] == kind]
        xs = range(len(sel))
        for i, (impl, color) in enumerate((("flashc", "tab:red"), ("cudnn", "tab:blue"), ("flash", "tab:green"))):
            vals = [r[impl].get(key) or 0 for r in sel]
            ax.bar([x + (i - 1) * 0.27 for x in xs], vals, 0.27, label=impl if impl == "flashc" else "torch " + impl,
                   color=color)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["name"] for r in sel], rotation=35, ha="right", fontsize=8)
        ax.set_ylabel(label)
        ax.set_title("%s (%s)" % (kind, torch.cuda.get_device_name()))
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("wrote %s" % path)


# ------------------------------------------------------------------------------------------------

def run_child(name, args):
    """One shape measured by a child process (--fresh): its row from the child's JSON."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "row.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--set", "table" if name.startswith("prefill-d") else "all",
               "--only", name, "--exact", "--no-ceiling",
               "--samples", str(args.samples), "--warmup", str(args.warmup), "--rounds", str(args.rounds),
               "--json", path]
        if args.eager:
            cmd.append("--eager")
        if args.flashc_only:
            cmd.append("--flashc-only")
        if args.kv_fp8:
            cmd.append("--kv-fp8")
        if args.kv_dense:
            cmd.append("--kv-dense")
        if args.fp8:
            cmd.append("--fp8")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            return json.load(f)["rows"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="all", choices=["decode", "prefill", "all", "table"],
                    help="table: the prefill table of every head dim (not in all)")
    ap.add_argument("--only", default=None, help="run only shapes whose name contains this")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--eager", action="store_true", help="time plain calls instead of CUDA graph replays")
    ap.add_argument("--fresh", action="store_true", help="each shape in its own child process")
    ap.add_argument("--exact", action="store_true", help="--only names one shape exactly")
    ap.add_argument("--no-ceiling", action="store_true", help=argparse.SUPPRESS)  # children of --fresh
    ap.add_argument("--flashc-only", action="store_true",
                    help="time flashc alone (A/B of flashc builds; the torch columns are n/a)")
    ap.add_argument("--kv-dense", action="store_true",
                    help="decode: flashc reads the dense K/V that torch reads (no page table) instead of the paged cache")
    ap.add_argument("--rounds", type=int, default=2,
                    help="time the implementations N times, in turns sample by sample; each keeps its fastest median")
    ap.add_argument("--kv-fp8", action="store_true",
                    help="decode: flashc reads an e4m3 cache (its GB/s count its own bytes; torch stays bf16)")
    ap.add_argument("--fp8", action="store_true",
                    help="prefill: flashc runs FP8 attention (q, k, v e4m3, bf16 out); the anchors stay bf16")
    ap.add_argument("--json", default=None)
    ap.add_argument("--png", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("compare.py: no CUDA device")
        return 2
    prop = torch.cuda.get_device_properties(0)
    l2 = getattr(prop, "L2_cache_size", 50 * 2**20)
    fl = "n/a"
    if flashc is not None:
        try:
            fl = "%s (cuda_available=%s)" % (flashc.version(), flashc.cuda_available())
        except Exception as e:
            fl = "n/a (%s)" % e
    print("device: %s, %d SMs, L2 %.0f MB; torch %s, cuDNN %s; flashc %s" % (
        prop.name, prop.multi_processor_count, l2 / 1e6, torch.__version__, torch.backends.cudnn.version(), fl))
    t0 = time.time()
    read, reads, copy = (None, {}, None) if args.no_ceiling else read_ceiling()
    torch.cuda.empty_cache()
    if read:
        print("streaming-read ceiling: %.0f GB/s (best of %s over 4 GiB); copy: %.0f GB/s (read + write)" % (
            read, ", ".join("%s %.0f" % kv for kv in reads.items()), copy))
    fp8_tflops = fp8_gemm_ceiling() if args.fp8 and not args.no_ceiling else None
    if fp8_tflops:
        print("FP8 GEMM ceiling: %.0f TFLOP/s (torch._scaled_mm e4m3 8192^3, bf16 out)" % fp8_tflops)
    shapes = (decode_shapes() if args.set in ("decode", "all") else []) + \
             (prefill_shapes() if args.set in ("prefill", "all") else []) + \
             (table_shapes() if args.set == "table" else [])
    if args.only:
        shapes = [s for s in shapes if (args.only == s[0] if args.exact else args.only in s[0])]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    rows = []
    for name, kind, p in shapes:
        row = run_child(name, args) if args.fresh else \
            (run_decode if kind == "decode" else run_prefill)(name, p, args, l2, gen)
        rows.append(row)
        torch.cuda.empty_cache()
        print("  %s done (%.0fs)" % (name, time.time() - t0), flush=True)
    print()
    print_table(rows, read)
    if args.json:
        meta = dict(device=prop.name, sms=prop.multi_processor_count, l2_bytes=l2, torch=torch.__version__,
                    cudnn=torch.backends.cudnn.version(), flashc=fl, read_ceiling_gbps=read, read_probes_gbps=reads,
                    copy_gbps=copy, fp8_gemm_tflops=fp8_tflops,
                    timing="CUDA events, median of %d samples after %d warm-up, fastest of %d rounds, %s%s" % (
                        args.samples, args.warmup, args.rounds, "eager" if args.eager else "CUDA graph replay",
                        ", each shape in a fresh process" if args.fresh else ""),
                    date=time.strftime("%Y-%m-%d"))
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
        print("wrote %s" % args.json)
    if args.png:
        write_png(rows, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
