"""_attention.py — flash_attn-compatible entry points (forward only) over fc_attn_fwd and fc_merge_states."""
import inspect
import numbers

from . import _arrays as A
from . import _plan
from ._call import attn_call, merge_call
from ._lib import c_float, fail


_TORCH = None  # the torch module, once flashc's custom ops are registered (register_torch_ops)


def register_torch_ops():
    """Registers the flash_attn-style functions as torch custom ops (flashc::...), so torch.compile traces
    them (see _torch_ops.py). Imports torch. Done at import when torch was imported before flashc, else
    at the first call with a torch tensor; call it before torch.compile if neither has happened."""
    global _TORCH
    if _TORCH is None:
        import torch
        from . import _torch_ops  # noqa: F401  (registers the ops)
        _TORCH = torch


def compiling():
    """True while torch.compile traces the caller: the functions then call their custom ops."""
    t = _TORCH
    return t is not None and t.compiler.is_compiling()


def _traced(name, out, *args):
    """The custom op flashc::name on args (while tracing); out= is filled from its result."""
    o, lse = getattr(_TORCH.ops.flashc, name)(*args)
    if out is not None:
        out.copy_(o)
        o = out
    return o, lse


def _window(window_size):
    w = (-1, -1) if window_size is None else window_size
    return int(w[0]), int(w[1])


def _no_dropout(dropout_p):
    if dropout_p:
        raise ValueError("flashc: dropout_p = %r is not supported; flashc has no dropout (use 0.0)" % (dropout_p,))


def _scores(c, q, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, num_splits):
    """Fills the score options shared by every entry point."""
    a = c.args
    a.softmax_scale = _softmax_scale(softmax_scale)
    a.softcap = c_float(softcap or 0.0, "softcap")
    a.causal = 1 if causal else 0
    window_size = (-1, -1) if window_size is None else window_size
    if len(window_size) != 2:
        fail("window_size: expected (left, right), got %r" % (window_size,))
    c.set_int("window_left", window_size[0], "window_size[0]")
    c.set_int("window_right", window_size[1], "window_size[1]")
    c.set_int("num_splits", num_splits or 0)
    if alibi_slopes is not None:
        c.set("alibi_slopes", A.as_float(alibi_slopes, q, "alibi_slopes"))
    if sinks is not None:
        c.set("sinks", A.as_float(sinks, q, "sinks"))


_ZERO_SCALE = 2.0 ** -100  # softmax_scale=0: every score 0 (below 2^-100 |q.k|: exp rounds it to 1 in fp32)


def _softmax_scale(softmax_scale):
    """The C field, where 0 means 1/sqrt(d): None is that default; an explicit 0 (flash_attn: every score
    0, a uniform average over the visible keys) becomes 2^-100, whose scores exp rounds to exactly 1 in
    fp32 wherever |q.k| < 2^76."""
    if softmax_scale is None:
        return 0.0
    scale = c_float(softmax_scale, "softmax_scale")
    return _ZERO_SCALE if scale == 0 else scale


def _outputs(c, q, out_shape, lse_shape, want_lse, out=None):
    """Sets out (the caller's, or allocated in q's library, device and dtype) and, when wanted, a newly
    allocated float32 lse."""
    want = "bfloat16" if A.dtype_name(q).startswith("float8") else A.dtype_name(q)  # fp8 q: bf16 out, as FA3
    if out is None:
        out = A.empty_like(q, out_shape, want)
    else:
        out = A.as_inplace(A.check_array(out, "out"), "out")
        ok_dtypes = (want, "float16") if want != A.dtype_name(q) else (want,)
        if A.shape_of(out) != tuple(out_shape) or A.dtype_name(out) not in ok_dtypes:
            fail("out: shape %s, dtype %s; expected %s, %s" % (A.shape_of(out), A.dtype_name(out), tuple(out_shape),
                                                              " or ".join(ok_dtypes)))
    lse = A.empty_like(q, lse_shape, "float32") if want_lse else None
    c.set_many(out=out, lse=lse)
    return out, lse


def _descales(c, q, b, h_k, **scales):
    """q_descale / k_descale / v_descale (fp8 inputs): float32 (b, h_k), or one value broadcast."""
    for name, x in scales.items():
        if x is not None:
            c.set(name, A.broadcast_scale(A.as_float(x, q, name), (b, h_k)), name)


