"""_attention.py — flash_attn-compatible entry points (forward only) over fc_attn_fwd and fc_merge_states."""
import numbers

from . import _arrays as A
from ._call import attn_call, merge_call
from ._lib import fail


def _no_dropout(dropout_p):
    if dropout_p:
        raise ValueError("flashc: dropout_p = %r is not supported; flashc has no dropout (use 0.0)" % (dropout_p,))


def _scores(c, q, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, num_splits):
    """Fills the score options shared by every entry point."""
    a = c.args
    a.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    a.softcap = float(softcap or 0.0)
    a.causal = 1 if causal else 0
    window_size = (-1, -1) if window_size is None else window_size
    if len(window_size) != 2:
        fail("window_size: expected (left, right), got %r" % (window_size,))
    a.window_left, a.window_right = int(window_size[0]), int(window_size[1])
    a.num_splits = int(num_splits or 0)
    if alibi_slopes is not None:
        c.set("alibi_slopes", A.as_float(alibi_slopes, q, "alibi_slopes"))
    if sinks is not None:
        c.set("sinks", A.as_float(sinks, q, "sinks"))


def _outputs(c, q, out_shape, lse_shape, want_lse):
    """Allocates out (q's library, device and dtype) and, when wanted, a float32 lse; sets both."""
    out = A.empty_like(q, out_shape)
    lse = A.empty_like(q, lse_shape, "float32") if want_lse else None
    c.set_many(out=out, lse=lse)
    return out, lse


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                    sinks=None, num_splits=0):
    """Attention over dense batches, as flash_attn.flash_attn_func (forward only).

    q (b, s_q, h, d), k (b, s_k, h_k, d), v (b, s_k, h_k, d_v); numpy arrays, torch CPU or CUDA tensors.
    Returns out (b, s_q, h, d_v) in q's dtype, or (out, softmax_lse, None) with return_attn_probs:
    softmax_lse is float32 (b, h, s_q); the third item (S_dmask in flash_attn) is always None.
    Differences from flash_attn: dropout_p must be 0 (ValueError otherwise); deterministic is ignored
    (the forward is deterministic); no autograd. Extras: sinks (h,) float32 sink logits; num_splits
    (0 = chosen by flashc) splits the key range.
    """
    _no_dropout(dropout_p)
    q = A.as_input(q, "q")
    k, v = A.as_input(k, "k"), A.as_input(v, "v")
    A.need_ndim(q, (4,), "q")
    A.need_ndim(v, (4,), "v")
    b, s_q, h, _ = A.shape_of(q)
    c = attn_call(q)
    c.set_many(q=q, k=k, v=v)
    out, lse = _outputs(c, q, (b, s_q, h, A.shape_of(v)[-1]), (b, h, s_q), return_attn_probs)
    _scores(c, q, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, num_splits)
    c.run_attn()
    return (out, lse, None) if return_attn_probs else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None,
                           *, seqused_k=None, sinks=None, num_splits=0):
    """Attention over packed variable-length batches, as flash_attn.flash_attn_varlen_func (forward only).

    q (total_q, h, d) with cu_seqlens_q (b+1); k (total_k, h_k, d), v (total_k, h_k, d_v) with cu_seqlens_k
    (b+1). With block_table (b, max_pages) int32, k/v are a paged cache (num_pages, page_size, h_k, d) and
    sequence i uses its first cu_seqlens_k[i+1] - cu_seqlens_k[i] keys (or seqused_k[i] when given).
    seqused_k (b) int32: only the first seqused_k[i] keys of sequence i count.
    Returns out (total_q, h, d_v), or (out, softmax_lse, None) with softmax_lse float32 (h, total_q).
    Differences from flash_attn: as flash_attn_func (no dropout, deterministic ignored, no autograd);
    max_seqlen_q/k must bound the true lengths on CUDA (the CPU checks the contents).
    """
    _no_dropout(dropout_p)
    q = A.as_input(q, "q")
    k, v = A.as_input(k, "k"), A.as_input(v, "v")
    A.need_ndim(q, (3,), "q")
    A.need_ndim(v, (3, 4), "v")
    total_q, h, _ = A.shape_of(q)
    c = attn_call(q)
    c.set_many(q=q, k=k, v=v)
    c.set("cu_seqlens_q", A.as_int32(cu_seqlens_q, q, "cu_seqlens_q"))
    c.args.max_seqlen_q = int(max_seqlen_q)
    if seqused_k is not None:
        c.set("seqused_k", A.as_int32(seqused_k, q, "seqused_k"))
    if block_table is None:
        c.set("cu_seqlens_k", A.as_int32(cu_seqlens_k, q, "cu_seqlens_k"))
        c.args.max_seqlen_k = int(max_seqlen_k)
    else:  # paged: the C API takes the key counts as seqused_k
        c.set("page_table", A.as_int32(block_table, q, "block_table"), "block_table")
        if seqused_k is None:
            c.set("seqused_k", A.diff_int32(A.as_int32(cu_seqlens_k, q, "cu_seqlens_k")), "cu_seqlens_k")
    out, lse = _outputs(c, q, (total_q, h, A.shape_of(v)[-1]), (h, total_q), return_attn_probs)
    _scores(c, q, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, num_splits)
    c.run_attn()
    return (out, lse, None) if return_attn_probs else out


