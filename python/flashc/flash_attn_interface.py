"""flash_attn_interface.py — FlashAttention-3's Python interface (hopper's flash_attn_interface) over flashc:
its function names, argument order, defaults and return values, forward only.

    from flashc.flash_attn_interface import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

Accepted and ignored (they tune FA3's kernels or its backward pass): pack_gqa, deterministic, sm_margin,
scheduler_metadata. FP8 (q/k/v descales; fp8 q in flash_attn_func): on the CPU so far. Raise
NotImplementedError: qv, the descales of flash_attn_varlen_func and q_descale of flash_attn_with_kvcache,
attention_chunk != 0, and in flash_attn_with_kvcache cu_seqlens_q, cu_seqlens_k_new, rotary_seqlens. num_splits <= 0 lets flashc choose (FA3: its heuristic).
Extras as keywords: out= (write into the caller's array), sinks= or s_aux= (vLLM's name): the learnable
sink logits, (h,).
"""
from . import _attention as _A


def _unsupported(**given):
    """NotImplementedError naming the first argument that is set (not None, not 0, not False)."""
    for name, value in given.items():
        if value is not None and value is not False and not (isinstance(value, int) and value == 0):
            raise NotImplementedError("flashc.flash_attn_interface: %s is not supported" % name)


def _sinks(sinks, s_aux):
    """vLLM's name for the sink logits (s_aux) is taken as sinks."""
    if sinks is not None and s_aux is not None:
        raise ValueError("flashc.flash_attn_interface: give sinks or s_aux, not both")
    return s_aux if sinks is None else sinks


def _splits(num_splits):
    return num_splits if num_splits and num_splits > 0 else 0


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                    v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                    pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False, *, out=None,
                    sinks=None, s_aux=None):
    """FA3's flash_attn_func: q (b, s_q, h, d), k/v (b, s_k, h_k, d / d_v). Returns out, or (out,
    softmax_lse (b, h, s_q) float32) with return_attn_probs."""
    _unsupported(qv=qv, attention_chunk=attention_chunk)
    r = _A.flash_attn_func(q, k, v, 0.0, softmax_scale, causal, window_size, softcap, None, False,
                           return_attn_probs, sinks=_sinks(sinks, s_aux), num_splits=_splits(num_splits), out=out,
                           q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    return r[:2] if return_attn_probs else r


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                           seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                           v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                           pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False, *, out=None,
                           sinks=None, s_aux=None):
    """FA3's flash_attn_varlen_func: q (total_q, h, d) with cu_seqlens_q, k/v (total_k, h_k, d / d_v) with
    cu_seqlens_k; seqused_k (b) int32 keys used per sequence. Returns out, or (out, softmax_lse (h,
    total_q)) with return_attn_probs."""
    _unsupported(qv=qv, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                 attention_chunk=attention_chunk)
    r = _A.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, 0.0, softmax_scale,
                                  causal, window_size, softcap, None, False, return_attn_probs, None,
                                  seqused_k=seqused_k, sinks=_sinks(sinks, s_aux), num_splits=_splits(num_splits), out=out,
                                  seqused_q=seqused_q)
    return r[:2] if return_attn_probs else r


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                            scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                            return_softmax_lse=False, *, out=None, sinks=None, s_aux=None):
    """FA3's flash_attn_with_kvcache (page_table is FA2's block_table): see flashc.flash_attn_with_kvcache.
    Returns out, or (out, softmax_lse (b, h, s_q)) with return_softmax_lse."""
    _unsupported(qv=qv, cu_seqlens_q=cu_seqlens_q,
                 cu_seqlens_k_new=cu_seqlens_k_new, rotary_seqlens=rotary_seqlens, q_descale=q_descale,
                 attention_chunk=attention_chunk)
    return _A.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                                      cache_leftpad, page_table, softmax_scale, causal, window_size, softcap, rotary_interleaved,
                                      None, _splits(num_splits), return_softmax_lse, sinks=_sinks(sinks, s_aux), out=out,
                                      k_descale=k_descale, v_descale=v_descale)


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    """Merges split partial results: out_partial (n, b, s, h, d) or (n, total, h, d), lse_partial (n, b, s, h)
    or (n, total, h) float32 (FA3/FA4's layout). Returns (out, lse); see flashc.merge_states."""
    return _A.merge_states(out_partial, lse_partial, out_dtype=out_dtype, out=out)