def _fast(scalars, tensors, out, build, args, slots, result):
    """Runs a call through the plan cache (_plan.lookup): with a cached plan, only the addresses are
    written; else build(*args) builds the call, it runs, and its plan is cached when the tensors went as
    they are. build(*args) -> (call, out, lse); result(out, lse) -> what the entry point returns."""
    hit = _plan.lookup(scalars, tensors + (out,))
    if hit is not None and hit[0]:
        if out is not None:
            hit[1].pop()
        return hit[0].launch(hit[1], out, None)
    c, o, l = build(*args)
    c.run_attn()
    if hit is not None and hit[0] is None:
        _plan.learn(hit[2], c, slots, tensors, o, l, result)
    return result(o, l)


def _ret_out_lse_none(want_lse):
    return (lambda o, l: (o, l, None)) if want_lse else (lambda o, l: o)


def _ret_out_lse(want_lse):
    return (lambda o, l: (o, l)) if want_lse else (lambda o, l: o)


_RET_OUT_LSE_NONE = (_ret_out_lse_none(False), _ret_out_lse_none(True))  # flash_attn_func, varlen: out or (out, lse, None)
_RET_OUT_LSE = (_ret_out_lse(False), _ret_out_lse(True))                  # flash_attn_with_kvcache: out or (out, lse)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                    sinks=None, num_splits=0, out=None, q_descale=None, k_descale=None, v_descale=None):
    """Attention over dense batches, as flash_attn.flash_attn_func (forward only).

    q (b, s_q, h, d), k (b, s_k, h_k, d), v (b, s_k, h_k, d_v); numpy arrays, torch CPU or CUDA tensors.
    Returns out (b, s_q, h, d_v) in q's dtype, or (out, softmax_lse, None) with return_attn_probs:
    softmax_lse is float32 (b, h, s_q); the third item (S_dmask in flash_attn) is always None.
    Differences from flash_attn: dropout_p must be 0 (ValueError otherwise); deterministic is ignored
    (the forward is deterministic); no autograd; softmax_scale=0 raises (pass None for 1/sqrt(d)).
    Extras: sinks (h,) float32 sink logits; num_splits (0 = chosen by flashc, at most 128) splits the
    key range; out= writes into the caller's array; FP8: q, k, v float8_e4m3fn (or e5m2 on the CPU) with
    q_descale / k_descale / v_descale float32 (b, h_k) or one value, out bfloat16 (flashc.h, "FP8"). Inputs the C API cannot read as they are (last dim not contiguous, byte-swapped, not
    aligned) are copied. Scalars that a C int or a float32 cannot hold raise FlashcError naming them.
    """
    _no_dropout(dropout_p)
    if compiling():
        o, lse = _traced("flash_attn_func", out, q, k, v, softmax_scale, bool(causal), *_window(window_size),
                         float(softcap or 0.0), alibi_slopes, sinks, int(num_splits or 0), q_descale, k_descale,
                         v_descale)
        return (o, lse, None) if return_attn_probs else o
    scalars = ("func", softmax_scale, causal, window_size, softcap, num_splits, bool(return_attn_probs))
    return _fast(scalars, (q, k, v, alibi_slopes, sinks, q_descale, k_descale, v_descale), out, _func_call,
                 (q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs, sinks,
                  num_splits, out, q_descale, k_descale, v_descale), _FUNC_SLOTS,
                 _RET_OUT_LSE_NONE[bool(return_attn_probs)])


_FUNC_SLOTS = ("q", "k", "v", "alibi_slopes", "sinks", "q_descale", "k_descale", "v_descale")


