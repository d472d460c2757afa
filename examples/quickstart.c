/* quickstart.c — the README's C example: causal GQA attention over a paged KV cache on the CPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "flashc.h"

int main(void) {
    enum { B = 2, S_Q = 4, H_Q = 8, H_K = 2, D = 128, PAGE = 16, PAGES_PER_SEQ = 4 };
    int32_t seqused_k[B] = {37, 50};                  /* keys in each sequence's cache */
    int32_t page_table[B][PAGES_PER_SEQ] = {{3, 0, 6, 1}, {2, 7, 5, 4}};
    float *q = malloc(sizeof(float) * B * S_Q * H_Q * D), *out = malloc(sizeof(float) * B * S_Q * H_Q * D);
    float *k = malloc(sizeof(float) * B * PAGES_PER_SEQ * PAGE * H_K * D);
    float *v = malloc(sizeof(float) * B * PAGES_PER_SEQ * PAGE * H_K * D);
    float lse[B][H_Q][S_Q];
    for (int i = 0; i < B * S_Q * H_Q * D; i++) q[i] = sinf((float)i);
    for (int i = 0; i < B * PAGES_PER_SEQ * PAGE * H_K * D; i++) { k[i] = cosf((float)i); v[i] = sinf(0.5f * i); }

    fc_attn_args a;
    fc_attn_args_init(&a);                            /* CPU, scale 1/sqrt(D), no mask */
    a.q = fc_tensor_4d(q, FC_FP32, B, S_Q, H_Q, D);
    a.k = fc_tensor_4d(k, FC_FP32, B * PAGES_PER_SEQ, PAGE, H_K, D);   /* (num_pages, page_size, h_k, d) */
    a.v = fc_tensor_4d(v, FC_FP32, B * PAGES_PER_SEQ, PAGE, H_K, D);
    a.out = fc_tensor_4d(out, FC_FP32, B, S_Q, H_Q, D);
    a.lse = fc_tensor_3d(lse, FC_FP32, B, H_Q, S_Q);
    a.page_table = fc_tensor_2d(page_table, FC_INT32, B, PAGES_PER_SEQ);
    a.seqused_k = fc_tensor_1d(seqused_k, FC_INT32, B);
    a.causal = 1;                                     /* the 4 queries are the last 4 positions */

    fc_status st = fc_attn_fwd(&a, NULL, 0, NULL);
    if (st != FC_OK) {
        fprintf(stderr, "flashc: %s: %s\n", fc_status_string(st), fc_last_error());
        return 1;
    }
    printf("out[0][0][0][0..3] = %.4f %.4f %.4f %.4f, lse[1][7][3] = %.4f\n", out[0], out[1], out[2], out[3],
           lse[1][7][3]);

    a.k.shape[2] = a.v.shape[2] = 3;                  /* a mistake: 3 KV heads do not divide 8 query heads */
    st = fc_attn_fwd(&a, NULL, 0, NULL);
    printf("bad call: %s: %s\n", fc_status_string(st), fc_last_error());
    free(q); free(out); free(k); free(v);
    return st == FC_ERR_INVALID_ARGUMENT ? 0 : 1;
}
