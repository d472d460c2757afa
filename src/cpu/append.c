/* append.c — element conversion, rotary embedding, and writing k_new/v_new into the KV cache. */
#include "cpu/cpu.h"

void fc_cpu_load_row(const void *base, fc_dtype dt, int64_t off, int n, float *restrict dst) {
    switch (dt) {
    case FC_BF16: {
        const uint16_t *restrict x = (const uint16_t *)base + off;
        for (int i = 0; i < n; i++) dst[i] = fc_bits_to_f32((uint32_t)x[i] << 16);
        break;
    }
    case FC_FP16: {
        const uint16_t *restrict x = (const uint16_t *)base + off;
        for (int i = 0; i < n; i++) dst[i] = fc_cpu_f16_to_f32(x[i]);
        break;
    }
    case FC_FP32: memcpy(dst, (const float *)base + off, (size_t)n * sizeof(float)); break;
    default: /* fp8 */
        for (int i = 0; i < n; i++) dst[i] = fc_load(base, dt, off + i);
        break;
    }
}

float fc_cpu_descale(const float *s, int64_t sb, int64_t sh, int b, int h) { return s ? s[b * sb + h * sh] : 1.0f; }

/* Pairs (x0, x1) = (2m, 2m+1) interleaved, else (m, m + rotary_dim/2); cos/sin = table[pos][m]. */
void fc_cpu_rotate(const fc_problem *p, float *x, int pos) {
    int half = p->rotary_dim / 2;
    int64_t row = (int64_t)pos * p->rotary_sr;
    for (int m = 0; m < half; m++) {
        float c = fc_load(p->rotary_cos, p->rotary_dtype, row + m);
        float s = fc_load(p->rotary_sin, p->rotary_dtype, row + m);
        int i0 = p->rotary_interleaved ? 2 * m : m;
        int i1 = p->rotary_interleaved ? 2 * m + 1 : m + half;
        float x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

/* Copy n elements of dtype dt from element src_off of src to element dst_off of dst. */
static void copy_row(void *dst, int64_t dst_off, const void *src, int64_t src_off, int n, fc_dtype dt) {
    size_t es = fc_dtype_size(dt);
    memcpy((char *)dst + (size_t)dst_off * es, (const char *)src + (size_t)src_off * es, (size_t)n * es);
}

/* n new elements (q's dtype) into a cache of kv_dtype: copied as they are, or (fp8 cache) divided by the
 * descale and quantised (fc_store saturates). */
static void store_row(const fc_problem *p, void *dst, int64_t dst_off, const float *row, int n, float descale) {
    if (p->kv_dtype == p->dtype) {
        for (int c = 0; c < n; c++) fc_store(dst, p->dtype, dst_off + c, row[c]);
        return;
    }
    for (int c = 0; c < n; c++) fc_store(dst, p->kv_dtype, dst_off + c, row[c] / descale);
}

/* One new key row: rotated at pos in fp32 and stored rounded to the cache's dtype, or copied as is. */
static void append_key(const fc_problem *p, int64_t dst_off, int64_t src_off, int pos, float descale, float *row) {
    if (!p->rotary_cos && p->kv_dtype == p->dtype) {
        copy_row(p->k.data, dst_off, p->k_new.data, src_off, p->d, p->dtype);
        return;
    }
    fc_cpu_load_row(p->k_new.data, p->dtype, src_off, p->d, row);
    if (p->rotary_cos) fc_cpu_rotate(p, row, pos);
    store_row(p, p->k.data, dst_off, row, p->d, descale);
}

/* One new value row: copied, or quantised into an fp8 cache. */
static void append_value(const fc_problem *p, int64_t dst_off, int64_t src_off, float descale, float *row) {
    if (p->kv_dtype == p->dtype) {
        copy_row(p->v.data, dst_off, p->v_new.data, src_off, p->d_v, p->dtype);
        return;
    }
    fc_cpu_load_row(p->v_new.data, p->dtype, src_off, p->d_v, row);
    store_row(p, p->v.data, dst_off, row, p->d_v, descale);
}

void fc_cpu_append(const fc_problem *p, float *row) {
    for (int b = 0; b < p->batch; b++) {
        fc_seqlen s = fc_seqlen_of(p, b);
        for (int t = 0; t < p->s_new; t++) {
            int j = s.s_cache + t;
            fc_kv_loc loc = fc_kv_locate(p, &s, b, j);
            int64_t k_row = fc_kv_offset(&p->k, loc), v_row = fc_kv_offset(&p->v, loc);
            for (int h = 0; h < p->h_k; h++) {
                int64_t kn = (int64_t)b * p->k_new.sb + (int64_t)t * p->k_new.sr + h * p->k_new.sh;
                int64_t vn = (int64_t)b * p->v_new.sb + (int64_t)t * p->v_new.sr + h * p->v_new.sh;
                append_key(p, k_row + h * p->k.sh, kn, s.pos0 + j,
                           fc_cpu_descale(p->k_descale, p->k_descale_sb, p->k_descale_sh, b, h), row);
                append_value(p, v_row + h * p->v.sh, vn,
                             fc_cpu_descale(p->v_descale, p->v_descale_sb, p->v_descale_sh, b, h), row);
            }
        }
    }
}