def _func_call(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs, sinks,
               num_splits, out, q_descale=None, k_descale=None, v_descale=None):
    q = A.as_data(q, "q")
    k, v = A.as_data(k, "k"), A.as_data(v, "v")
    A.need_ndim(q, (4,), "q")
    A.need_ndim(v, (4,), "v")
    b, s_q, h, _ = A.shape_of(q)
    c = attn_call(q)
    c.set_many(q=q, k=k, v=v)
    _descales(c, q, b, A.shape_of(k)[2], q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    out, lse = _outputs(c, q, (b, s_q, h, A.shape_of(v)[-1]), (b, h, s_q), return_attn_probs, out)
    _scores(c, q, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, num_splits)
    return c, out, lse


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None,
                           *, seqused_k=None, sinks=None, num_splits=0, out=None, seqused_q=None):
    """Attention over packed variable-length batches, as flash_attn.flash_attn_varlen_func (forward only).

    q (total_q, h, d) with cu_seqlens_q (b+1); k (total_k, h_k, d), v (total_k, h_k, d_v) with cu_seqlens_k
    (b+1). With block_table (b, max_pages) int32, k/v are a paged cache (num_pages, page_size, h_k, d) and
    sequence i uses its first cu_seqlens_k[i+1] - cu_seqlens_k[i] keys (or seqused_k[i] when given).
    seqused_k (b) int32: only the first seqused_k[i] keys of sequence i count. seqused_q (b) int32 (FA3's):
    only the first seqused_q[i] query rows of sequence i are computed; its other rows of out and lse are not
    written.
    Returns out (total_q, h, d_v), or (out, softmax_lse, None) with softmax_lse float32 (h, total_q).
    Differences from flash_attn: as flash_attn_func (no dropout, deterministic ignored, no autograd);
    max_seqlen_q/k must bound the true lengths on CUDA (the CPU checks the contents).
    Bad contents: with block_table, key counts in host memory (cu_seqlens_k / seqused_k as lists, numpy
    arrays, CPU tensors) are checked before the call on every device: more keys than max_pages *
    page_size raise FlashcError naming block_table, as do pages outside the cache when block_table is in
    host memory too. Contents that live only in CUDA memory are checked by the kernels: see
    flashc.check_errors and flashc.set_check_errors.
    """
    _no_dropout(dropout_p)
    if compiling():
        o, lse = _traced("flash_attn_varlen_func", out, q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                         int(max_seqlen_k), softmax_scale, bool(causal), *_window(window_size), float(softcap or 0.0),
                         alibi_slopes, block_table, seqused_k, sinks, int(num_splits or 0), seqused_q)
        return (o, lse, None) if return_attn_probs else o
    scalars = ("varlen", max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_size, softcap, num_splits,
               bool(return_attn_probs))
    return _fast(scalars, (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, alibi_slopes, sinks,
                           seqused_q), out,
                 _varlen_call, (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                                causal, window_size, softcap, alibi_slopes, return_attn_probs, block_table,
                                seqused_k, sinks, num_splits, out, seqused_q),
                 _VARLEN_SLOTS, _RET_OUT_LSE_NONE[bool(return_attn_probs)])


_VARLEN_SLOTS = ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "page_table", "alibi_slopes", "sinks",
                 "seqused_q")


