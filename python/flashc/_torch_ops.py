"""_torch_ops.py — the flash_attn-style functions as torch custom ops (torch.library), with fake
implementations, so that torch.compile(fullgraph=True) traces a model that calls them.

Eager calls never go through these ops (the dispatcher would cost more than the whole fast path); the
public functions route to them only while torch.compile traces (flashc._attention.compiling). Each op
always returns (out, lse); the function picks what its caller asked for. Registered when flashc is
imported after torch, or on the first call with a torch tensor, or by flashc.register_torch_ops().
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _attention as AT


def _lse_like(q, shape):
    return q.new_empty(shape, dtype=torch.float32)


@torch.library.custom_op("flashc::flash_attn_func", mutates_args=())
def flash_attn_func(q: Tensor, k: Tensor, v: Tensor, softmax_scale: Optional[float], causal: bool, window_left: int,
                    window_right: int, softcap: float, alibi_slopes: Optional[Tensor], sinks: Optional[Tensor],
                    num_splits: int, q_descale: Optional[Tensor], k_descale: Optional[Tensor],
                    v_descale: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    out, lse, _ = AT.flash_attn_func(q, k, v, 0.0, softmax_scale, causal, (window_left, window_right), softcap,
                                     alibi_slopes, False, True, sinks=sinks, num_splits=num_splits, q_descale=q_descale,
                                     k_descale=k_descale, v_descale=v_descale)
    return out, lse


@flash_attn_func.register_fake
def _(q, k, v, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, sinks, num_splits, q_descale,
      k_descale, v_descale):
    b, s_q, h, _ = q.shape
    dt = torch.bfloat16 if q.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else q.dtype  # fp8: bf16 out
    return q.new_empty((b, s_q, h, v.shape[-1]), dtype=dt), _lse_like(q, (b, h, s_q))


@torch.library.custom_op("flashc::flash_attn_varlen_func", mutates_args=())
def flash_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                           max_seqlen_q: int, max_seqlen_k: int, softmax_scale: Optional[float], causal: bool,
                           window_left: int, window_right: int, softcap: float, alibi_slopes: Optional[Tensor],
                           block_table: Optional[Tensor], seqused_k: Optional[Tensor], sinks: Optional[Tensor],
                           num_splits: int, seqused_q: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    out, lse, _ = AT.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, 0.0,
                                            softmax_scale, causal, (window_left, window_right), softcap, alibi_slopes,
                                            False, True, block_table, seqused_k=seqused_k, sinks=sinks,
                                            num_splits=num_splits, seqused_q=seqused_q)
    return out, lse


@flash_attn_varlen_func.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left,
      window_right, softcap, alibi_slopes, block_table, seqused_k, sinks, num_splits, seqused_q):
    total_q, h, _ = q.shape
    return q.new_empty((total_q, h, v.shape[-1])), _lse_like(q, (h, total_q))


@torch.library.custom_op("flashc::flash_attn_with_kvcache", mutates_args=("k_cache", "v_cache"))
def flash_attn_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor], v: Optional[Tensor],
                            rotary_cos: Optional[Tensor], rotary_sin: Optional[Tensor], cache_seqlens: Optional[Tensor],
                            block_table: Optional[Tensor], softmax_scale: Optional[float], causal: bool,
                            window_left: int, window_right: int, softcap: float, rotary_interleaved: bool,
                            alibi_slopes: Optional[Tensor], num_splits: int, sinks: Optional[Tensor],
                            cache_batch_idx: Optional[Tensor], cache_leftpad: Optional[Tensor],
                            k_descale: Optional[Tensor], v_descale: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    return AT.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                                      cache_leftpad, block_table, softmax_scale, causal, (window_left, window_right),
                                      softcap, rotary_interleaved, alibi_slopes, num_splits, True, sinks=sinks,
                                      k_descale=k_descale, v_descale=v_descale)


@flash_attn_with_kvcache.register_fake
def _(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, block_table, softmax_scale, causal,
      window_left, window_right, softcap, rotary_interleaved, alibi_slopes, num_splits, sinks, cache_batch_idx,
      cache_leftpad, k_descale, v_descale):
    b, s_q, h, _ = q.shape
    return q.new_empty((b, s_q, h, v_cache.shape[-1])), _lse_like(q, (b, h, s_q))
