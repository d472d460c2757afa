#!/usr/bin/env python3
"""test_python.py — checks the flashc Python binding against an independent float64 numpy reference."""
import ctypes
import importlib
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import flashc  # noqa: E402
from flashc import FlashcError  # noqa: E402

# ------------------------------------------------------------------------------------------------
# Reference (float64, one sequence at a time), written from the semantics in include/flashc.h.


def round_bf16(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


ROUND = {
    "float16": lambda x: np.asarray(x).astype(np.float16).astype(np.float64),
    "bfloat16": round_bf16,
    "float32": lambda x: np.asarray(x).astype(np.float32).astype(np.float64),
}


def attn_ref(q, k, v, scale=None, softcap=0.0, alibi=None, causal=False, window=(-1, -1), sinks=None,
             rnd=None, round_scores=False):
    """q (s_q, h, d), k (s_k, h_k, d), v (s_k, h_k, d_v) → out (s_q, h, d_v), lse (h, s_q).
    rnd: rounding of the kernel's precision steps (P before P·V, out; scores too if round_scores)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s_q, h, d = q.shape
    s_k, h_k = k.shape[:2]
    g = h // h_k
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    x = (scale if scale is not None else 1.0 / math.sqrt(d)) * np.einsum("ihd,jhd->hij", q, kk)
    if rnd is not None and round_scores:
        x = rnd(x)
    if softcap > 0:
        x = softcap * np.tanh(x / softcap)
    i = np.arange(s_q)[:, None] + (s_k - s_q)
    j = np.arange(s_k)[None, :]
    if alibi is not None:
        x = x - np.asarray(alibi, np.float64)[:, None, None] * np.abs(i - j)[None]
    wl, wr = window
    wr = 0 if causal else wr
    mask = np.ones((s_q, s_k), bool)
    if wl >= 0:
        mask &= j >= i - wl
    if wr >= 0:
        mask &= j <= i + wr
    x = np.where(mask[None], x, -np.inf)
    m = np.max(x, axis=2, keepdims=True, initial=-np.inf)
    sink = None if sinks is None else np.asarray(sinks, np.float64)[:, None, None]
    if sink is not None:
        m = np.maximum(m, sink)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(x - m)
    l = p.sum(axis=2, keepdims=True) + (0.0 if sink is None else np.exp(sink - m))
    pv = p if rnd is None else rnd(p)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(l > 0, np.einsum("hij,jhd->hid", pv, vv) / l, 0.0).transpose(1, 0, 2)
        lse = np.where(l[..., 0] > 0, np.log(l[..., 0]) + m[..., 0], -np.inf)
    return (out if rnd is None else rnd(out)), lse


def rotate(x, cos, sin, pos, interleaved):
    """x (n, h, d) rotated at positions pos (n,) with tables (max_pos, rd/2), as flashc.h describes."""
    x = np.asarray(x, np.float64)
    rd = 2 * cos.shape[1]
    c = np.asarray(cos, np.float64)[pos][:, None, :]
    s = np.asarray(sin, np.float64)[pos][:, None, :]
    y = x.copy()
    i1, i2 = (slice(0, rd, 2), slice(1, rd, 2)) if interleaved else (slice(0, rd // 2), slice(rd // 2, rd))
    y[..., i1] = x[..., i1] * c - x[..., i2] * s
    y[..., i2] = x[..., i1] * s + x[..., i2] * c
    return y


def rotary_tables(max_pos, rd):
    inv = 1.0 / 10000 ** (np.arange(0, rd, 2) / rd)
    ang = np.arange(max_pos)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def ref_pair(dtype, seqs, **kw):
    """Reference of several sequences [(q, k, v, per-seq kwargs)]: (out64, lse64), (outlow, lselow).
    Outputs are lists per sequence."""
    r64, rlow = [], []
    for q, k, v, extra in seqs:
        r64.append(attn_ref(q, k, v, **kw, **extra))
        rlow.append(attn_ref(q, k, v, **kw, **extra, rnd=ROUND[dtype], round_scores=dtype == "float32"))
    return r64, rlow


# ------------------------------------------------------------------------------------------------
# Comparison


def to64(x):
    if type(x).__module__.startswith("torch"):
        return x.detach().float().cpu().numpy().astype(np.float64)
    return np.asarray(x, np.float64)


def max_abs(a, b):
    if a.size == 0:
        return 0.0
    d = np.abs(a - b)
    return float(np.inf) if np.isnan(d).any() else float(d.max())


EPS = {"bfloat16": 2.0**-7, "float16": 2.0**-10, "float32": 2.0**-23}


def err_beyond_rounding(out, ref64):
    """max(|out − ref64| − half a step of out's dtype there, 0): the error of what the kernel computed before
    its final store, which may round either way (tests/problem.h says why)."""
    eps = EPS.get(str(out.dtype).split(".")[-1], 0.0)  # torch.bfloat16, numpy float16, ...
    out = to64(out)
    if out.size == 0:
        return 0.0
    _, ex = np.frexp(np.maximum(np.abs(out), np.abs(ref64)))
    d = np.maximum(np.abs(out - ref64) - np.ldexp(eps, ex - 2), 0)
    return float(np.inf) if np.isnan(d).any() else float(d.max())


def compare_out(out, ref64, reflow):
    """FlashAttention's rule: max|out − ref64| beyond out's rounding ≤ 2·max|ref_lowp − ref64| + 1e-5."""
    err, tol = err_beyond_rounding(out, ref64), 2 * max_abs(reflow, ref64) + 1e-5
    return err <= tol, "out err=%.2e tol=%.2e ratio=%.2f" % (err, tol, err / tol)


def compare_lse(lse, ref, tol=1e-4, reflow=None):
    """-inf rows equal; finite ones within tol, or the FA rule where a low-precision lse is given."""
    lse = to64(lse)
    inf_ok = np.array_equal(np.isneginf(lse), np.isneginf(ref))
    fin = np.isfinite(ref)
    err = max_abs(lse[fin], ref[fin]) if inf_ok else float("inf")
    if reflow is not None:
        tol = max(tol, 2 * max_abs(reflow[fin], ref[fin]) + 1e-5)
    return inf_ok and err <= tol, "lse err=%.2e tol=%.2e%s" % (err, tol, "" if inf_ok else " (-inf rows differ)")


def combine(*results):
    return all(ok for ok, _ in results), "; ".join(msg for _, msg in results)


# ------------------------------------------------------------------------------------------------
# Inputs


def np_dtype(dtype):
    """numpy dtype of a name; 'bfloat16' needs ml_dtypes."""
    if dtype == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def randn(rng, shape, dtype):
    return rng.standard_normal(shape).astype(np_dtype(dtype) if isinstance(dtype, str) else dtype)


def cu(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def paginate(rng, seqs, page_size, dtype):
    """Scatters per-sequence rows [(n_i, h_k, d)] into a shuffled paged cache; returns cache, table."""
    b = len(seqs)
    max_pages = max(1, max(-(-len(s) // page_size) for s in seqs))
    num_pages = b * max_pages + 3
    table = rng.permutation(num_pages)[: b * max_pages].reshape(b, max_pages).astype(np.int32)
    cache = randn(rng, (num_pages, page_size) + seqs[0].shape[1:], dtype)
    for i, s in enumerate(seqs):
        j = np.arange(len(s))
        cache[table[i, j // page_size], j % page_size] = s
    return cache, table


def gather(cache, table, i, n):
    j = np.arange(n)
    ps = cache.shape[1]
    return cache[table[i, j // ps], j % ps]


# ------------------------------------------------------------------------------------------------
# Checks: each returns (ok, message).

CHECKS = []
SKIPS = []
COLD_ONLY = set()  # checks of the build and the process (compilers, CLI), run once


def cold_only(fn):
    """Marks the check just registered as one that the cached pass skips."""
    COLD_ONLY.add(CHECKS[-1][0])
    return fn


def check(name):
    def register(fn):
        CHECKS.append((name, fn))
        return fn
    return register


def add(name, fn, *args, **kw):
    CHECKS.append((name, lambda: fn(*args, **kw)))


@cold_only
@check("struct layout matches flashc.h (C compiler)")
def check_layout():
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None, "no C compiler"
    from flashc._lib import FcAttnArgs, FcMergeArgs, FcTensor
    structs = {"fc_tensor": FcTensor, "fc_attn_args": FcAttnArgs, "fc_merge_args": FcMergeArgs}
    lines = ['printf("%s %%zu\\n", sizeof(%s));' % (s, s) for s in structs]
    for s, cls in structs.items():
        lines += ['printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (s, f, s, f) for f, _ in cls._fields_]
    src = "#include <stdio.h>\n#include <stddef.h>\n#include \"flashc.h\"\nint main(void){%s return 0;}\n" % "".join(lines)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "l.c"), "w") as f:
            f.write(src)
        exe = os.path.join(tmp, "l")
        subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), f.name, "-o", exe], check=True)
        want = dict(line.split() for line in subprocess.run([exe], capture_output=True, text=True).stdout.splitlines())
    got = {s: ctypes.sizeof(c) for s, c in structs.items()}
    got.update({"%s.%s" % (s, f): getattr(c, f).offset for s, c in structs.items() for f, _ in c._fields_})
    bad = [k for k in want if int(want[k]) != got[k]]
    return not bad, "%d sizes/offsets compared%s" % (len(want), (", differ: %s" % bad) if bad else "")


@cold_only
@check("libflashc.so: SONAME libflashc.so.0, exports exactly flashc.h's functions")
def check_exports():
    lib = os.path.join(ROOT, "build", "libflashc.so")
    nm, readelf = shutil.which("nm"), shutil.which("readelf")
    if not os.path.exists(lib) or nm is None or readelf is None:
        return None, "no build/libflashc.so, nm or readelf"
    with open(os.path.join(ROOT, "include", "flashc.h")) as f:
        header = f.read()
    declared = set(re.findall(r"^(?!static)[A-Za-z_][\w ]*?\**\b(fc_\w+)\(", header, re.M))
    out = subprocess.run([nm, "-D", "--defined-only", lib], capture_output=True, text=True).stdout
    exported = {l.split()[-1].split("@")[0] for l in out.splitlines() if l.split() and l.split()[-1].startswith("fc_")}
    soname = re.findall(r"SONAME.*\[(.*)\]", subprocess.run([readelf, "-d", lib], capture_output=True, text=True).stdout)
    others = [l.split()[-1] for l in out.splitlines() if l.split() and l.split()[1] in "TDBR" and
              not l.split()[-1].startswith("fc_") and l.split()[-1] != "FLASHC_0"]
    ok = declared == exported and soname == ["libflashc.so.0"] and not others and len(declared) >= 10
    return ok, "soname %s; %d declared, %d exported; missing %s, extra %s, other symbols %s" % (
        soname, len(declared), len(exported), sorted(declared - exported), sorted(exported - declared), others[:5])


@cold_only
@check("the binding declares argtypes of every library function it calls (else ctypes passes a pointer or size as a C int)")
def check_binding_declares():
    used = set()
    pkg = os.path.dirname(flashc.__file__)
    for name in os.listdir(pkg):
        if name.endswith(".py") and name != "_lib.py":
            with open(os.path.join(pkg, name)) as f:
                used |= set(re.findall(r"\.(fc_[a-z_]+)\b", f.read()))  # L.fc_x( or a bound L.fc_x
    L = sys.modules["flashc._lib"].lib()
    undeclared = sorted(n for n in used if getattr(L, n).argtypes is None)
    return len(used) >= 10 and not undeclared, "%d functions called; undeclared: %s" % (len(used), undeclared)


@cold_only
@check("flashc-bench: malformed numbers exit 2 naming the option; rows carry a pass/fail check")
def check_bench_cli():
    bench = os.path.join(ROOT, "build", "flashc-bench")
    if not os.access(bench, os.X_OK):
        return None, "build/flashc-bench not built"
    bad = [["--b", "x"], ["--sq", "12abc"], ["--iters", "0"], ["--window", "3,4x"], ["--softcap", "nan"],
           ["--b", "99999999999"]]
    wrong = []
    for args in bad:
        r = subprocess.run([bench] + args, capture_output=True, text=True)
        if r.returncode != 2 or args[0] not in r.stderr:
            wrong.append("%s -> exit %d %r" % (" ".join(args), r.returncode, r.stderr.strip()))
    r = subprocess.run([bench, "--b", "1", "--sq", "16", "--sk", "64", "--hq", "2", "--hk", "1", "--d", "64",
                        "--iters", "1", "--warmup", "0"], capture_output=True, text=True)
    rows = [l.split() for l in r.stdout.splitlines() if l.startswith("custom")]
    ok = not wrong and r.returncode == 0 and len(rows) == 1 and rows[0][-1] == "pass"
    return ok, "malformed: %s; row check column %r" % (wrong or "all rejected", rows[0][-1] if rows else None)


@cold_only
@check("pip install . in a fresh venv: flashc imports anywhere, with __version__, and runs the README's example")
def check_pip_install():
    if os.environ.get("FLASHC_TEST_PIP") == "0":
        return None, "FLASHC_TEST_PIP=0"
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    tmp = tempfile.mkdtemp(prefix="flashc-pip-")
    try:
        venv = os.path.join(tmp, "venv")
        env = {k: v for k, v in os.environ.items() if k not in ("FLASHC_LIB", "PYTHONPATH")}
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True, capture_output=True)
        py = os.path.join(venv, "bin", "python")
        r = subprocess.run([py, "-m", "pip", "install", "-q", "--no-input", ROOT], capture_output=True, text=True,
                           env=env, cwd=tmp)
        if r.returncode != 0 and re.search(r"(No matching distribution found|Could not find a version that "
                                           r"satisfies the requirement) (for )?(setuptools|wheel)|"
                                           r"Failed to establish a new connection|Network is unreachable", r.stderr):
            return None, "pip cannot reach a package index for setuptools: %s" % r.stderr.strip()[-160:]
        if r.returncode != 0:
            return False, "pip install failed: %s" % r.stderr.strip()[-400:]
        code = ("import flashc, os; p = os.path.dirname(flashc.__file__); "
                "assert 'site-packages' in p, p; assert os.path.exists(os.path.join(p, 'libflashc.so')); "
                "assert flashc.__version__ == flashc.version(), (flashc.__version__, flashc.version())\n"
                + (blocks[0] if blocks else "raise SystemExit('no python block in README.md')")
                + "\nprint('ok', flashc.__version__, out.shape)")
        r = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env, cwd=tmp)
        ok = r.returncode == 0 and r.stdout.startswith("ok ")
        return ok, "installed and ran the README example from %s: %s" % (tmp, (r.stdout + r.stderr).strip()[-300:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@check("__version__ equals the library's version")
def check_version_attr():
    return flashc.__version__ == flashc.version(), "%s / %s" % (flashc.__version__, flashc.version())


@cold_only
@check("the default thread count is read once (FLASHC_NUM_THREADS at the first call)")
def check_threads_read_once():
    code = ("import os, sys; sys.path.insert(0, %r); import flashc; a = flashc.get_num_threads(); "
            "os.environ['FLASHC_NUM_THREADS'] = '5'; print(a, flashc.get_num_threads())" % os.path.join(ROOT, "python"))
    env = dict(os.environ, FLASHC_NUM_THREADS="3")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return r.stdout.split() == ["3", "3"], "first call and after a change of the environment: %r %s" % (
        r.stdout.strip(), r.stderr.strip()[-200:])


@check("version, cuda_available, threads")
def check_misc():
    v = flashc.version()
    ok = re.fullmatch(r"\d+\.\d+\.\d+", v) is not None and isinstance(flashc.cuda_available(), bool)
    flashc.set_num_threads(2)
    ok = ok and flashc.get_num_threads() == 2
    flashc.set_num_threads(0)
    return ok and flashc.get_num_threads() >= 1, "version %s, cuda %s" % (v, flashc.cuda_available())


def dense_case(dtype, b=2, s_q=37, s_k=53, h=4, h_k=4, d=64, d_v=None, seed=0, alibi_shape=None,
               use_sinks=False, num_splits=0, lse=True, **kw):
    """flash_attn_func on random inputs against the reference."""
    rng = np.random.default_rng(seed)
    d_v = d_v or d
    q, k, v = randn(rng, (b, s_q, h, d), dtype), randn(rng, (b, s_k, h_k, d), dtype), randn(rng, (b, s_k, h_k, d_v), dtype)
    alibi = None if alibi_shape is None else rng.uniform(0.05, 0.5, alibi_shape).astype(np.float32)
    sinks = rng.standard_normal(h).astype(np.float32) if use_sinks else None
    res = flashc.flash_attn_func(q, k, v, alibi_slopes=alibi, sinks=sinks, num_splits=num_splits,
                                 return_attn_probs=lse, **_fa_kw(kw))
    out = res[0] if lse else res
    if not isinstance(out, np.ndarray) or out.dtype != q.dtype or out.shape != (b, s_q, h, d_v):
        return False, "out is %r %s" % (type(out), getattr(out, "shape", None))
    seqs = [(q[i], k[i], v[i], {"alibi": _alibi_row(alibi, i)}) for i in range(b)]
    r64, rlow = ref_pair(dtype, seqs, sinks=sinks, **_ref_kw(kw))
    result = compare_out(out, np.stack([r[0] for r in r64]), np.stack([r[0] for r in rlow]))
    if lse:
        result = combine(result, compare_lse(res[1], np.stack([r[1] for r in r64])))
        result = combine(result, (res[2] is None, "S_dmask None"))
    return result


def _alibi_row(alibi, i):
    if alibi is None:
        return None
    return alibi if alibi.ndim == 1 else alibi[i]


def _fa_kw(kw):
    """Keyword arguments of the flashc call (softmax_scale, causal, window_size, softcap)."""
    return {k: v for k, v in kw.items() if k in ("softmax_scale", "causal", "window_size", "softcap")}


def _ref_kw(kw):
    m = {"softmax_scale": "scale", "causal": "causal", "window_size": "window", "softcap": "softcap"}
    return {m[k]: v for k, v in kw.items() if k in m}


for _dt in ("float16", "float32"):
    add("dense %s MHA" % _dt, dense_case, _dt)
    add("dense %s MHA out only" % _dt, dense_case, _dt, lse=False)
    add("dense %s GQA causal" % _dt, dense_case, _dt, s_q=70, s_k=70, h=8, h_k=2, causal=True, seed=1)
    add("dense %s causal s_q > s_k (empty rows)" % _dt, dense_case, _dt, s_q=20, s_k=9, causal=True, seed=2)
    add("dense %s causal s_q < s_k" % _dt, dense_case, _dt, s_q=5, s_k=77, causal=True, seed=3)
    add("dense %s window (16, 4)" % _dt, dense_case, _dt, s_q=40, s_k=90, window_size=(16, 4), seed=4)
    add("dense %s causal + window left 8" % _dt, dense_case, _dt, s_q=33, s_k=33, causal=True, window_size=(8, -1), seed=5)
    add("dense %s softcap 5 + scale 0.3" % _dt, dense_case, _dt, softcap=5.0, softmax_scale=0.3, seed=6)
    add("dense %s alibi (h) causal" % _dt, dense_case, _dt, alibi_shape=(4,), causal=True, seed=7)
    add("dense %s alibi (b, h)" % _dt, dense_case, _dt, alibi_shape=(2, 4), seed=8)
    add("dense %s sinks MQA" % _dt, dense_case, _dt, h=6, h_k=1, use_sinks=True, seed=9)
    add("dense %s sinks causal s_q > s_k" % _dt, dense_case, _dt, s_q=12, s_k=4, use_sinks=True, causal=True, seed=10)
    add("dense %s d=128 d_v=64" % _dt, dense_case, _dt, d=128, d_v=64, seed=11)
    add("dense %s d=96 s=1" % _dt, dense_case, _dt, s_q=1, s_k=1, d=96, seed=12)
    add("dense %s num_splits=1" % _dt, dense_case, _dt, s_k=300, num_splits=1, seed=13)
    add("dense %s num_splits=3 causal" % _dt, dense_case, _dt, s_q=3, s_k=300, num_splits=3, causal=True, seed=14)


try:
    np_dtype("bfloat16")
    add("dense numpy bfloat16 (ml_dtypes) GQA causal", dense_case, "bfloat16", h=8, h_k=2, causal=True, seed=15)
    add("varlen numpy bfloat16 (ml_dtypes) paged 16", lambda: varlen_case("bfloat16", [3, 9], [20, 33], page_size=16))
except ImportError:
    SKIPS.append("numpy bfloat16 checks (ml_dtypes is not importable)")


@check("dense float16 strided q (packed qkv) and non-contiguous k")
def check_strided():
    rng = np.random.default_rng(20)
    b, s, h, d = 2, 19, 4, 64
    qkv = randn(rng, (b, s, 3, h, d), np.float16)
    q, v = qkv[:, :, 0], qkv[:, :, 2]
    k = np.ascontiguousarray(qkv[:, :, 1].swapaxes(-1, -2)).swapaxes(-1, -2)  # last-dim stride != 1
    out, lse, _ = flashc.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    seqs = [(q[i], k[i], v[i], {}) for i in range(b)]
    r64, rlow = ref_pair("float16", seqs, causal=True)
    return combine(compare_out(out, np.stack([r[0] for r in r64]), np.stack([r[0] for r in rlow])),
                   compare_lse(lse, np.stack([r[1] for r in r64])))


@check("empty batches: dense s_q = 0 and varlen total_q = 0")
def check_empty():
    rng = np.random.default_rng(22)
    k = randn(rng, (2, 5, 2, 64), np.float16)
    out, lse, _ = flashc.flash_attn_func(np.ones((2, 0, 2, 64), np.float16), k, k, return_attn_probs=True)
    kv = randn(rng, (5, 2, 64), np.float16)
    vout, vlse, _ = flashc.flash_attn_varlen_func(np.ones((0, 2, 64), np.float16), kv, kv, [0, 0, 0], [0, 2, 5], 0, 3,
                                                  return_attn_probs=True)
    ok = out.shape == (2, 0, 2, 64) and lse.shape == (2, 2, 0) and vout.shape == (0, 2, 64) and vlse.shape == (2, 0)
    return ok, "shapes %s %s %s %s" % (out.shape, lse.shape, vout.shape, vlse.shape)


@check("dense float32 one thread equals default threads")
def check_threads():
    rng = np.random.default_rng(21)
    q, k, v = (randn(rng, (2, 64, 4, 64), np.float32) for _ in range(3))
    flashc.set_num_threads(1)
    try:
        one = flashc.flash_attn_func(q, k, v, causal=True, num_splits=1)
    finally:
        flashc.set_num_threads(0)
    many = flashc.flash_attn_func(q, k, v, causal=True, num_splits=1)
    err = max_abs(to64(one), to64(many))
    return err <= 1e-6, "max diff %.2e" % err


# ---------------------------------------------------------------- varlen


def varlen_case(dtype, q_lens, k_lens, h=4, h_k=2, d=64, seed=30, page_size=None, use_sinks=False,
                alibi_bh=False, pass_seqused=False, **kw):
    """flash_attn_varlen_func (packed or paged k/v) against the reference."""
    rng = np.random.default_rng(seed)
    b = len(q_lens)
    q = randn(rng, (sum(q_lens), h, d), dtype)
    ks = [randn(rng, (n, h_k, d), dtype) for n in k_lens]
    vs = [randn(rng, (n, h_k, d), dtype) for n in k_lens]
    alibi = rng.uniform(0.05, 0.5, (b, h)).astype(np.float32) if alibi_bh else None
    sinks = rng.standard_normal(h).astype(np.float32) if use_sinks else None
    cq, ck = cu(q_lens), cu(k_lens)
    extra = {}
    if page_size is None:
        k, v = np.concatenate(ks), np.concatenate(vs)
    else:
        k, table = paginate(rng, ks, page_size, dtype)
        v = _repage(randn(rng, k.shape, dtype), table, vs)
        extra["block_table"] = table
        if pass_seqused:
            extra["seqused_k"] = np.array(k_lens, np.int32)
            ck = cu([n + 5 for n in k_lens])  # ignored when seqused_k is given
    out, lse, _ = flashc.flash_attn_varlen_func(q, k, v, cq, ck, max(q_lens), max(k_lens), alibi_slopes=alibi,
                                                sinks=sinks, return_attn_probs=True, **_fa_kw(kw), **extra)
    seqs = [(q[cq[i]:cq[i + 1]], ks[i], vs[i], {"alibi": _alibi_row(alibi, i)}) for i in range(b)]
    r64, rlow = ref_pair(dtype, seqs, sinks=sinks, **_ref_kw(kw))
    ok_shape = out.shape == (sum(q_lens), h, d) and lse.shape == (h, sum(q_lens))
    return combine((ok_shape, "shapes"),
                   compare_out(out, np.concatenate([r[0] for r in r64]), np.concatenate([r[0] for r in rlow])),
                   compare_lse(lse, np.concatenate([r[1] for r in r64], axis=1)))


for _dt in ("float16", "float32"):
    add("varlen %s with empty q and k sequences" % _dt, varlen_case, _dt, [5, 0, 17, 9], [12, 7, 0, 30])
    add("varlen %s causal" % _dt, varlen_case, _dt, [5, 0, 17, 9], [12, 7, 9, 30], causal=True, seed=31)
    add("varlen %s window + softcap + alibi (b, h)" % _dt, varlen_case, _dt, [8, 20, 1], [40, 20, 65],
        window_size=(10, 2), softcap=3.0, alibi_bh=True, seed=32)
    add("varlen %s sinks causal" % _dt, varlen_case, _dt, [7, 3], [4, 50], causal=True, use_sinks=True, seed=33)
    for _ps in (1, 16):
        add("varlen %s paged page_size %d causal" % (_dt, _ps), varlen_case, _dt, [4, 3, 0, 6], [30, 1, 17, 40],
            page_size=_ps, causal=True, seed=34 + _ps)
    add("varlen %s paged page_size 3 with seqused_k" % _dt, varlen_case, _dt, [2, 5], [11, 20], page_size=3,
        pass_seqused=True, seed=36)


# ---------------------------------------------------------------- kv cache


def kvcache_case(dtype, seqlens, s_new, s_q, cap=48, h=4, h_k=2, d=64, rd=None, interleaved=True, page_size=None,
                 seed=50, **kw):
    """flash_attn_with_kvcache with append (and rotary when rd): out, lse and the cache written in place."""
    rng = np.random.default_rng(seed)
    b = len(seqlens)
    q = randn(rng, (b, s_q, h, d), dtype)
    k_log, v_log = randn(rng, (b, cap, h_k, d), dtype), randn(rng, (b, cap, h_k, d), dtype)
    k_new, v_new = randn(rng, (b, s_new, h_k, d), dtype), randn(rng, (b, s_new, h_k, d), dtype)
    cos, sin = rotary_tables(cap, rd) if rd else (None, None)
    if page_size is None:
        k_cache, v_cache, table = k_log.copy(), v_log.copy(), None
    else:
        k_cache, table = paginate(rng, list(k_log), page_size, dtype)
        v_cache = _repage(randn(rng, k_cache.shape, dtype), table, v_log)
    before = (k_cache.copy(), v_cache.copy())
    out, lse = flashc.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, rotary_cos=cos, rotary_sin=sin, cache_seqlens=np.array(seqlens),
        block_table=table, rotary_interleaved=interleaved, return_softmax_lse=True, **_fa_kw(kw))
    seqs64, seqslow, new_rows = [], [], []
    for i, n0 in enumerate(seqlens):
        n = n0 + s_new
        kn = rotate(k_new[i], cos, sin, n0 + np.arange(s_new), interleaved) if rd else k_new[i].astype(np.float64)
        qr = rotate(q[i], cos, sin, n - s_q + np.arange(s_q), interleaved) if rd else q[i].astype(np.float64)
        rnd = ROUND[dtype]
        seqs64.append((qr, np.concatenate([k_log[i, :n0], kn]), np.concatenate([v_log[i, :n0], v_new[i]]), {}))
        seqslow.append((rnd(qr), np.concatenate([k_log[i, :n0], rnd(kn)]), seqs64[-1][2], {}))
        new_rows.append(kn)
    r64 = [attn_ref(*s[:3], **_ref_kw(kw)) for s in seqs64]
    rlow = [attn_ref(*s[:3], **_ref_kw(kw), rnd=ROUND[dtype], round_scores=dtype == "float32") for s in seqslow]
    return combine(compare_out(out, np.stack([r[0] for r in r64]), np.stack([r[0] for r in rlow])),
                   compare_lse(lse, np.stack([r[1] for r in r64]), reflow=np.stack([r[1] for r in rlow])),
                   cache_written(dtype, k_cache, v_cache, before, table, seqlens, new_rows, v_new))


def _repage(v_cache, table, v_log):
    """Writes per-sequence rows v_log into pages v_cache along table (k's page table)."""
    ps = v_cache.shape[1]
    for i in range(len(v_log)):
        j = np.arange(len(v_log[i]))
        v_cache[table[i, j // ps], j % ps] = v_log[i]
    return v_cache


def cache_written(dtype, k_cache, v_cache, before, table, seqlens, new_rows, v_new):
    """New rows hold (rotated) k_new / v_new; every other element is unchanged."""
    k_exp, v_exp = before[0].astype(np.float64), before[1].astype(np.float64)
    k_tol = 1e-6
    for i, n0 in enumerate(seqlens):
        j = n0 + np.arange(len(new_rows[i]))
        idx = (i, j) if table is None else (table[i, j // k_cache.shape[1]], j % k_cache.shape[1])
        k_exp[idx] = new_rows[i]
        v_exp[idx] = v_new[i]
        k_tol = max(k_tol, 2 * max_abs(ROUND[dtype](new_rows[i]), new_rows[i]) + 1e-6)
    k_err, v_err = max_abs(to64(k_cache), k_exp), max_abs(to64(v_cache), v_exp)
    return k_err <= k_tol and v_err == 0, "cache k err=%.2e tol=%.2e, v err=%.2e" % (k_err, k_tol, v_err)


for _dt in ("float16", "float32"):
    add("kvcache %s dense append, rotary interleaved full d, causal" % _dt, kvcache_case, _dt, [10, 0, 40], 1, 1,
        rd=64, interleaved=True, causal=True)
    add("kvcache %s dense append, rotary half-split rd=32, causal" % _dt, kvcache_case, _dt, [10, 0, 40], 3, 3,
        rd=32, interleaved=False, causal=True, seed=51)
    add("kvcache %s dense append s_q=2 < s_new=4, no rotary, window" % _dt, kvcache_case, _dt, [5, 30], 4, 2,
        window_size=(6, 0), softcap=4.0, seed=52)
    add("kvcache %s paged 16 append, rotary half-split, causal" % _dt, kvcache_case, _dt, [5, 33, 0], 2, 2,
        rd=64, interleaved=False, page_size=16, causal=True, seed=53)
    add("kvcache %s paged 1 append, rotary interleaved" % _dt, kvcache_case, _dt, [7, 12], 1, 1,
        rd=32, interleaved=True, page_size=1, seed=54)


def kvcache_noappend_case(dtype, cache_seqlens, seed=60, **kw):
    """Attention over the cache as is: cache_seqlens an int, an array, or None (whole cache)."""
    rng = np.random.default_rng(seed)
    b, cap, h, h_k, d, s_q = 2, 40, 4, 4, 64, 3
    q = randn(rng, (b, s_q, h, d), dtype)
    k_cache, v_cache = randn(rng, (b, cap, h_k, d), dtype), randn(rng, (b, cap, h_k, d), dtype)
    out = flashc.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens, **_fa_kw(kw))
    lens = [cap] * b if cache_seqlens is None else list(np.broadcast_to(np.asarray(cache_seqlens), (b,)))
    seqs = [(q[i], k_cache[i, :lens[i]], v_cache[i, :lens[i]], {}) for i in range(b)]
    r64, rlow = ref_pair(dtype, seqs, **_ref_kw(kw))
    return compare_out(out, np.stack([r[0] for r in r64]), np.stack([r[0] for r in rlow]))


add("kvcache float16 no append, cache_seqlens int, window", kvcache_noappend_case, "float16", 21, window_size=(5, 5))
add("kvcache float16 no append, cache_seqlens list, causal", kvcache_noappend_case, "float16", [3, 40], causal=True)
add("kvcache float32 no append, whole cache, softcap", kvcache_noappend_case, "float32", None, softcap=2.0)


# ---------------------------------------------------------------- merge


def merge_ref(op, lp):
    op, lp = np.asarray(op, np.float64), np.asarray(lp, np.float64)
    m = np.max(lp, axis=0)
    m = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(lp - m)
    s = w.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(s[..., None] > 0, np.einsum("nrh,nrhd->rhd", w, op) / s[..., None], 0.0)
        lse = np.where(s > 0, np.log(s) + m, -np.inf)
    return out, lse


def merge_case(dtype):
    rng = np.random.default_rng(70)
    n, rows, h, d_v = 3, 5, 4, 64
    op = randn(rng, (n, rows, h, d_v), dtype)
    lp = (2 * rng.standard_normal((n, rows, h))).astype(np.float32)
    lp[0, 0, :] = -np.inf
    lp[:, 1, 2] = -np.inf
    out, lse = flashc.merge_states(op, lp)
    ref_out, ref_lse = merge_ref(op, lp)
    return combine((out.dtype == op.dtype and out.shape == (rows, h, d_v), "dtype/shape"),
                   compare_out(out, ref_out, ROUND[dtype](ref_out)), compare_lse(lse, ref_lse, 1e-5))


add("merge_states float32 (with -inf partials)", merge_case, "float32")
add("merge_states float16 (with -inf partials)", merge_case, "float16")


@check("merge_states of two key halves equals full attention (float32)")
def check_merge_split():
    rng = np.random.default_rng(71)
    b, s_q, s_k, h, d = 2, 9, 100, 4, 64
    q, k, v = randn(rng, (b, s_q, h, d), np.float32), randn(rng, (b, s_k, h, d), np.float32), randn(rng, (b, s_k, h, d), np.float32)
    parts = [flashc.flash_attn_func(q, k[:, a:e], v[:, a:e], return_attn_probs=True) for a, e in ((0, 40), (40, s_k))]
    op = np.stack([p[0].reshape(b * s_q, h, d) for p in parts])
    lp = np.stack([p[1].transpose(0, 2, 1).reshape(b * s_q, h) for p in parts])
    out, lse = flashc.merge_states(op, lp)
    seqs = [(q[i], k[i], v[i], {}) for i in range(b)]
    r64, rlow = ref_pair("float32", seqs)
    ref_out = np.stack([r[0] for r in r64]).reshape(b * s_q, h, d)
    ref_lse = np.stack([r[1] for r in r64]).transpose(0, 2, 1).reshape(b * s_q, h)
    return combine(compare_out(out, ref_out, np.stack([r[0] for r in rlow]).reshape(b * s_q, h, d)),
                   compare_lse(lse, ref_lse))


# ---------------------------------------------------------------- errors


def raises(exc, arg, fn, *args, **kw):
    """fn must raise exc whose message names arg (a word of the message before its first ':')."""
    try:
        fn(*args, **kw)
    except exc as e:
        msg = getattr(e, "message", None) or str(e)
        named = arg is None or arg in str(e)
        if isinstance(e, FlashcError):
            named = arg is None or arg in re.findall(r"[A-Za-z_]+", msg.split(":")[0])
        return named, "%s: %s" % (type(e).__name__, e)
    except Exception as e:  # noqa: BLE001
        return False, "raised %s instead of %s: %s" % (type(e).__name__, exc.__name__, e)
    return False, "did not raise %s" % exc.__name__


def _qkv(rng, q_shape, k_shape, dtype=np.float16):
    return randn(rng, q_shape, dtype), randn(rng, k_shape, dtype), randn(rng, k_shape, dtype)


@check("error: h_k not dividing h_q names k")
def check_err_heads():
    q, k, v = _qkv(np.random.default_rng(80), (1, 4, 8, 64), (1, 4, 3, 64))
    return raises(FlashcError, "k", flashc.flash_attn_func, q, k, v)


@check("error: q with 3 dims in flash_attn_func names q")
def check_err_ndim():
    q, k, v = _qkv(np.random.default_rng(81), (4, 8, 64), (1, 4, 8, 64))
    return raises(FlashcError, "q", flashc.flash_attn_func, q, k, v)


@check("error: head dims 44 and 264 name q; 48 (a multiple of 8) runs")
def check_err_headdim():
    rng = np.random.default_rng(82)
    q, k, v = _qkv(rng, (1, 4, 2, 44), (1, 4, 2, 44))
    q2, k2, v2 = _qkv(rng, (1, 4, 2, 264), (1, 4, 2, 264))
    return combine(raises(FlashcError, "q", flashc.flash_attn_func, q, k, v),
                   raises(FlashcError, "q", flashc.flash_attn_func, q2, k2, v2),
                   dense_case("float16", d=48, s_q=9, s_k=13, seed=83))  # a multiple of 8 runs


@check("error: k dtype differs from q names k")
def check_err_dtype():
    rng = np.random.default_rng(83)
    q, k, v = randn(rng, (1, 4, 2, 64), np.float16), randn(rng, (1, 4, 2, 64), np.float32), randn(rng, (1, 4, 2, 64), np.float16)
    return raises(FlashcError, "k", flashc.flash_attn_func, q, k, v)


@check("error: float64 q names q")
def check_err_f64():
    q, k, v = _qkv(np.random.default_rng(84), (1, 4, 2, 64), (1, 4, 2, 64), np.float64)
    return raises(FlashcError, "q", flashc.flash_attn_func, q, k, v)


@check("error: decreasing cu_seqlens_q names cu_seqlens_q")
def check_err_cu():
    q, k, v = _qkv(np.random.default_rng(85), (10, 2, 64), (10, 2, 64))
    return raises(FlashcError, "cu_seqlens_q", flashc.flash_attn_varlen_func, q, k, v,
                  np.array([0, 6, 4, 10]), np.array([0, 3, 6, 10]), 6, 4)


@check("error: dropout_p raises ValueError")
def check_err_dropout():
    q, k, v = _qkv(np.random.default_rng(86), (1, 4, 2, 64), (1, 4, 2, 64))
    return raises(ValueError, "dropout", flashc.flash_attn_func, q, k, v, dropout_p=0.1)


def batch_idx_leftpad(to=lambda x: x, same=np.array_equal, dtype=np.float32):
    """cache_batch_idx and cache_leftpad against the calls on a gathered / shifted cache; to() moves a numpy
    array to the library and device under test, same() compares two of its arrays."""
    rng = np.random.default_rng(87)
    b, cap, h, hk, d, rd = 3, 24, 4, 2, 64, 32
    q = to(randn(rng, (b, 2, h, d), dtype))
    kc, vc = to(randn(rng, (5, cap, hk, d), dtype)), to(randn(rng, (5, cap, hk, d), dtype))
    kn, vn = to(randn(rng, (b, 2, hk, d), dtype)), to(randn(rng, (b, 2, hk, d), dtype))
    cos, sin = (to(x.astype(np.float32)) for x in rotary_tables(64, rd))
    idx_np, pad_np = np.array([4, 0, 2], np.int32), np.array([3, 0, 7], np.int32)
    idx, pad, lens = to(idx_np), to(pad_np), to(np.array([10, 6, 20], np.int32))
    lens_np = np.array([10, 6, 20])
    bad = []
    # kv_batch_idx: as the call on a cache whose rows are the rows named, in order
    copy = (lambda x: x.clone()) if hasattr(q, "clone") else (lambda x: x.copy())
    k1, v1 = copy(kc), copy(vc)
    got = flashc.flash_attn_with_kvcache(q, k1, v1, kn, vn, cache_seqlens=lens, cache_batch_idx=idx, causal=True,
                                         rotary_cos=cos, rotary_sin=sin, num_splits=1)
    kg, vg = copy(kc[idx_np]), copy(vc[idx_np])
    want = flashc.flash_attn_with_kvcache(q, kg, vg, kn, vn, cache_seqlens=lens, causal=True, rotary_cos=cos,
                                          rotary_sin=sin, num_splits=1)
    bad += [] if same(got, want) and same(k1[idx_np], kg) and same(v1[idx_np], vg) else ["batch_idx"]
    untouched = [r for r in range(5) if r not in idx_np]
    bad += [] if same(k1[untouched], kc[untouched]) else ["rows not named were written"]
    # kv_leftpad: per sequence, as the call on the cache shifted by pad with rotary tables shifted by pad
    k2, v2 = copy(kc[:b]), copy(vc[:b])
    got = flashc.flash_attn_with_kvcache(q, k2, v2, kn, vn, cache_seqlens=lens, cache_leftpad=pad, causal=True,
                                         rotary_cos=cos, rotary_sin=sin, num_splits=1, window_size=(5, 0))
    for i in range(b):
        p0 = int(pad_np[i])
        ks, vs = copy(kc[i:i + 1, p0:]), copy(vc[i:i + 1, p0:])
        w = flashc.flash_attn_with_kvcache(q[i:i + 1], ks, vs, kn[i:i + 1], vn[i:i + 1], cache_seqlens=int(lens_np[i] - p0),
                                           causal=True, rotary_cos=cos[p0:], rotary_sin=sin[p0:], num_splits=1,
                                           window_size=(5, 0))
        ok = same(got[i:i + 1], w) and same(k2[i, p0:], ks[0]) and same(k2[i, :p0], kc[i, :p0])
        bad += [] if ok else ["leftpad sequence %d" % i]
    return combine((not bad, "differ: %s" % bad if bad else "out and cache writes equal"),
                   raises(FlashcError, "cache_batch_idx", flashc.flash_attn_with_kvcache, q, kc, vc,
                          cache_seqlens=4, cache_batch_idx=np.array([1, 5, 0], np.int32)),
                   raises(FlashcError, "cache_batch_idx", flashc.flash_attn_with_kvcache, q, copy(kc), copy(vc), kn, vn,
                          cache_seqlens=4, cache_batch_idx=np.array([1, 1, 0], np.int32)),
                   raises(FlashcError, "cache_leftpad", call_and_check, flashc.flash_attn_with_kvcache, q, kc[:b], vc[:b],
                          cache_seqlens=lens, cache_leftpad=np.array([0, 7, 0], np.int32)))


def call_and_check(fn, *args, **kw):
    """fn(...), then flashc.check_errors(): an error that only the device can see (a pad checked against
    cache_seqlens in device memory) is recorded by the kernel and raised by the check."""
    r = fn(*args, **kw)
    flashc.check_errors()
    return r


@check("seqused_q: only the first seqused_q[i] rows, as the call on those rows alone; the others not written")
def check_seqused_q():
    rng = np.random.default_rng(88)
    lens_q, lens_k, used = [5, 0, 7], [9, 4, 12], [3, 0, 7]
    q = randn(rng, (sum(lens_q), 4, 64), np.float32)
    k, v = randn(rng, (sum(lens_k), 2, 64), np.float32), randn(rng, (sum(lens_k), 2, 64), np.float32)
    out = np.full((sum(lens_q), 4, 64), np.nan, np.float32)
    o, lse, _ = flashc.flash_attn_varlen_func(q, k, v, cu(lens_q), cu(lens_k), 7, 12, causal=True, return_attn_probs=True,
                                              seqused_q=np.array(used, np.int32), out=out)
    keep = np.concatenate([np.arange(c, c + u) for c, u in zip(cu(lens_q)[:-1], used)])
    w, wl, _ = flashc.flash_attn_varlen_func(q[keep], k, v, cu(used), cu(lens_k), 7, 12, causal=True,
                                             return_attn_probs=True)
    rest = np.setdiff1d(np.arange(sum(lens_q)), keep)
    ok = np.array_equal(o[keep], w) and np.array_equal(lse[:, keep], wl) and np.isnan(o[rest]).all()
    from flashc import flash_attn_interface as fa3
    o3 = fa3.flash_attn_varlen_func(q, k, v, cu(lens_q), cu(lens_k), 7, 12, seqused_q=np.array(used, np.int32),
                                    causal=True)
    o4 = flashc.flash_attn_varlen_func(q, k, v, cu(lens_q), cu(lens_k), 7, 12, causal=True, num_splits=3,
                                       seqused_q=np.array(used, np.int32))
    w4 = flashc.flash_attn_varlen_func(q[keep], k, v, cu(used), cu(lens_k), 7, 12, causal=True, num_splits=3)
    ok = ok and np.array_equal(o4[keep], w4)
    return combine((ok and np.array_equal(o3[keep], w), "used rows equal the call on them alone (also split in 3, "
                                                      "and through FA3's interface); the other rows keep their NaN"),
                   raises(FlashcError, "seqused_q", flashc.flash_attn_varlen_func, q, k, v, cu(lens_q), cu(lens_k), 7,
                          12, seqused_q=np.array([6, 0, 7], np.int32)))


@check("cache_batch_idx and cache_leftpad equal the calls on a gathered / shifted cache (append and rotary too)")
def check_batch_idx_leftpad():
    return batch_idx_leftpad()


@check("error: appending without cache_seqlens names cache_seqlens")
def check_err_seqlens():
    rng = np.random.default_rng(88)
    q, kc, vc = _qkv(rng, (2, 1, 2, 64), (2, 8, 2, 64))
    kn, vn = randn(rng, (2, 1, 2, 64), np.float16), randn(rng, (2, 1, 2, 64), np.float16)
    return raises(FlashcError, "cache_seqlens", flashc.flash_attn_with_kvcache, q, kc, vc, kn, vn)


@check("error: kvcache messages use its argument names (k_cache, k, cache_seqlens, block_table)")
def check_err_kvnames():
    rng = np.random.default_rng(91)
    q = randn(rng, (2, 1, 4, 64), np.float16)
    kc, vc = randn(rng, (2, 8, 2, 64), np.float16), randn(rng, (2, 8, 2, 64), np.float16)
    bad_kc = randn(rng, (2, 8, 3, 64), np.float16)
    kn, vn = randn(rng, (2, 1, 2, 32), np.float16), randn(rng, (2, 1, 2, 64), np.float16)
    pages = randn(rng, (5, 4, 2, 64), np.float16)
    return combine(raises(FlashcError, "k_cache", flashc.flash_attn_with_kvcache, q, bad_kc, bad_kc, cache_seqlens=4),
                   raises(FlashcError, "k", flashc.flash_attn_with_kvcache, q, kc, vc, kn, vn, cache_seqlens=2),
                   raises(FlashcError, "cache_seqlens", flashc.flash_attn_with_kvcache, q, kc, vc, cache_seqlens=[2, 9]),
                   raises(FlashcError, "block_table", flashc.flash_attn_with_kvcache, q, pages, pages,
                          block_table=[[0, 1], [2, 7]], cache_seqlens=6))


@check("error: failed append (rotary table too short) leaves the cache untouched")
def check_err_nowrite():
    rng = np.random.default_rng(89)
    q, kc, vc = _qkv(rng, (2, 1, 2, 64), (2, 16, 2, 64))
    kn, vn = randn(rng, (2, 1, 2, 64), np.float16), randn(rng, (2, 1, 2, 64), np.float16)
    cos, sin = rotary_tables(4, 64)
    k0, v0 = kc.copy(), vc.copy()
    ok = raises(FlashcError, "rotary_cos", flashc.flash_attn_with_kvcache, q, kc, vc, kn, vn, rotary_cos=cos,
                rotary_sin=sin, cache_seqlens=np.array([2, 9], np.int32))
    return combine(ok, (np.array_equal(kc, k0) and np.array_equal(vc, v0), "cache unchanged"))


@check("error: read-only k_cache with append names k_cache")
def check_err_readonly():
    rng = np.random.default_rng(90)
    q, kc, vc = _qkv(rng, (1, 1, 2, 64), (1, 8, 2, 64))
    kc.flags.writeable = False
    kn, vn = randn(rng, (1, 1, 2, 64), np.float16), randn(rng, (1, 1, 2, 64), np.float16)
    return raises(FlashcError, "k_cache", flashc.flash_attn_with_kvcache, q, kc, vc, kn, vn, cache_seqlens=2)


@check("error: set_num_threads(-1) raises FlashcError")
def check_err_threads():
    return raises(FlashcError, None, flashc.set_num_threads, -1)


# ---------------------------------------------------------------- binding hardening (issue 10)


def _dense_vs_ref(q, k, v, dtype, **kw):
    """flash_attn_func on (possibly odd-layout) q, k, v against the reference of their values."""
    out, lse, _ = flashc.flash_attn_func(q, k, v, return_attn_probs=True, **kw)
    seqs = [(q[i], k[i], v[i], {}) for i in range(q.shape[0])]
    r64, rlow = ref_pair(dtype, seqs, **_ref_kw(kw))
    return combine(compare_out(out, np.stack([r[0] for r in r64]), np.stack([r[0] for r in rlow])),
                   compare_lse(lse, np.stack([r[1] for r in r64])))


@check("big-endian inputs ('>f2', '>f4', '>i4') are read by value, not as little-endian bytes")
def check_big_endian():
    rng = np.random.default_rng(110)
    results = []
    for dtype in ("float16", "float32"):
        q, k, v = (randn(rng, s, dtype).astype(np.dtype(dtype).newbyteorder(">")) for s in
                   ((2, 9, 4, 64), (2, 30, 2, 64), (2, 30, 2, 64)))
        results.append(_dense_vs_ref(q, k, v, dtype, causal=True))
    q, k, v = _qkv(rng, (12, 2, 64), (20, 2, 64))
    cq, ck = cu([5, 7]).astype(">i4"), cu([8, 12]).astype(">i4")
    out = flashc.flash_attn_varlen_func(q.astype(">f2"), k.astype(">f2"), v, cq, ck, 7, 12)
    seqs = [(q[cq[i]:cq[i + 1]], k[ck[i]:ck[i + 1]], v[ck[i]:ck[i + 1]], {}) for i in range(2)]
    r64, rlow = ref_pair("float16", seqs)
    results.append(compare_out(out, np.concatenate([r[0] for r in r64]), np.concatenate([r[0] for r in rlow])))
    op = randn(rng, (2, 3, 4, 64), np.float32)
    lp = rng.standard_normal((2, 3, 4)).astype(">f4")
    mo, ml = flashc.merge_states(op.astype(">f4"), lp)
    ref_out, ref_lse = merge_ref(op, lp)
    results += [compare_out(mo, ref_out, ROUND["float32"](ref_out)), compare_lse(ml, ref_lse, 1e-5)]
    return combine(*results)


def _misaligned(a):
    """A copy of a whose data starts one byte past an aligned address (a view of a uint8 buffer)."""
    buf = np.zeros(a.nbytes + 1, np.uint8)
    m = buf[1:].view(a.dtype).reshape(a.shape)
    m[...] = a
    return m


@check("misaligned numpy inputs (odd byte offset) are copied, not rejected")
def check_misaligned_inputs():
    rng = np.random.default_rng(111)
    q, k, v = _qkv(rng, (2, 7, 4, 64), (2, 19, 4, 64))
    mq, mk, mv = _misaligned(q), _misaligned(k), _misaligned(v)
    if mq.flags.aligned:
        return None, "the odd-offset view is aligned on this platform"
    return _dense_vs_ref(mq, mk, mv, "float16", window_size=(4, 2))


def _append_args(rng, paged=False):
    """q, k_cache, v_cache, k, v of a small float16 append (dense (2, 16) or paged 8 pages of 4)."""
    q = randn(rng, (2, 1, 2, 64), np.float16)
    shape = (8, 4, 2, 64) if paged else (2, 16, 2, 64)
    kc, vc = randn(rng, shape, np.float16), randn(rng, shape, np.float16)
    kn, vn = randn(rng, (2, 1, 2, 64), np.float16), randn(rng, (2, 1, 2, 64), np.float16)
    return q, kc, vc, kn, vn


@check("in-place k_cache big-endian or misaligned: FlashcError naming k_cache, nothing written")
def check_inplace_layouts():
    rng = np.random.default_rng(112)
    q, kc, vc, kn, vn = _append_args(rng)
    be = kc.astype(">f2")
    be0, vc0 = be.copy(), vc.copy()
    r1 = raises(FlashcError, "k_cache", flashc.flash_attn_with_kvcache, q, be, vc, kn, vn, cache_seqlens=3)
    mis = _misaligned(kc)
    r2 = raises(FlashcError, "k_cache", flashc.flash_attn_with_kvcache, q, mis, vc, kn, vn, cache_seqlens=3)
    same = np.array_equal(be, be0) and np.array_equal(mis, kc) and np.array_equal(vc, vc0)
    return combine(r1, r2, (same, "caches unchanged"))


@check("ints that do not fit a C int raise FlashcError naming the argument (not wrapped by ctypes)")
def check_int_ranges():
    rng = np.random.default_rng(113)
    q, k, v = _qkv(rng, (1, 4, 2, 64), (1, 4, 2, 64))
    vq, vk, vv = _qkv(rng, (4, 2, 64), (4, 2, 64))
    cq = np.array([0, 4], np.int32)
    f = flashc.flash_attn_func
    return combine(raises(FlashcError, "window_size", f, q, k, v, window_size=(2**32, -1)),
                   raises(FlashcError, "window_size", f, q, k, v, window_size=(-1, -2**32 - 1)),
                   raises(FlashcError, "window_size", f, q, k, v, window_size=(1.5, -1)),
                   raises(FlashcError, "num_splits", f, q, k, v, num_splits=2**32 + 1),
                   raises(FlashcError, "max_seqlen_q", flashc.flash_attn_varlen_func, vq, vk, vv, cq, cq, 2**32 + 4, 4),
                   raises(FlashcError, "max_seqlen_k", flashc.flash_attn_varlen_func, vq, vk, vv, cq, cq, 4, 2**32 + 4),
                   raises(FlashcError, "cache_seqlens", flashc.flash_attn_with_kvcache, q, k, v,
                          cache_seqlens=2**32 + 2),
                   raises(FlashcError, "n", flashc.set_num_threads, 2**32 + 1))


@check("floats outside float32's range raise FlashcError naming the argument (not 0 or inf)")
def check_float_ranges():
    rng = np.random.default_rng(114)
    q, k, v = _qkv(rng, (1, 4, 2, 64), (1, 4, 2, 64))
    f = flashc.flash_attn_func
    ok_tiny = dense_case("float32", s_q=5, s_k=9, softcap=1e-30, seed=115)  # tiny but a normal float32: runs
    return combine(raises(FlashcError, "softcap", f, q, k, v, softcap=1e-50),
                   raises(FlashcError, "softcap", f, q, k, v, softcap=1e50),
                   raises(FlashcError, "softmax_scale", f, q, k, v, softmax_scale=1e-50),
                   raises(FlashcError, "softmax_scale", f, q, k, v, softmax_scale=-1e40),
                   raises(FlashcError, "softcap", f, q, k, v, softcap="5"),
                   ok_tiny)


@check("softmax_scale=0.0 is flash_attn's: every score 0, a uniform average (not the default scale)")
def check_zero_scale():
    rng = np.random.default_rng(117)
    q, k, v = (randn(rng, s, np.float32) for s in ((1, 3, 2, 64), (1, 6, 2, 64), (1, 6, 2, 64)))
    out, lse, _ = flashc.flash_attn_func(q, k, v, softmax_scale=0.0, causal=True, return_attn_probs=True)
    want = np.stack([v[0, :4 + r].mean(0) for r in range(3)])  # causal: row r sees keys 0 .. 3 + r
    want_lse = np.log(4 + np.arange(3, dtype=np.float64))
    err, lerr = np.abs(out[0] - want).max(), np.abs(lse[0] - want_lse[None, :]).max()
    return err < 1e-5 and lerr < 1e-5, "out err %.2e, lse err %.2e (lse = log(visible keys))" % (err, lerr)


@check("FA3's interface (flashc.flash_attn_interface): argument order, return values, equal to the FA2-style calls")
def check_fa3_interface():
    from flashc import flash_attn_interface as fa3
    rng = np.random.default_rng(118)
    q, k, v = (randn(rng, s, np.float16) for s in ((2, 5, 4, 64), (2, 9, 2, 64), (2, 9, 2, 64)))
    bad = []
    o = fa3.flash_attn_func(q, k, v, None, True)
    o2, l2 = fa3.flash_attn_func(q, k, v, causal=True, window_size=(3, 0), return_attn_probs=True)
    w2 = flashc.flash_attn_func(q, k, v, causal=True, window_size=(3, 0), return_attn_probs=True)
    bad += [] if np.array_equal(o, flashc.flash_attn_func(q, k, v, causal=True)) else ["func"]
    bad += [] if np.array_equal(o2, w2[0]) and np.array_equal(l2, w2[1]) else ["func lse"]
    cq, ck = cu([2, 3]), cu([4, 5])
    qv, kv, vv = q[0, :5], k[0], v[0]
    o, l = fa3.flash_attn_varlen_func(qv, kv, vv, cq, ck, 3, 5, None, None, 0.5, return_attn_probs=True)
    w = flashc.flash_attn_varlen_func(qv, kv, vv, cq, ck, 3, 5, softmax_scale=0.5, return_attn_probs=True)
    bad += [] if np.array_equal(o, w[0]) and np.array_equal(l, w[1]) else ["varlen"]
    kc, vc = randn(rng, (2, 16, 2, 64), np.float16), randn(rng, (2, 16, 2, 64), np.float16)
    table = np.arange(4, dtype=np.int32).reshape(2, 2)
    pk, pv = kc.reshape(4, 8, 2, 64), vc.reshape(4, 8, 2, 64)
    o, l = fa3.flash_attn_with_kvcache(q[:, :1], pk, pv, cache_seqlens=11, page_table=table, causal=True,
                                       return_softmax_lse=True)
    w = flashc.flash_attn_with_kvcache(q[:, :1], pk, pv, cache_seqlens=11, block_table=table, causal=True,
                                       return_softmax_lse=True)
    bad += [] if np.array_equal(o, w[0]) and np.array_equal(l, w[1]) else ["kvcache page_table"]
    sk = np.array([0.3, -1.0, 2.0, 0.0], np.float32)
    bad += [] if np.array_equal(fa3.flash_attn_func(q, k, v, s_aux=sk), flashc.flash_attn_func(q, k, v, sinks=sk)) \
        else ["s_aux (vLLM's sinks)"]
    return combine((not bad, "differ: %s" % bad if bad else "func, varlen, kvcache, s_aux equal"),
                   raises(FlashcError, "q_descale", fa3.flash_attn_func, q, k, v, q_descale=np.ones(1)))  # fp16 q


@check("FA4's interface (flashc.cute): (out, lse) tuples, None windows, learnable_sink, dense q over a paged cache")
def check_fa4_interface():
    import flashc.cute as fa4
    rng = np.random.default_rng(119)
    q, k, v = (randn(rng, s, np.float32) for s in ((2, 5, 4, 64), (2, 9, 2, 64), (2, 9, 2, 64)))
    sink = rng.standard_normal(4).astype(np.float32)
    bad = []
    o, l = fa4.flash_attn_func(q, k, v, causal=True, learnable_sink=sink)
    w = flashc.flash_attn_func(q, k, v, causal=True, sinks=sink)
    bad += [] if l is None and np.array_equal(o, w) else ["func"]
    o, l = fa4.flash_attn_func(q, k, v, window_size=(None, 2), return_lse=True)
    w = flashc.flash_attn_func(q, k, v, window_size=(-1, 2), return_attn_probs=True)
    bad += [] if np.array_equal(o, w[0]) and np.array_equal(l, w[1]) else ["func window lse"]
    table, lens = np.array([[1, 0], [3, 2]], np.int32), np.array([7, 12], np.int32)
    pk, pv = randn(rng, (4, 8, 2, 64), np.float32), randn(rng, (4, 8, 2, 64), np.float32)
    o, l = fa4.flash_attn_varlen_func(q[:, :1], pk, pv, seqused_k=lens, page_table=table, return_lse=True)
    w = flashc.flash_attn_with_kvcache(q[:, :1], pk, pv, cache_seqlens=lens, block_table=table, return_softmax_lse=True)
    bad += [] if np.array_equal(o, w[0]) and np.array_equal(l, w[1]) else ["dense q paged"]
    cq = cu([2, 3])
    o, l = fa4.flash_attn_varlen_func(q[0], pk, pv, cu_seqlens_q=cq, seqused_k=lens, page_table=table, causal=True)
    w = flashc.flash_attn_varlen_func(q[0], pk, pv, cq, None, 5, 16, causal=True, block_table=table, seqused_k=lens)
    bad += [] if l is None and np.array_equal(o, w) else ["varlen q paged"]
    return combine((not bad, "differ: %s" % bad if bad else "4 calls equal"),
                   raises(NotImplementedError, "score_mod", fa4.flash_attn_varlen_func, q[0], k[0], v[0], cq, cq,
                          score_mod=lambda *a: a))


@check("merge_states takes fc_attn_fwd's lse layouts ((n, h, rows), (n, b, h, s)) and 5-D partials; flash_attn_combine")
def check_merge_layouts():
    rng = np.random.default_rng(120)
    n, b, s, h, d = 3, 2, 5, 4, 64
    op = randn(rng, (n, b, s, h, d), np.float32)
    lp = rng.standard_normal((n, b, s, h)).astype(np.float32)
    want_o, want_l = flashc.merge_states(op.reshape(n, b * s, h, d), lp.reshape(n, b * s, h))
    bad = []
    o, l = flashc.merge_states(op, lp)  # 5-D, (n, b, s, h)
    bad += [] if np.array_equal(o, want_o.reshape(b, s, h, d)) and np.array_equal(l, want_l.reshape(b, s, h)) else ["5d"]
    o, l = flashc.merge_states(op, np.ascontiguousarray(lp.transpose(0, 1, 3, 2)))  # (n, b, h, s): fc_attn_fwd's
    ok = np.array_equal(o, want_o.reshape(b, s, h, d)) and np.array_equal(l, want_l.reshape(b, s, h).transpose(0, 2, 1))
    bad += [] if ok else ["(n, b, h, s)"]
    op4, lp4 = op.reshape(n, b * s, h, d), np.ascontiguousarray(lp.reshape(n, b * s, h).transpose(0, 2, 1))
    o, l = flashc.merge_states(op4, lp4)  # (n, h, rows): fc_attn_fwd's varlen lse
    bad += [] if np.array_equal(o, want_o) and np.array_equal(l, want_l.T) else ["(n, h, rows)"]
    from flashc.flash_attn_interface import flash_attn_combine
    out = np.empty((b, s, h, d), np.float32)
    o, l = flash_attn_combine(op, lp, out=out)
    bad += [] if o is out and np.array_equal(o, want_o.reshape(b, s, h, d)) else ["combine out="]
    sq = randn(rng, (n, 4, 4, d), np.float32)  # rows == h: both layouts fit; lse_layout decides
    lsq = rng.standard_normal((n, 4, 4)).astype(np.float32)
    a, _ = flashc.merge_states(sq, lsq)
    t, _ = flashc.merge_states(sq, np.ascontiguousarray(lsq.transpose(0, 2, 1)), lse_layout="heads_rows")
    bad += [] if np.array_equal(a, t) else ["lse_layout"]
    return combine((not bad, "differ: %s" % bad if bad else "5 layouts equal"),
                   raises(FlashcError, "lse_partial", flashc.merge_states, op, lp[:, :, :2]),
                   raises(FlashcError, "lse_layout", flashc.merge_states, sq, lsq, lse_layout="x"))


@check("DLPack: objects with __dlpack__ are taken as arrays (sharing memory: an append writes through)")
def check_dlpack():
    class Producer:  # a foreign array library's tensor, seen only through the DLPack protocol
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    if not hasattr(np, "from_dlpack"):
        return None, "numpy without from_dlpack"
    rng = np.random.default_rng(121)
    q, kc, vc = randn(rng, (1, 1, 2, 64), np.float32), randn(rng, (1, 8, 2, 64), np.float32), randn(rng, (1, 8, 2, 64), np.float32)
    kn, vn = randn(rng, (1, 1, 2, 64), np.float32), randn(rng, (1, 1, 2, 64), np.float32)
    kc2, vc2 = kc.copy(), vc.copy()
    got = flashc.flash_attn_with_kvcache(Producer(q), Producer(kc), Producer(vc), Producer(kn), Producer(vn),
                                         cache_seqlens=Producer(np.array([3], np.int32)))
    want = flashc.flash_attn_with_kvcache(q, kc2, vc2, kn, vn, cache_seqlens=3)
    ok = np.array_equal(got, want) and np.array_equal(kc, kc2) and np.array_equal(vc, vc2)
    return combine((ok, "out and the cache written through DLPack equal the numpy call"),
                   raises(FlashcError, "q", flashc.flash_attn_func, object(), kc, vc))


@check("merge_states out_dtype: numpy dtypes and strings; a bad one names out_dtype")
def check_merge_out_dtype():
    rng = np.random.default_rng(116)
    op, lp = randn(rng, (2, 3, 4, 64), np.float32), rng.standard_normal((2, 3, 4)).astype(np.float32)
    ref_out, _ = merge_ref(op, lp)
    results = []
    for spec in (np.float16, np.dtype("float16"), "float16", ">f2", "torch.float16"):
        out, _ = flashc.merge_states(op, lp, out_dtype=spec)
        results.append((out.dtype == np.float16 and out.dtype.isnative, "%r -> %s" % (spec, out.dtype)))
        results.append(compare_out(out, ref_out, ROUND["float16"](ref_out)))
    try:
        bf16 = np_dtype("bfloat16")
        out, _ = flashc.merge_states(op, lp, out_dtype="bfloat16")
        results.append((out.dtype == bf16, "'bfloat16' -> %s" % out.dtype))
        results.append(compare_out(out, ref_out, round_bf16(ref_out)))
    except ImportError:
        pass
    results.append(raises(FlashcError, "out_dtype", flashc.merge_states, op, lp, out_dtype=np.float64))
    results.append(raises(FlashcError, "out_dtype", flashc.merge_states, op, lp, out_dtype="int8"))
    return combine(*results)


@check("flashc.h states the code's limits (num_splits <= FC_MAX_SPLITS, rotary_sin's strides); the binding copies "
       "rotary tables of different strides")
def check_header_limits():
    with open(os.path.join(ROOT, "src", "internal.h")) as f:
        max_splits = int(re.search(r"#define FC_MAX_SPLITS (\d+)", f.read()).group(1))
    with open(os.path.join(ROOT, "include", "flashc.h")) as f:
        header = f.read()
    splits_doc = re.search(r"int num_splits;\s*/\*(.*?)\*/", header).group(1)
    sin_doc = re.search(r"fc_tensor rotary_sin;\s*/\*(.*?)\*/", header).group(1)
    rng = np.random.default_rng(117)
    q, k, v = _qkv(rng, (1, 4, 2, 64), (1, 4, 2, 64))
    q2, kc, vc, kn, vn = _append_args(rng)
    kc2, vc2 = kc.copy(), vc.copy()
    cos, sin = rotary_tables(16, 32)
    wide = np.zeros((16, 48), np.float32)
    wide[:, :16] = sin
    kv = flashc.flash_attn_with_kvcache
    strided = kv(q2, kc, vc, kn, vn, rotary_cos=cos, rotary_sin=wide[:, :16], cache_seqlens=3, causal=True)
    packed = kv(q2, kc2, vc2, kn, vn, rotary_cos=cos, rotary_sin=sin, cache_seqlens=3, causal=True)
    same = np.array_equal(strided, packed) and np.array_equal(kc, kc2) and np.array_equal(vc, vc2)
    return combine((str(max_splits) in splits_doc, "num_splits comment:%s" % splits_doc),
                   ("stride" in sin_doc, "rotary_sin comment:%s" % sin_doc),
                   raises(FlashcError, "num_splits", flashc.flash_attn_func, q, k, v, num_splits=max_splits + 1),
                   (flashc.flash_attn_func(q, k, v, num_splits=max_splits).shape == q.shape, "num_splits max runs"),
                   (same, "rotary_sin of row stride 48 gives what the packed table gives"))


@check("check_errors(): exposed in _lib, returns on the CPU; set_check_errors toggles; FLASHC_CHECK_ERRORS")
def check_check_errors_api():
    L = importlib.import_module("flashc._lib").lib()
    proto = L.fc_check_errors.restype is ctypes.c_int and L.fc_check_errors.argtypes == [ctypes.c_void_p]
    none = flashc.check_errors() is None and L.fc_check_errors(None) == 0
    first = flashc.get_check_errors()
    try:
        before = flashc.set_check_errors(True)
        on = flashc.get_check_errors()
        out = dense_case("float16", s_q=3, s_k=7, seed=118)  # a CPU call with the switch on
        err = raises(FlashcError, "k", flashc.flash_attn_func, *_qkv(np.random.default_rng(119), (1, 4, 8, 64),
                                                                     (1, 4, 3, 64)))
        back = flashc.set_check_errors(False)
        off = not flashc.get_check_errors()
    finally:
        flashc.set_check_errors(first)
    envs = []
    for value, want in (("1", "True"), ("0", "False"), ("", "False")):
        env = dict(os.environ, FLASHC_CHECK_ERRORS=value, PYTHONPATH=os.path.join(ROOT, "python"))
        got = subprocess.run([sys.executable, "-c", "import flashc; print(flashc.get_check_errors())"], env=env,
                             capture_output=True, text=True).stdout.strip()
        envs.append((got == want, "FLASHC_CHECK_ERRORS=%r -> %s" % (value, got)))
    return combine((proto, "fc_check_errors prototype"), (none, "check_errors() on CPU returns None"),
                   (before == first and on and back is True and off, "set/get_check_errors"), out, err, *envs)


class _FakeErrorLib:
    """libflashc with fc_check_errors reporting a device-side error (no GPU here to make one)."""

    def __init__(self, real, message):
        self.real, self.message = real, message

    def __getattr__(self, name):
        return getattr(self.real, name)

    def fc_check_errors(self, stream):
        return 1  # FC_ERR_INVALID_ARGUMENT

    def fc_last_error(self):
        return self.message


@check("check_errors names the Python argument of the device record (block_table for page_table)")
def check_check_errors_names():
    _call, _lib = importlib.import_module("flashc._call"), importlib.import_module("flashc._lib")
    real = _lib.lib()
    results = []
    try:
        _lib._LIB = _FakeErrorLib(real, b"page_table: sequence 0 needs 257 keys (seqused_k 257 + 0 new)")
        _call.note_launch(7, {"q": "q", "page_table": "block_table", "seqused_k": "cache_seqlens", "k_new": "k"})
        _call.note_launch(7, {"q": "q", "page_table": "block_table", "seqused_k": "cu_seqlens_k"})
        results.append(raises(FlashcError, "block_table", _call.check_device, 7, None))
        _lib._LIB = _FakeErrorLib(real, b"k_new: sequence 1 appends past the cache")
        _call.note_launch(7, {"k_new": "k", "seqused_k": "cache_seqlens"})
        results.append(raises(FlashcError, "k", _call.check_device, 7, None))
        _lib._LIB = _FakeErrorLib(real, b"seqused_k: [0] = 99 exceeds the 16 keys the layout holds")
        _call.note_launch(7, {"seqused_k": "cache_seqlens"})
        _call.note_launch(7, {"seqused_k": "cu_seqlens_k"})  # two calls disagree: the C name stays
        results.append(raises(FlashcError, "seqused_k", _call.check_device, 7, None))
        results.append(raises(FlashcError, "seqused_k", _call.check_device, 7, None))  # names were forgotten
        names = {"seqused_k": "cache_seqlens"}  # one plan's names, noted on every run: again after a check
        _call.note_launch(7, names)
        results.append(raises(FlashcError, "cache_seqlens", _call.check_device, 7, None))
        _call.note_launch(7, names)
        _call.note_launch(7, names)
        results.append(raises(FlashcError, "cache_seqlens", _call.check_device, 7, None))
    finally:
        _lib._LIB = real
    return combine(*results)


@check("paged cache overflow on the host names block_table (flash_attn's RuntimeError), nothing written")
def check_paged_capacity():
    rng = np.random.default_rng(120)
    q, kc, vc, kn, vn = _append_args(rng, paged=True)
    table = np.array([[0, 1], [2, 3]], np.int32)  # 2 pages of 4: 8 keys per sequence
    k0, v0 = kc.copy(), vc.copy()
    kv = flashc.flash_attn_with_kvcache
    results = [raises(RuntimeError, "block_table", kv, q, kc, vc, kn, vn, cache_seqlens=[3, 8], block_table=table),
               raises(FlashcError, "block_table", kv, q, kc, vc, kn, vn, cache_seqlens=8, block_table=table.tolist()),
               raises(FlashcError, "block_table", kv, q, kc, vc, cache_seqlens=np.array([9, 1]), block_table=table),
               raises(FlashcError, "block_table", kv, q, kc, vc, kn, vn, cache_seqlens=[3, 4],
                      block_table=np.array([[0, 1], [2, 8]], np.int32)),
               raises(FlashcError, "cache_seqlens", kv, q, kc, vc, kn, vn, cache_seqlens=[-1, 2], block_table=table)]
    results.append((np.array_equal(kc, k0) and np.array_equal(vc, v0), "cache unchanged"))
    q2, dk, dv, dkn, dvn = _append_args(rng)  # dense (2, 16): 16 keys
    results.append(raises(FlashcError, "cache_seqlens", kv, q2, dk, dv, dkn, dvn, cache_seqlens=[3, 16]))
    results.append(raises(FlashcError, "cache_seqlens", kv, q2, dk, dv, cache_seqlens=[17, 3]))
    vq = randn(rng, (3, 2, 64), np.float16)
    vf = flashc.flash_attn_varlen_func
    cq = np.array([0, 1, 3], np.int32)
    results.append(raises(FlashcError, "block_table", vf, vq, kc, vc, cq, [0, 4, 13], 2, 9, block_table=table))
    results.append(raises(FlashcError, "block_table", vf, vq, kc, vc, cq, [0, 4, 8], 2, 4, block_table=table,
                          seqused_k=np.array([9, 2])))
    fits = kv(q, kc, vc, kn, vn, cache_seqlens=[3, 7], block_table=table)  # 8 keys each: fits exactly
    return combine(*results, (fits.shape == (2, 1, 2, 64), "an exact fit runs"))


# ---------------------------------------------------------------- plans (flashc.plan) and the plan cache


def _layers(rng, n, shape, dtype="float16"):
    return [randn(rng, shape, dtype) for _ in range(n)]


@check("plan: runs over several layers equal the functions' results bit for bit (func, varlen, kvcache)")
def check_plan_runs():
    rng = np.random.default_rng(7)
    bad = []
    qs, ks, vs = _layers(rng, 3, (2, 5, 4, 64)), _layers(rng, 3, (2, 9, 2, 64)), _layers(rng, 3, (2, 9, 2, 64))
    p = flashc.plan(flashc.flash_attn_func, qs[0], ks[0], vs[0], causal=True, return_attn_probs=True)
    for i in range(3):
        got, want = p.run(qs[i], ks[i], vs[i]), flashc.flash_attn_func(qs[i], ks[i], vs[i], causal=True,
                                                                       return_attn_probs=True)
        bad += ["func layer %d" % i] if not (np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])) else []
    cq, ck = cu([3, 4]), cu([5, 8])
    qs, ks, vs = _layers(rng, 2, (7, 4, 64)), _layers(rng, 2, (13, 2, 64)), _layers(rng, 2, (13, 2, 64))
    p = flashc.plan(flashc.flash_attn_varlen_func, qs[0], ks[0], vs[0], cq, ck, 4, 8, softcap=5.0)
    for i in range(2):
        got = p.run(qs[i], ks[i], vs[i])
        bad += ["varlen layer %d" % i] if not np.array_equal(
            got, flashc.flash_attn_varlen_func(qs[i], ks[i], vs[i], cq, ck, 4, 8, softcap=5.0)) else []
    lens = np.array([3, 6], np.int32)
    caches = [(randn(rng, (2, 12, 2, 64), "float16"), randn(rng, (2, 12, 2, 64), "float16")) for _ in range(2)]
    twins = [(kc.copy(), vc.copy()) for kc, vc in caches]
    q, kn, vn = randn(rng, (2, 1, 4, 64), "float16"), randn(rng, (2, 1, 2, 64), "float16"), randn(rng, (2, 1, 2, 64), "float16")
    p = flashc.plan(flashc.flash_attn_with_kvcache, q, *caches[0], kn, vn, cache_seqlens=lens, causal=True)
    for i in range(2):
        got = p.run(q, caches[i][0], caches[i][1], kn, vn)
        want = flashc.flash_attn_with_kvcache(q, twins[i][0], twins[i][1], kn, vn, cache_seqlens=lens, causal=True)
        same_cache = np.array_equal(caches[i][0], twins[i][0]) and np.array_equal(caches[i][1], twins[i][1])
        bad += ["kvcache layer %d" % i] if not (np.array_equal(got, want) and same_cache) else []
    out = np.full((2, 1, 4, 64), np.nan, np.float16)
    got = p.run(q, caches[0][0], caches[0][1], kn, vn, out=out)
    bad += [] if got is out and np.array_equal(out, p.run(q, *caches[0], kn, vn)) else ["out="]
    return not bad, "differ: %s" % bad if bad else "3 + 2 + 2 layers and out= equal"


@check("plan: a run with another layout, a missing or extra array, or a bad fn raises naming it")
def check_plan_errors():
    rng = np.random.default_rng(8)
    q, k, v = randn(rng, (1, 4, 2, 64), "float16"), randn(rng, (1, 6, 2, 64), "float16"), randn(rng, (1, 6, 2, 64), "float16")
    p = flashc.plan(flashc.flash_attn_func, q, k, v)
    lens = np.array([2], np.int32)
    pk = flashc.plan(flashc.flash_attn_with_kvcache, q, k, v, cache_seqlens=lens)
    return combine(
        raises(FlashcError, "q", p.run, randn(rng, (1, 5, 2, 64), "float16"), k, v),
        raises(FlashcError, "k", p.run, q, k.astype(np.float32), v),
        raises(FlashcError, "out", p.run, q, k, v, out=np.empty((1, 4, 2, 32), np.float16)),
        raises(FlashcError, "lse", p.run, q, k, v, lse=np.empty((1, 2, 4), np.float32)),
        raises(FlashcError, "run", pk.run, q, k, v, randn(rng, (1, 1, 2, 64), "float16"), randn(rng, (1, 1, 2, 64), "float16")),
        raises(FlashcError, "run", p.run, q, k, v, v),
        raises(FlashcError, "plan", flashc.plan, flashc.merge_states, q, k),
        raises(TypeError, "flash_attn_func", flashc.plan, flashc.flash_attn_func, q, k, v, bogus=1),
        (np.array_equal(p.run(np.ascontiguousarray(q.swapaxes(2, 3)).swapaxes(2, 3), k, v), flashc.flash_attn_func(q, k, v)),
         "a q whose last dim is strided is copied, as the functions copy it"),
        raises(FlashcError, "q", p.run, np.ascontiguousarray(np.concatenate([q, q], 3))[..., :64], k, v))


@check("plan cache: cached calls follow new values of an int cache_seqlens and of arrays updated in place")
def check_plan_cache_values():
    rng = np.random.default_rng(9)
    q, kc, vc = randn(rng, (2, 1, 4, 64), "float32"), randn(rng, (2, 20, 2, 64), "float32"), randn(rng, (2, 20, 2, 64), "float32")
    lens = np.zeros(2, np.int32)
    bad = []
    for n in (5, 9, 5, 20, 1):
        lens[:] = n  # the same array, new contents
        a = flashc.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=n)
        b = flashc.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens)
        c = flashc.flash_attn_with_kvcache(q, kc[:, :n].copy(), vc[:, :n].copy())
        if not (np.array_equal(a, b) and np.allclose(a, c, atol=1e-5)):
            bad.append(n)
    return combine((not bad, "cache_seqlens values that differ: %s" % bad if bad else "5 values agree"),
                   raises(FlashcError, "cache_seqlens", flashc.flash_attn_with_kvcache, q, kc, vc, cache_seqlens=21))


# ---------------------------------------------------------------- torch (CPU tensors), when importable


def torch_checks(torch, device):
    """A few checks with torch tensors on device ('cpu' or 'cuda'): dtypes, in-place cache, outputs' device."""
    def tt(a, dtype):
        return torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(device=device, dtype=dtype)

    def same_kind(out, dt):
        return isinstance(out, torch.Tensor) and out.dtype == dt and out.device.type == device

    def dense(dt_name, causal):
        rng = np.random.default_rng(100)
        b, s_q, s_k, h, h_k, d = 2, 17, 40, 8, 2, 64
        dt = getattr(torch, dt_name)
        q, k, v = (tt(rng.standard_normal(s), dt) for s in ((b, s_q, h, d), (b, s_k, h_k, d), (b, s_k, h_k, d)))
        k_nc = k.transpose(-1, -2).contiguous().transpose(-1, -2)  # last-dim stride != 1
        out, lse, _ = flashc.flash_attn_func(q, k_nc, v, causal=causal, return_attn_probs=True)
        qn, kn, vn = (to64(x) for x in (q, k, v))
        r64, rlow = ref_pair(dt_name, [(qn[i], kn[i], vn[i], {}) for i in range(b)], causal=causal)
        return combine((same_kind(out, dt) and same_kind(lse, torch.float32), "types"),
                       compare_out(out, np.stack([r[0] for r in r64]), np.stack([r[0] for r in rlow])),
                       compare_lse(lse, np.stack([r[1] for r in r64])))

    def varlen(dt_name, page_size):
        rng = np.random.default_rng(101)
        ql, kl, h, d, dt = [3, 0, 9], [10, 4, 20], 4, 64, getattr(torch, dt_name)
        q = tt(rng.standard_normal((sum(ql), h, d)), dt)
        ks = [rng.standard_normal((n, h, d)).astype(np.float32) for n in kl]
        vs = [rng.standard_normal((n, h, d)).astype(np.float32) for n in kl]
        cq, ck = torch.tensor(cu(ql)), torch.tensor(cu(kl), dtype=torch.int64)
        if page_size is None:
            k, v, extra = tt(np.concatenate(ks), dt), tt(np.concatenate(vs), dt), {}
        else:
            kp, table = paginate(rng, ks, page_size, np.float32)
            vp = _repage(randn(rng, kp.shape, np.float32), table, vs)
            k, v, extra = tt(kp, dt), tt(vp, dt), {"block_table": table.tolist()}
        out = flashc.flash_attn_varlen_func(q, k, v, cq.to(device), ck, max(ql), max(kl), causal=True, **extra)
        rnd = ROUND[dt_name]
        qn, cqn = to64(q), cu(ql)
        seqs = [(qn[cqn[i]:cqn[i + 1]], rnd(ks[i]), rnd(vs[i]), {}) for i in range(3)]
        r64, rlow = ref_pair(dt_name, seqs, causal=True)
        return combine((same_kind(out, dt), "types"),
                       compare_out(out, np.concatenate([r[0] for r in r64]), np.concatenate([r[0] for r in rlow])))

    def kvcache_bf16():
        rng = np.random.default_rng(102)
        b, cap, h, d, seqlens = 2, 32, 4, 64, [6, 20]
        q = tt(rng.standard_normal((b, 1, h, d)), torch.bfloat16)
        kc, vc = (tt(rng.standard_normal((b, cap, h, d)), torch.bfloat16) for _ in range(2))
        kn, vn = (tt(rng.standard_normal((b, 1, h, d)), torch.bfloat16) for _ in range(2))
        k0, v0 = kc.clone(), vc.clone()
        out, lse = flashc.flash_attn_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=torch.tensor(seqlens, dtype=torch.int32),
                                                  causal=True, return_softmax_lse=True)
        seqs, ok = [], True
        for i, n0 in enumerate(seqlens):
            ok = ok and torch.equal(kc[i, n0], kn[i, 0]) and torch.equal(vc[i, n0], vn[i, 0])
            ok = ok and torch.equal(kc[i, :n0], k0[i, :n0]) and torch.equal(kc[i, n0 + 1:], k0[i, n0 + 1:])
            ok = ok and torch.equal(vc[i, :n0], v0[i, :n0]) and torch.equal(vc[i, n0 + 1:], v0[i, n0 + 1:])
            seqs.append((to64(q[i]), to64(kc[i, :n0 + 1]), to64(vc[i, :n0 + 1]), {}))
        r64, rlow = ref_pair("bfloat16", seqs, causal=True)
        return combine((ok, "cache updated in place"), (same_kind(out, torch.bfloat16), "types"),
                       compare_out(out, np.stack([r[0] for r in r64]), np.stack([r[0] for r in rlow])),
                       compare_lse(lse, np.stack([r[1] for r in r64])))

    def compiled():
        """torch.compile(fullgraph=True) traces the three functions (their custom ops; aot_eager runs the
        fake implementations and functionalises the cache append); results equal eager bit for bit."""
        flashc.register_torch_ops()
        rng = np.random.default_rng(103)
        b, h, d = 2, 4, 64
        q = tt(rng.standard_normal((b, 3, h, d)), torch.bfloat16)
        k, v = (tt(rng.standard_normal((b, 9, 2, d)), torch.bfloat16) for _ in range(2))
        kc, vc = (tt(rng.standard_normal((b, 16, 2, d)), torch.bfloat16) for _ in range(2))
        kn, vn = (tt(rng.standard_normal((b, 1, 2, d)), torch.bfloat16) for _ in range(2))
        lens = torch.tensor([4, 11], dtype=torch.int32, device=device)
        cq = torch.tensor([0, 3, 6], dtype=torch.int32, device=device)
        ck = torch.tensor([0, 9, 18], dtype=torch.int32, device=device)

        def model(q, k, v, kc, vc, kn, vn, lens):
            a = flashc.flash_attn_func(q, k, v, causal=True)
            o, lse, _ = flashc.flash_attn_varlen_func(q.reshape(b * 3, h, d), k.reshape(b * 9, 2, d),
                                                      v.reshape(b * 9, 2, d), cq, ck, 3, 9, return_attn_probs=True)
            c, lc = flashc.flash_attn_with_kvcache(q[:, :1], kc, vc, kn, vn, cache_seqlens=lens,
                                                   return_softmax_lse=True)
            e = flashc.flash_attn_with_kvcache(q[:, :1], kc, vc, cache_seqlens=5)
            return a * 2, o, lse, c, lc, e

        kc2, vc2 = kc.clone(), vc.clone()
        got = torch.compile(model, fullgraph=True, backend="aot_eager")(q, k, v, kc, vc, kn, vn, lens)
        want = model(q, k, v, kc2, vc2, kn, vn, lens)
        same = all(torch.equal(x, y) for x, y in zip(got, want))
        return combine((same, "6 results equal eager"), (torch.equal(kc, kc2) and torch.equal(vc, vc2),
                                                          "the compiled append wrote the cache as eager did"))

    def opcheck():
        """torch.library.opcheck: schema, fake implementation and dispatch of each custom op."""
        flashc.register_torch_ops()
        rng = np.random.default_rng(104)
        q = tt(rng.standard_normal((1, 2, 2, 64)), torch.float16)
        k, v = (tt(rng.standard_normal((1, 5, 1, 64)), torch.float16) for _ in range(2))
        kc, vc = (tt(rng.standard_normal((1, 8, 1, 64)), torch.float16) for _ in range(2))
        kn, vn = (tt(rng.standard_normal((1, 1, 1, 64)), torch.float16) for _ in range(2))
        lens = torch.tensor([3], dtype=torch.int32, device=device)
        cu2 = lambda n: torch.tensor([0, n], dtype=torch.int32, device=device)  # noqa: E731
        ops = torch.ops.flashc
        cases = [
            (ops.flash_attn_func, (q, k, v, None, True, -1, -1, 0.0, None, None, 0, None, None, None)),
            (ops.flash_attn_varlen_func, (q[0], k[0], v[0], cu2(2), cu2(5), 2, 5, 0.5, False, 3, 0, 0.0, None, None,
                                          None, None, 0, None)),
            (ops.flash_attn_with_kvcache, (q[:, :1], kc, vc, kn, vn, None, None, lens, None, None, True, -1, -1,
                                           0.0, True, None, 0, None, None, None, None, None)),
        ]
        bad = []
        for op, args in cases:
            try:
                torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))
            except Exception as e:  # noqa: BLE001
                bad.append("%s: %s" % (op, str(e).splitlines()[0][:200]))
        return not bad, "; ".join(bad) or "3 ops pass opcheck (schema, fake tensor, aot dispatch)"

    def cuda_graph():
        """A decode step with append captured by torch.cuda.graph replays with new tokens and lengths."""
        rng = np.random.default_rng(105)
        b, cap, h, d = 2, 64, 4, 128
        q, kn, vn = (tt(rng.standard_normal((b, 1, n, d)), torch.bfloat16) for n in (h, 2, 2))
        kc, vc = (tt(rng.standard_normal((b, cap, 2, d)), torch.bfloat16) for _ in range(2))
        lens = torch.tensor([5, 17], dtype=torch.int32, device=device)
        step = lambda: flashc.flash_attn_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=lens, causal=True)  # noqa: E731
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm up outside the capture (plans, allocations)
            step()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        bad = []
        for t, n in enumerate(([9, 30], [40, 2], [63, 0])):
            for x in (q, kn, vn):
                x.copy_(tt(rng.standard_normal(tuple(x.shape)), torch.bfloat16))
            lens.copy_(torch.tensor(n, dtype=torch.int32))
            kc2, vc2 = kc.clone(), vc.clone()
            graph.replay()
            want = flashc.flash_attn_with_kvcache(q, kc2, vc2, kn, vn, cache_seqlens=lens, causal=True)
            torch.cuda.synchronize()
            if not (torch.equal(out, want) and torch.equal(kc, kc2) and torch.equal(vc, vc2)):
                bad.append(t)
        return not bad, "replays that differ from eager: %s" % bad if bad else "3 replays equal eager (out, cache)"

    def merge_bf16():
        rng = np.random.default_rng(103)
        op = tt(rng.standard_normal((2, 6, 4, 64)), torch.bfloat16)
        lp = tt(rng.standard_normal((2, 6, 4)), torch.float32)
        out, lse = flashc.merge_states(op, lp)
        ref_out, ref_lse = merge_ref(to64(op), to64(lp))
        return combine((same_kind(out, torch.bfloat16), "types"),
                       compare_out(out, ref_out, round_bf16(ref_out)), compare_lse(lse, ref_lse, 1e-5))

    def merge_out_dtype():
        rng = np.random.default_rng(104)
        op = tt(rng.standard_normal((2, 6, 4, 64)), torch.float16)
        lp = tt(rng.standard_normal((2, 6, 4)), torch.float32)
        ref_out, _ = merge_ref(to64(op), to64(lp))
        results = []
        bf16, fp16 = (torch.bfloat16, round_bf16), (torch.float16, ROUND["float16"])
        for spec, (want, rnd) in ((torch.bfloat16, bf16), ("torch.bfloat16", bf16), (np.float16, fp16), ("float16", fp16)):
            out, _ = flashc.merge_states(op, lp, out_dtype=spec)
            results += [(same_kind(out, want), "%r -> %s" % (spec, out.dtype)), compare_out(out, ref_out, rnd(ref_out))]
        results.append(raises(FlashcError, "out_dtype", flashc.merge_states, op, lp, out_dtype=torch.int32))
        return combine(*results)

    def paged_args(rng):
        q = tt(rng.standard_normal((2, 1, 2, 64)), torch.float16)
        kc, vc = (tt(rng.standard_normal((8, 4, 2, 64)), torch.float16) for _ in range(2))
        kn, vn = (tt(rng.standard_normal((2, 1, 2, 64)), torch.float16) for _ in range(2))
        return q, kc, vc, kn, vn, torch.tensor([[0, 1], [2, 3]], dtype=torch.int32, device=device)

    def paged_overflow_host():
        q, kc, vc, kn, vn, table = paged_args(np.random.default_rng(105))
        k0, v0 = kc.clone(), vc.clone()
        lens = torch.tensor([3, 8], dtype=torch.int32)  # in host memory: checked before the call
        r = raises(RuntimeError, "block_table", flashc.flash_attn_with_kvcache, q, kc, vc, kn, vn,
                   cache_seqlens=lens, block_table=table)
        return combine(r, (torch.equal(kc, k0) and torch.equal(vc, v0), "cache unchanged"))

    def paged_overflow_device():
        q, kc, vc, kn, vn, table = paged_args(np.random.default_rng(106))
        kv = flashc.flash_attn_with_kvcache
        bad = torch.tensor([3, 9], dtype=torch.int32, device=device)  # on the device: the kernels find it
        first = flashc.set_check_errors(True)
        try:
            r1 = raises(FlashcError, "block_table", kv, q, kc, vc, cache_seqlens=bad, block_table=table)
            flashc.set_check_errors(False)
            kv(q, kc, vc, cache_seqlens=bad, block_table=table)
            r2 = raises(FlashcError, "block_table", flashc.check_errors)
            r3 = (flashc.check_errors() is None, "record cleared by the check")
            fits = torch.tensor([3, 8], dtype=torch.int32, device=device)
            good = kv(q, kc, vc, cache_seqlens=fits, block_table=table)
            torch.cuda.synchronize()
            r4 = (bool(torch.isfinite(good).all()), "the CUDA context stays usable")
        finally:
            flashc.set_check_errors(first)
        return combine(r1, r2, r3, r4)

    tag = "torch %s" % device
    add("%s bfloat16 dense GQA causal (non-contiguous k)" % tag, dense, "bfloat16", True)
    add("%s float16 dense GQA" % tag, dense, "float16", False)
    add("%s bfloat16 varlen causal (int64 cu_seqlens_k)" % tag, varlen, "bfloat16", None)
    add("%s float16 varlen paged 16 causal (list block_table)" % tag, varlen, "float16", 16)
    add("%s bfloat16 kvcache append in place" % tag, kvcache_bf16)
    add("%s bfloat16 merge_states" % tag, merge_bf16)
    add("%s merge_states out_dtype torch, numpy and string dtypes" % tag, merge_out_dtype)
    add("%s paged overflow with cache_seqlens in host memory names block_table" % tag, paged_overflow_host)
    add("%s bfloat16 cache_batch_idx / cache_leftpad against a gathered / shifted cache" % tag, batch_idx_leftpad,
        lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(device=device, dtype=torch.bfloat16 if x.dtype == np.float32
                                                                 and x.ndim == 4 else None), torch.equal, np.float32)
    def fp8_cache():
        """An e4m3 cache with k/v descales against the same cache dequantised into an fp32 one (on the CPU);
        CUDA runs it on the decode kernel and rejects prefill shapes so far, with FlashcError naming k_cache."""
        rng = np.random.default_rng(106)
        b, cap, h, hk, d = 2, 40, 4, 2, 64
        q = tt(rng.standard_normal((b, 1, h, d)), torch.bfloat16)
        kc = torch.from_numpy(rng.standard_normal((b, cap, hk, d)).astype(np.float32)).to(torch.float8_e4m3fn).to(device)
        vc = torch.from_numpy(rng.standard_normal((b, cap, hk, d)).astype(np.float32)).to(torch.float8_e4m3fn).to(device)
        kds = tt(0.5 + rng.random((b, hk)), torch.float32)
        vds = tt(np.array([0.75]), torch.float32)  # one value for every (b, h_k), as vLLM passes it
        lens = torch.tensor([17, 33], dtype=torch.int32, device=device)
        later = []
        if device == "cuda":  # 16 query rows x 2 heads per KV head: a prefill shape
            q16 = tt(rng.standard_normal((b, 16, h, d)), torch.bfloat16)
            later.append(raises(FlashcError, "k_cache", flashc.flash_attn_with_kvcache, q16, kc, vc, cache_seqlens=lens,
                                k_descale=kds, v_descale=vds))
        got = flashc.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, k_descale=kds, v_descale=vds, causal=True)
        kd = (kc.float() * kds[:, None, :, None]).to(torch.float32).cpu()
        vd = (vc.float() * 0.75).to(torch.float32).cpu()
        want = flashc.flash_attn_with_kvcache(q.float().cpu(), kd, vd, cache_seqlens=lens.cpu(), causal=True)
        err = (got.float().cpu() - want).abs().max().item()
        return combine((err < 2e-2, "e4m3 cache vs its dequantised fp32 copy on the CPU: max err %.2e (bf16 out)" % err),
                       *later)

    def fp8_attention():
        """FP8 attention (q, k, v e4m3 with descales, bf16 out) against the dequantised fp32 call on the CPU:
        within the error of P in e4m3."""
        rng = np.random.default_rng(107)
        b, s, h, hk, d = 2, 70, 4, 2, 64
        f8 = lambda *sh: torch.from_numpy(rng.standard_normal(sh).astype(np.float32)).to(torch.float8_e4m3fn).to(device)  # noqa: E731
        q, k, v = f8(b, s, h, d), f8(b, s, hk, d), f8(b, s, hk, d)
        qs, ks, vs = (tt(0.5 + rng.random((b, hk)), torch.float32) for _ in range(3))
        from flashc import flash_attn_interface as fa3
        got = fa3.flash_attn_func(q, k, v, causal=True, q_descale=qs, k_descale=ks, v_descale=vs)
        deq = lambda x, sc: (x.float() * sc.repeat_interleave(1, 1)[:, None, :, None]).cpu()  # noqa: E731
        qd = (q.float() * qs.repeat_interleave(h // hk, dim=1)[:, None, :, None]).cpu()
        want = flashc.flash_attn_func(qd, deq(k, ks), deq(v, vs), causal=True)  # fp32: the CPU
        err = (got.float().cpu() - want).abs().max().item()
        return combine((got.dtype == torch.bfloat16, "bf16 out"),
                       (err < 0.1, "against the dequantised fp32 call: max err %.3g (P in e4m3)" % err))

    add("%s float8_e4m3fn cache with k_descale / v_descale" % tag, fp8_cache)
    add("%s float8_e4m3fn attention with q/k/v descales (FA3's flash_attn_func)" % tag, fp8_attention)
    add("%s torch.compile(fullgraph=True) of the three functions" % tag, compiled)
    add("%s torch.library.opcheck of the custom ops" % tag, opcheck)
    if device == "cuda":
        add("%s CUDA graph capture of a decode step with append, replayed with new values" % tag, cuda_graph)
        add("%s paged overflow found on the device: set_check_errors, check_errors name block_table" % tag,
            paged_overflow_device)
    if device == "cpu":
        add("%s float32 dense GQA causal" % tag, dense, "float32", True)


def _lib_cuda():
    try:
        return flashc.cuda_available()
    except OSError:  # no library: the other checks report it
        return False


def add_torch_checks():
    try:
        import torch
    except ImportError:
        SKIPS.append("torch checks (torch is not importable)")
        return
    torch_checks(torch, "cpu")
    if not torch.cuda.is_available():
        SKIPS.append("torch CUDA checks (no CUDA device)")
    elif not _lib_cuda():
        SKIPS.append("torch CUDA checks (this libflashc has no CUDA backend)")
    else:
        torch_checks(torch, "cuda")


add_torch_checks()


# ------------------------------------------------------------------------------------------------


def main():
    passed = failed = 0
    t0 = time.time()
    # Every check runs twice: cold (each call of the flash_attn-style functions takes the slow path and
    # caches its plan), then again with fresh arrays of the same layouts, when the calls take the cached
    # plans (flashc._plan): both paths must pass every check.
    flashc._clear_plan_cache()
    for label, checks in (("", CHECKS), (" [cached plans]", [c for c in CHECKS if c[0] not in COLD_ONLY])):
        for name, fn in checks:
            try:
                ok, info = fn()
            except Exception as e:  # noqa: BLE001
                ok, info = False, "raised %s: %s" % (type(e).__name__, e)
            if ok is None:
                if not label:
                    print("SKIP %s: %s" % (name, info))
                continue
            passed, failed = passed + bool(ok), failed + (not ok)
            print("%s %s%s: %s" % ("PASS" if ok else "FAIL", name, label, info))
    for s in SKIPS:
        print("SKIP %s" % s)
    print("(%.1f s)" % (time.time() - t0))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