def _varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                 window_size, softcap, alibi_slopes, return_attn_probs, block_table, seqused_k, sinks, num_splits,
                 out, seqused_q=None):
    q = A.as_data(q, "q")
    k, v = A.as_data(k, "k"), A.as_data(v, "v")
    A.need_ndim(q, (3,), "q")
    A.need_ndim(v, (3, 4), "v")
    total_q, h, _ = A.shape_of(q)
    c = attn_call(q)
    c.set_many(q=q, k=k, v=v)
    cu_q = A.as_int32(cu_seqlens_q, q, "cu_seqlens_q")
    c.set("cu_seqlens_q", cu_q)
    c.set_int("max_seqlen_q", max_seqlen_q)
    if seqused_q is not None:
        c.set("seqused_q", A.as_int32(seqused_q, q, "seqused_q"))
    if seqused_k is not None:
        c.set("seqused_k", A.as_int32(seqused_k, q, "seqused_k"))
    if block_table is None:
        c.set("cu_seqlens_k", A.as_int32(cu_seqlens_k, q, "cu_seqlens_k"))
        c.set_int("max_seqlen_k", max_seqlen_k)
    else:  # paged: the C API takes the key counts as seqused_k
        table = A.as_int32(block_table, q, "block_table")
        c.set("page_table", table, "block_table")
        if seqused_k is None:
            c.set("seqused_k", A.diff_int32(A.as_int32(cu_seqlens_k, q, "cu_seqlens_k")), "cu_seqlens_k")
            lens, len_name = A.host_ints(cu_seqlens_k), "cu_seqlens_k"
            lens = None if lens is None or lens.ndim != 1 else lens[1:] - lens[:-1]
        else:
            lens, len_name = A.host_ints(seqused_k), "seqused_k"
        _check_on_host(A.shape_of(cu_q)[0] - 1, lens, len_name, 0, table, A.host_ints(block_table), k)
    out, lse = _outputs(c, q, (total_q, h, A.shape_of(v)[-1]), (h, total_q), return_attn_probs, out)
    _scores(c, q, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, num_splits)
    return c, out, lse


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False,
                            *, sinks=None, out=None, k_descale=None, v_descale=None):
    """Decode/append attention over a KV cache, as flash_attn.flash_attn_with_kvcache.

    q (b, s_q, h, d); k_cache/v_cache dense (b, s_cache, h_k, d / d_v) or, with block_table (b, max_pages)
    int32, paged (num_pages, page_size, h_k, d / d_v). cache_seqlens: int or int32 (b): keys already in
    the cache (None: the whole cache, allowed only without k/v). k/v (b, s_new, h_k, d / d_v): new tokens,
    written into the cache IN PLACE at cache_seqlens[i] .. + s_new (rotated first when rotary_cos/sin
    (max_pos, rotary_dim/2) are given), then attention runs over cache_seqlens[i] + s_new keys. As in
    flash_attn, cache_seqlens is not updated. Returns out (b, s_q, h, d_v), or (out, softmax_lse) with
    softmax_lse float32 (b, h, s_q) when return_softmax_lse.
    cache_batch_idx (b) int32: sequence i uses cache row cache_batch_idx[i] (dense caches). cache_leftpad (b)
    int32: sequence i's keys start at cache row cache_leftpad[i] (dense caches; cache_seqlens still counts
    from row 0, rotary positions are cache rows, as in flash_attn). FP8 caches (CPU so far): k_cache and
    v_cache float8_e4m3fn or float8_e5m2 (torch, or ml_dtypes for numpy) with k_descale / v_descale
    float32 (b, h_k) or one value (FA3's names): keys are k_cache * k_descale, and an append stores
    fp8(k / k_descale), saturated (flashc.h, "FP8"). Rotary:
    flashc rotates query row r at its absolute position s_k - s_q + r (s_k = cache_seqlens + s_new)
    always; flash_attn rotates it at cache_seqlens + r when causal or local (the same when s_q = s_new)
    and every row at cache_seqlens otherwise. No autograd. Extras: sinks (h,) float32.
    The cache written in place must have a contiguous last dimension, native byte order and aligned
    data (it is never copied): FlashcError naming k_cache / v_cache otherwise.
    Bad contents: where cache_seqlens is in host memory (an int, a list, a numpy array, a CPU tensor),
    cache_seqlens[i] + s_new is checked before the call on every device: beyond the max_pages *
    page_size keys of a paged cache it raises FlashcError (a RuntimeError) naming block_table, as
    flash_attn does; beyond a dense cache's s_cache, naming cache_seqlens; with block_table in host
    memory too, pages outside the cache raise naming block_table. A cache_seqlens in CUDA memory is
    checked by the kernels: see flashc.check_errors and flashc.set_check_errors.
    """
    if compiling():
        if isinstance(cache_seqlens, int):
            cache_seqlens = _TORCH.full((q.shape[0],), cache_seqlens, dtype=_TORCH.int32, device=q.device)
        o, lse = _traced("flash_attn_with_kvcache", out, q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                         block_table, softmax_scale, bool(causal), *_window(window_size), float(softcap or 0.0),
                         bool(rotary_interleaved), alibi_slopes, int(num_splits or 0), sinks, cache_batch_idx,
                         cache_leftpad, k_descale, v_descale)
        return (o, lse) if return_softmax_lse else o
    if type(cache_seqlens) is int:
        cache_seqlens = _int_seqlens(cache_seqlens, q, k_cache, k, block_table)
    scalars = ("kvcache", softmax_scale, causal, window_size, softcap, rotary_interleaved, num_splits,
               bool(return_softmax_lse))
    tensors = (q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, block_table, alibi_slopes, sinks,
               cache_batch_idx, cache_leftpad, k_descale, v_descale)
    return _fast(scalars, tensors, out, _kvcache_call,
                 (q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, block_table, softmax_scale, causal,
                  window_size, softcap, rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse, sinks, out,
                  cache_batch_idx, cache_leftpad, k_descale, v_descale),
                 _KVCACHE_SLOTS, _RET_OUT_LSE[bool(return_softmax_lse)])