def _unsupported(name, value):
    if value is not None:
        raise NotImplementedError("flashc: %s is not supported by flash_attn_with_kvcache" % name)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False,
                            *, sinks=None):
    """Decode/append attention over a KV cache, as flash_attn.flash_attn_with_kvcache.

    q (b, s_q, h, d); k_cache/v_cache dense (b, s_cache, h_k, d / d_v) or, with block_table (b, max_pages)
    int32, paged (num_pages, page_size, h_k, d / d_v). cache_seqlens: int or int32 (b): keys already in
    the cache (None: the whole cache, allowed only without k/v). k/v (b, s_new, h_k, d / d_v): new tokens,
    written into the cache IN PLACE at cache_seqlens[i] .. + s_new (rotated first when rotary_cos/sin
    (max_pos, rotary_dim/2) are given), then attention runs over cache_seqlens[i] + s_new keys. As in
    flash_attn, cache_seqlens is not updated. Returns out (b, s_q, h, d_v), or (out, softmax_lse) with
    softmax_lse float32 (b, h, s_q) when return_softmax_lse.
    Differences from flash_attn: cache_batch_idx and cache_leftpad raise NotImplementedError. Rotary:
    flashc rotates query row r at its absolute position s_k - s_q + r (s_k = cache_seqlens + s_new)
    always; flash_attn rotates it at cache_seqlens + r when causal or local (the same when s_q = s_new)
    and every row at cache_seqlens otherwise. No autograd. Extras: sinks (h,) float32.
    """
    _unsupported("cache_batch_idx", cache_batch_idx)
    _unsupported("cache_leftpad", cache_leftpad)
    if (k is None) != (v is None):
        fail("k, v: give both new keys and new values, or neither")
    if k is not None and cache_seqlens is None:
        fail("cache_seqlens: required when k and v are appended to the cache")
    q = A.as_input(q, "q")
    A.need_ndim(q, (4,), "q")
    prep = A.as_input if k is None else A.as_inplace
    k_cache, v_cache = prep(k_cache, "k_cache"), prep(v_cache, "v_cache")
    A.need_ndim(v_cache, (4,), "v_cache")
    b, s_q, h, _ = A.shape_of(q)
    c = attn_call(q)
    c.set("q", q)
    c.set("k", k_cache, "k_cache")
    c.set("v", v_cache, "v_cache")
    if k is not None:
        c.set("k_new", A.as_input(k, "k"), "k")
        c.set("v_new", A.as_input(v, "v"), "v")
    if block_table is not None:
        block_table = A.as_int32(block_table, q, "block_table")
        c.set("page_table", block_table, "block_table")
    c.set("seqused_k", _cache_seqlens(q, cache_seqlens, block_table, k_cache), "cache_seqlens")
    _rotary(c, q, rotary_cos, rotary_sin, rotary_interleaved)
    out, lse = _outputs(c, q, (b, s_q, h, A.shape_of(v_cache)[-1]), (b, h, s_q), return_softmax_lse)
    _scores(c, q, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, num_splits)
    c.run_attn()
    return (out, lse) if return_softmax_lse else out


def _cache_seqlens(q, cache_seqlens, block_table, k_cache):
    """seqused_k for the C call: from an int or array; a paged cache without it uses all its pages."""
    b = A.shape_of(q)[0]
    if cache_seqlens is None:
        if block_table is None:
            return None
        A.need_ndim(block_table, (2,), "block_table")
        return A.full_int32(q, b, A.shape_of(block_table)[1] * A.shape_of(k_cache)[1])
    if isinstance(cache_seqlens, numbers.Integral):
        return A.full_int32(q, b, cache_seqlens)
    return A.as_int32(cache_seqlens, q, "cache_seqlens")


def _rotary(c, q, rotary_cos, rotary_sin, rotary_interleaved):
    if (rotary_cos is None) != (rotary_sin is None):
        fail("rotary_cos, rotary_sin: give both or neither")
    if rotary_cos is None:
        return
    keep = ("float32", A.dtype_name(q))
    c.set("rotary_cos", A.as_float(rotary_cos, q, "rotary_cos", keep))
    c.set("rotary_sin", A.as_float(rotary_sin, q, "rotary_sin", keep))
    c.args.rotary_interleaved = 1 if rotary_interleaved else 0


def merge_states(out_partial, lse_partial, out_dtype=None):
    """Merges n partial attention results over disjoint key sets (what split-KV and context parallelism need).

    out_partial (n, rows, h, d_v) float32/bf16/fp16, lse_partial float32 (n, rows, h). Returns (out, lse):
    lse = log(sum_s exp(lse_s)) float32 (rows, h), out = sum_s exp(lse_s - lse) * out_s (rows, h, d_v) in
    out_dtype (default: out_partial's dtype; float32 output is CPU-only). A partial with lse = -inf
    contributes nothing; rows where all are -inf get out = 0, lse = -inf.
    Not in flash_attn 2 (flash_attn's own combine is internal).
    """
    out_partial = A.as_input(out_partial, "out_partial")
    lse_partial = A.as_input(lse_partial, "lse_partial", ("float32",))
    A.need_ndim(out_partial, (4,), "out_partial")
    _, rows, h, d_v = A.shape_of(out_partial)
    c = merge_call(out_partial)
    c.set_many(out_partial=out_partial, lse_partial=lse_partial)
    out = A.empty_like(out_partial, (rows, h, d_v), out_dtype)
    lse = A.empty_like(out_partial, (rows, h), "float32")
    c.set_many(out=out, lse=lse)
    c.run_merge()
    return out, lse
