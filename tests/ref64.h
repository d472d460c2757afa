/* ref64.h — float64 naive attention: the tests' independent statement of flashc.h's semantics. */
#ifndef FLASHC_REF64_H
#define FLASHC_REF64_H

#include <stdint.h>

#include "flashc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of query rows: b * s_q for dense queries, cu_seqlens_q[b] for varlen ones; -1 if unreadable. */
int64_t ref64_total_q(const fc_attn_args *a);

/* Attention of a (host memory, any layout flashc.h allows), naively in float64. Never writes the
 * inputs: with k_new the key list is built logically (cache keys j < seqused_k[i], then the s_new new
 * rows, rotated at positions seqused_k[i] + t). Writes out (total_q, h_q, d_v) and lse (total_q, h_q),
 * contiguous doubles, for the rows ref64_sampled picks only.
 * lowp = 0: float64 throughout from the stored inputs. lowp = 1: the kernels' precision steps —
 * rotated q and k_new rounded to the input dtype, q·k summed in float (what fp32 inputs with large
 * logits need), P = exp(x - lse) rounded to the input dtype (float for fp32) before P·V, out rounded
 * to the output dtype. Returns 0, or -1 on inputs it cannot read. */
int ref64_attn(const fc_attn_args *a, int row_step, int lowp, double *out, double *lse);

/* The rows ref64_attn computes: global row % row_step == 0, and the last row r = s_q - 1 of every
 * sequence, which (bottom-right alignment) sees the most keys, so that a sample never holds only
 * masked or one-key rows (whose reference error is 0, which would make the tolerance 1e-5). */
static inline int ref64_sampled(int64_t row, int64_t r, int64_t s_q, int row_step) {
    return row % row_step == 0 || r == s_q - 1;
}

/* Both references at once, float64 (out, lse) and with the kernels' rounding (low, lse_low), on two
 * threads. slack (NULL: none), (total_q, h_q, d_v + 1) doubles, sampled rows: with FP8 attention (q in
 * fp8), bounds on how far the kernel's FP8 steps may move each out element (d_v) and the lse (the last):
 * the FP8 MMA's reduced-precision sums (up to FP8_MMA_REL_ERR of sum |a b|) of q.k and P.V, and P's e4m3
 * rounding relative to whatever running max the kernel keeps (lowp's is one of them); zeros otherwise.
 * Returns 0, or -1 if either could not read its inputs. */
int ref64_pair(const fc_attn_args *a, int row_step, double *out, double *lse, double *low, double *lse_low,
               double *slack);

#ifdef __cplusplus
}
#endif
#endif /* FLASHC_REF64_H */