_KVCACHE_SLOTS = ("q", "k", "v", "k_new", "v_new", "rotary_cos", "rotary_sin", "seqused_k", "page_table",
                  "alibi_slopes", "sinks", "kv_batch_idx", "kv_leftpad", "k_descale", "v_descale")


def _int_seqlens(n, q, k_cache, k, block_table):
    """An int cache_seqlens as the int32 (b,) array the C call takes (one per value, b and device, made
    once), when it is in range for the cache; else n itself, for the slow path to report."""
    try:
        s_new = 0 if k is None else k.shape[1]
        cap = k_cache.shape[1] * (1 if block_table is None else block_table.shape[1])
        if 0 <= n and n + s_new <= cap and A.is_array(q):
            return _plan.full_int32(n, q.shape[0], q)
    except (AttributeError, IndexError, TypeError):  # malformed arguments: the slow path reports them
        pass
    return n


def _kvcache_call(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, block_table, softmax_scale,
                  causal, window_size, softcap, rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse,
                  sinks, out, cache_batch_idx=None, cache_leftpad=None, k_descale=None, v_descale=None):
    if (k is None) != (v is None):
        fail("k, v: give both new keys and new values, or neither")
    if k is not None and cache_seqlens is None:
        fail("cache_seqlens: required when k and v are appended to the cache")
    q = A.as_data(q, "q")
    A.need_ndim(q, (4,), "q")
    prep = A.as_data if k is None else A.as_inplace
    k_cache, v_cache = prep(k_cache, "k_cache"), prep(v_cache, "v_cache")
    A.need_ndim(v_cache, (4,), "v_cache")
    b, s_q, h, _ = A.shape_of(q)
    c = attn_call(q)
    c.set("q", q)
    c.set("k", k_cache, "k_cache")
    c.set("v", v_cache, "v_cache")
    s_new = 0
    if k is not None:
        k, v = A.as_data(k, "k"), A.as_data(v, "v")
        c.set("k_new", k, "k")
        c.set("v_new", v, "v")
        s_new = A.shape_of(k)[1] if k.ndim == 4 else 0
    table = None if block_table is None else A.as_int32(block_table, q, "block_table")
    c.set("page_table", table, "block_table")
    c.set("seqused_k", _cache_seqlens(q, cache_seqlens, table, k_cache), "cache_seqlens")
    _descales(c, q, b, A.shape_of(k_cache)[2], k_descale=k_descale, v_descale=v_descale)  # fp8 caches
    if cache_batch_idx is not None:
        c.set("kv_batch_idx", A.as_int32(cache_batch_idx, q, "cache_batch_idx"), "cache_batch_idx")
    if cache_leftpad is not None:
        c.set("kv_leftpad", A.as_int32(cache_leftpad, q, "cache_leftpad"), "cache_leftpad")
    _check_index_on_host(A.host_ints(cache_batch_idx), A.host_ints(cache_leftpad),
                         _host_cache_seqlens(cache_seqlens, table, k_cache), k_cache, s_new)
    _check_on_host(b, _host_cache_seqlens(cache_seqlens, table, k_cache), "cache_seqlens", s_new, table,
                   A.host_ints(block_table), k_cache)
    _rotary(c, q, rotary_cos, rotary_sin, rotary_interleaved)
    out, lse = _outputs(c, q, (b, s_q, h, A.shape_of(v_cache)[-1]), (b, h, s_q), return_softmax_lse, out)
    _scores(c, q, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, num_splits)
    return c, out, lse


def _cache_seqlens(q, cache_seqlens, block_table, k_cache):
    """seqused_k for the C call: from an int or array; a paged cache without it uses all its pages."""
    b = A.shape_of(q)[0]
    if cache_seqlens is None:
        if block_table is None:
            return None
        A.need_ndim(block_table, (2,), "block_table")
        return A.full_int32(q, b, A.shape_of(block_table)[1] * A.shape_of(k_cache)[1])
    if isinstance(cache_seqlens, numbers.Integral):
        return A.full_int32(q, b, cache_seqlens, "cache_seqlens")
    return A.as_int32(cache_seqlens, q, "cache_seqlens")


