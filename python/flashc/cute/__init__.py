"""flashc.cute — FlashAttention-4's Python interface (flash_attn.cute) over flashc: its names, argument
order, defaults and return values, forward only.

    from flashc.cute import flash_attn_func, flash_attn_varlen_func

Both return (out, lse), lse None unless return_lse. window_size sides are None for unbounded.
learnable_sink (h,) is FA4's sink logit per query head (flashc's sinks). Accepted and ignored: pack_gqa,
deterministic. Raise NotImplementedError: score_mod, mask_mod, block sparsity, aux_tensors, and
(flash_attn_varlen_func) cu_seqlens_k or seqused_q with a dense (4-D) q.
"""
from .. import _attention as _A
from ..flash_attn_interface import flash_attn_combine  # noqa: F401  (FA4 has the same)


def _window(window_size):
    left, right = (None, None) if window_size is None else window_size
    return (-1 if left is None else left, -1 if right is None else right)


def _unsupported(**given):
    for name, value in given.items():
        if value is not None:
            raise NotImplementedError("flashc.cute: %s is not supported" % name)


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(None, None), learnable_sink=None,
                    softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False, mask_mod=None,
                    full_block_cnt=None, full_block_idx=None, mask_block_cnt=None, mask_block_idx=None,
                    block_size=None, return_lse=False, *, out=None):
    """FA4's flash_attn_func: q (b, s_q, h, d), k/v (b, s_k, h_k, d / d_v) -> (out, lse or None)."""
    _unsupported(mask_mod=mask_mod, full_block_cnt=full_block_cnt, full_block_idx=full_block_idx,
                 mask_block_cnt=mask_block_cnt, mask_block_idx=mask_block_idx)
    r = _A.flash_attn_func(q, k, v, 0.0, softmax_scale, causal, _window(window_size), softcap, None, False, True,
                           sinks=learnable_sink, num_splits=max(num_splits or 0, 0), out=out)
    return r[0], (r[1] if return_lse else None)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                           seqused_q=None, seqused_k=None, page_table=None, softmax_scale=None, causal=False,
                           window_size=(None, None), learnable_sink=None, softcap=0.0, num_splits=1, pack_gqa=None,
                           deterministic=False, score_mod=None, mask_mod=None, block_sparse_tensors=None,
                           cu_total_m_blocks=None, cu_total_n_blocks=None, aux_tensors=None, return_lse=False, *,
                           out=None):
    """FA4's flash_attn_varlen_func -> (out, lse or None). q is varlen (total_q, h, d) with cu_seqlens_q, or
    dense (b, s_q, h, d) without; k/v are varlen with cu_seqlens_k, paged with page_table (and seqused_k),
    or dense (b, s_k, h_k, d) with seqused_k. max_seqlen_q / max_seqlen_k default to the rows of q / k."""
    _unsupported(score_mod=score_mod, mask_mod=mask_mod, block_sparse_tensors=block_sparse_tensors,
                 cu_total_m_blocks=cu_total_m_blocks, cu_total_n_blocks=cu_total_n_blocks, aux_tensors=aux_tensors)
    splits = max(num_splits or 0, 0)
    if cu_seqlens_q is None:  # dense q: over a dense or paged cache with seqused_k
        if cu_seqlens_k is not None or seqused_q is not None:
            raise NotImplementedError("flashc.cute: cu_seqlens_k or seqused_q with a dense q (no cu_seqlens_q) is not "
                                      "supported")
        o, lse = _A.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqused_k, block_table=page_table,
                                            softmax_scale=softmax_scale, causal=causal, window_size=_window(window_size),
                                            softcap=softcap, num_splits=splits, return_softmax_lse=True,
                                            sinks=learnable_sink, out=out)
        return o, (lse if return_lse else None)
    max_q = q.shape[0] if max_seqlen_q is None else max_seqlen_q
    max_k = (page_table.shape[1] * k.shape[1] if page_table is not None else k.shape[0]) if max_seqlen_k is None \
        else max_seqlen_k
    if page_table is not None and seqused_k is None:
        raise ValueError("flashc.cute: page_table needs seqused_k (the keys of each sequence)")
    r = _A.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, 0.0, softmax_scale, causal,
                                  _window(window_size), softcap, None, False, True, page_table, seqused_k=seqused_k,
                                  sinks=learnable_sink, num_splits=splits, out=out, seqused_q=seqused_q)
    return r[0], (r[1] if return_lse else None)