def _host_cache_seqlens(cache_seqlens, table, k_cache):
    """The values _cache_seqlens gave the C call, as a host array (b,), or None where they are only on
    the device (a CUDA tensor) or there are none (a dense cache attended whole)."""
    if cache_seqlens is None:
        return None if table is None else A.host_ints(A.shape_of(table)[1] * A.shape_of(k_cache)[1])
    return A.host_ints(cache_seqlens)


def _check_on_host(b, lens, len_name, s_new, table, table_host, k_cache):
    """What the kernels would otherwise only find on the device, checked before the call where the key
    counts are in host memory, as flash_attn does: each sequence's lens[i] + s_new keys fit in its pages
    (paged, table given; the error names block_table) or in the dense cache (naming len_name), and, where
    the page table is in host memory too (table_host), the pages each sequence uses are pages of the cache.
    lens: numpy (b,) or a scalar for every sequence; None: the counts are on the device, nothing to check
    here. b: the batch. A malformed shape is left to the C API to report."""
    if lens is None or k_cache.ndim != 4 or lens.shape not in ((), (b,)):
        return
    lens = A.np.broadcast_to(lens, (b,))
    bad = A.np.flatnonzero(lens < 0)
    if bad.size:
        fail("%s: sequence %d has a negative key count (%d)" % (len_name, bad[0], lens[bad[0]]))
    need = lens + s_new
    if table is None:
        cap = A.shape_of(k_cache)[1]  # dense: k_cache (b, s_cache, h_k, d)
        over = A.np.flatnonzero(need > cap)
        if over.size:
            i = over[0]
            fail("%s: sequence %d needs %d keys (%s %d + %d new), more than the %d of k_cache"
                 % (len_name, i, need[i], len_name, lens[i], s_new, cap))
        return
    num_pages, page_size = A.shape_of(k_cache)[:2]
    if table.ndim != 2 or A.shape_of(table)[0] != b or page_size < 1:
        return
    max_pages = A.shape_of(table)[1]
    over = A.np.flatnonzero(need > max_pages * page_size)
    if over.size:
        i = over[0]
        fail("block_table: sequence %d needs %d keys (%s %d + %d new), more than its %d pages of %d hold"
             % (i, need[i], len_name, lens[i], s_new, max_pages, page_size))
    if table_host is None:
        return
    used = (need + page_size - 1) // page_size
    outside = (A.np.arange(max_pages)[None, :] < used[:, None]) & ((table_host < 0) | (table_host >= num_pages))
    if outside.any():
        i, j = (int(n) for n in A.np.argwhere(outside)[0])
        fail("block_table: [%d][%d] = %d is not a page in [0, %d)" % (i, j, table_host[i, j], num_pages))


def _check_index_on_host(idx, pad, lens, k_cache, s_new):
    """cache_batch_idx and cache_leftpad held in host memory, checked before the call on every device (the
    C library checks them there only on the CPU): rows of the cache, distinct when appending; pads within
    the keys counted from row 0. None: on the device (the kernels check them) or absent."""
    if idx is not None and idx.ndim == 1 and k_cache.ndim == 4:
        rows = A.shape_of(k_cache)[0]
        bad = A.np.flatnonzero((idx < 0) | (idx >= rows))
        if bad.size:
            fail("cache_batch_idx: [%d] = %d is not a row of the cache [0, %d)" % (bad[0], idx[bad[0]], rows))
        if s_new and len(set(idx.tolist())) < idx.size:
            fail("cache_batch_idx: names one cache row for two sequences, and both append to it (k, v)")
    if pad is not None and pad.ndim == 1:
        keys = A.np.broadcast_to(lens, pad.shape) if lens is not None else A.np.full(pad.shape, A.shape_of(k_cache)[1])
        bad = A.np.flatnonzero((pad < 0) | (pad > keys))
        if bad.size:
            fail("cache_leftpad: [%d] = %d is outside [0, %d] (the sequence's keys counted from row 0)"
                 % (bad[0], pad[bad[0]], keys[bad[0]]))


def _rotary(c, q, rotary_cos, rotary_sin, rotary_interleaved):
    if (rotary_cos is None) != (rotary_sin is None):
        fail("rotary_cos, rotary_sin: give both or neither")
    if rotary_cos is None:
        return
    keep = ("float32", A.dtype_name(q))
    cos, sin = A.as_float(rotary_cos, q, "rotary_cos", keep), A.as_float(rotary_sin, q, "rotary_sin", keep)
    if A.shape_of(cos) == A.shape_of(sin) and A.strides_of(cos) != A.strides_of(sin):
        cos, sin = A.copy(cos), A.copy(sin)  # the C API reads both tables with one row stride
    c.set("rotary_cos", cos)
    c.set("rotary_sin", sin)
    c.args.rotary_interleaved = 1 if rotary_interleaved else 0


def merge_states(out_partial, lse_partial, out_dtype=None, *, lse_layout=None, out=None):
    """Merges n partial attention results over disjoint key sets (what split-KV and context parallelism need).

    out_partial (n, rows, h, d_v) or (n, b, s, h, d_v), float32/bf16/fp16. lse_partial float32 in either
    layout: FlashAttention's combine layout (n, rows, h) / (n, b, s, h), or the one fc_attn_fwd and the
    functions here write, (n, h, rows) / (n, b, h, s) (a stack of varlen or dense softmax_lse). The layout
    is found from the shapes; when h equals rows (or s) both fit and lse_layout says which: "rows_heads"
    (the default then) or "heads_rows". Returns (out, lse): lse = log(sum_s exp(lse_s)) float32 in
    lse_partial's layout, out = sum_s exp(lse_s - lse) * out_s of shape out_partial.shape[1:] in out_dtype
    (default: out_partial's dtype; float32 output is CPU-only; a string such as "bfloat16", a torch dtype or
    a numpy dtype), or written into out= . A partial with lse = -inf contributes nothing; rows where all
    are -inf get out = 0, lse = -inf.
    """
    out_partial = A.as_input(out_partial, "out_partial")
    lse_partial = A.as_input(lse_partial, "lse_partial", ("float32",))
    A.need_ndim(out_partial, (4, 5), "out_partial")
    shape = A.shape_of(out_partial)
    n, lead, h, d_v = shape[0], shape[1:-2], shape[-2], shape[-1]
    rows = 1
    for x in lead:
        rows *= x
    heads_rows = _lse_heads_rows(A.shape_of(lse_partial), n, lead, h, lse_layout)
    lse_rows = lse_partial
    if heads_rows:  # (n, h, rows) or (n, b, h, s) -> a (n, rows, h) view (a copy for b > 1)
        lse_rows = A.swap_last(lse_partial)
    op3, lp3 = A.reshape(out_partial, (n, rows, h, d_v)), A.reshape(lse_rows, (n, rows, h))
    c = merge_call(op3)
    c.set_many(out_partial=op3, lse_partial=lp3)
    out_dtype = None if out_dtype is None else A.float_dtype_name(out_dtype, "out_dtype")
    if out is None:
        out = A.empty_like(out_partial, lead + (h, d_v), out_dtype)
    else:
        out = A.as_inplace(A.check_array(out, "out"), "out")
        if A.shape_of(out) != lead + (h, d_v):
            fail("out: shape %s, expected %s" % (A.shape_of(out), lead + (h, d_v)))
    lse = A.empty_like(out_partial, A.shape_of(lse_partial)[1:], "float32")
    # The C call writes (rows, h, d_v) and (rows, h) views; where out or lse cannot be viewed so (dense
    # lse in fc_attn_fwd's (b, h, s) layout, an out= with odd strides) it writes temporaries, copied after.
    out_c = A.try_view(out, (rows, h, d_v))
    lse_c = A.try_view(A.swap_last(lse) if heads_rows else lse, (rows, h))
    c.set("out", out_c if out_c is not None else A.empty_like(out, (rows, h, d_v)), "out")
    c.set("lse", lse_c if lse_c is not None else A.empty_like(lse, (rows, h)), "lse")
    c.run_merge()
    if out_c is None:
        A.assign(out, A.reshape(c.arrays["out"], lead + (h, d_v)))
    if lse_c is None:
        got = A.reshape(c.arrays["lse"], lead + (h,))
        A.assign(lse, A.swap_last(got) if heads_rows else got)
    return out, lse


def _lse_heads_rows(lse_shape, n, lead, h, layout):
    """True when lse_partial is in fc_attn_fwd's layout (heads before rows), False for (rows, h) last."""
    rows_heads = (n,) + lead + (h,)
    heads_rows = (n,) + lead[:-1] + (h, lead[-1])
    if layout not in (None, "rows_heads", "heads_rows"):
        fail("lse_layout: %r; expected None, 'rows_heads' or 'heads_rows'" % (layout,))
    want = {"rows_heads": rows_heads, "heads_rows": heads_rows}.get(layout)
    if want is not None:
        if lse_shape != want:
            fail("lse_partial: shape %s, expected %s for lse_layout %r" % (lse_shape, want, layout))
        return layout == "heads_rows"
    if lse_shape == rows_heads:
        return False
    if lse_shape == heads_rows:
        return True
    fail("lse_partial: shape %s, expected %s (rows, heads) or %s (heads, rows, as fc_attn_fwd writes)"
         % (lse_shape, rows_heads, heads_rows))


# ------------------------------------------------------------------------------------------------
# Plans: an entry point's call planned once, run per layer with that layer's tensors.

def _plannable():
    """fn -> (builder, per-layer C fields, their Python names, result(out, lse) of the entry point)."""
    return {
        flash_attn_func: (_func_call, ("q", "k", "v"), ("q", "k", "v"), "return_attn_probs", _ret_out_lse_none),
        flash_attn_varlen_func: (_varlen_call, ("q", "k", "v"), ("q", "k", "v"), "return_attn_probs",
                                 _ret_out_lse_none),
        flash_attn_with_kvcache: (_kvcache_call, ("q", "k", "v", "k_new", "v_new"), ("q", "k_cache", "v_cache", "k", "v"),
                                  "return_softmax_lse", _ret_out_lse),
    }


def plan(fn, *args, **kwargs):
    """Plans a call of fn (flash_attn_func, flash_attn_varlen_func or flash_attn_with_kvcache) once, with
    fn's own arguments, for many runs: plan per batch step, run per layer.

        p = flashc.plan(flashc.flash_attn_with_kvcache, q, k_cache, v_cache, cache_seqlens=lens,
                        block_table=table, causal=True)
        for layer in range(n_layers):
            out = p.run(q[layer], k_caches[layer], v_caches[layer])        # or p.run(..., out=buf)

    run() takes the per-layer arrays in fn's order (flash_attn_func, flash_attn_varlen_func: q, k, v;
    flash_attn_with_kvcache: q, k_cache, v_cache and, when planned with them, k, v), each of the layout
    (shape, strides, dtype, device) of the array it replaces, and returns what fn returns; out= and lse=
    write into the caller's arrays. Everything else is fixed at plan time and referenced by the plan:
    cu_seqlens, cache_seqlens, block_table, rotary tables, ALiBi slopes, sinks, the scalars. Their
    contents may change between runs (e.g. cache_seqlens updated in place on the device); on the CPU
    they are checked again on every run. Validation, the kernel and split choice and the workspace size
    are done once, in C (fc_plan_create); a run writes the new addresses into the planned arguments and
    calls fc_plan_run. A plan may be run from several threads; on CUDA each run uses the current stream
    of the plan's device (capturable in a CUDA graph).
    """
    spec = _plannable().get(fn)
    if spec is None:
        fail("plan: fn must be flashc.flash_attn_func, flash_attn_varlen_func or flash_attn_with_kvcache, got %r" % (fn,))
    builder, fields, names, lse_flag, result = spec
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError("flashc.plan(%s, ...): %s" % (fn.__name__, e)) from None
    bound.apply_defaults()
    a = dict(bound.arguments)
    if "dropout_p" in a:
        _no_dropout(a.pop("dropout_p"))
        a.pop("deterministic")
    if fn is flash_attn_with_kvcache:
        if type(a["cache_seqlens"]) is int:
            a["cache_seqlens"] = _int_seqlens(a["cache_seqlens"], a["q"], a["k_cache"], a["k"], a["block_table"])
    c, out, lse = builder(**a)
    if c.args.k_new.data is None:
        fields, names = fields[:3], names[:3]
    return _plan.Plan(c, fields, [c.arrays.get(f) for f in fields], out, lse, result(bool(a[lse_flag])), keep=True)
