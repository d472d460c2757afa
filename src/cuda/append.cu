// append.cu — writes k_new/v_new into the KV cache on the GPU (k_new rotated first when rotary is set).
#include <stdint.h>

#include "seqlen.cuh"

#define APPEND_WARPS 4 // warps per block; one warp per new (sequence, token, KV head) row pair

// Copy n bytes from src to dst with the 32 lanes of a warp: 16-byte pieces where both ends and n
// allow, else 4-byte, else 2-byte (every dtype is at least 2 bytes, so 2 always works).
__device__ __forceinline__ void warp_copy_bytes(char *dst, const char *src, int64_t n, int lane) {
    uintptr_t align = (uintptr_t)dst | (uintptr_t)src | (uintptr_t)n;
    if (align % 16 == 0) {
        for (int64_t i = (int64_t)lane * 16; i < n; i += 32 * 16)
            *(uint4 *)(dst + i) = *(const uint4 *)(src + i);
    } else if (align % 4 == 0) {
        for (int64_t i = (int64_t)lane * 4; i < n; i += 32 * 4)
            *(uint32_t *)(dst + i) = *(const uint32_t *)(src + i);
    } else {
        for (int64_t i = (int64_t)lane * 2; i < n; i += 32 * 2)
            *(uint16_t *)(dst + i) = *(const uint16_t *)(src + i);
    }
}

// Copy n elements of dtype dt: element src_off of src to element dst_off of dst.
__device__ __forceinline__ void warp_copy_row(void *dst, int64_t dst_off, const void *src, int64_t src_off, int n,
                                              fc_dtype dt, int lane) {
    int64_t es = dt == FC_FP32 ? 4 : 2;
    warp_copy_bytes((char *)dst + dst_off * es, (const char *)src + src_off * es, n * es, lane);
}

// A new element x (fp32) into the cache: rounded to its dtype, or (fp8 cache) divided by the cache's
// dequantisation scale and quantised, saturating (the CPU's store_row, bit for bit).
__device__ __forceinline__ void store_new(const fc_problem *p, void *cache, int64_t off, float x, float descale) {
    if (p->kv_dtype == p->dtype) fc_store(cache, p->dtype, off, x);
    else fc_store(cache, p->kv_dtype, off, x / descale);
}

// One row of n new elements into an fp8 cache (the CPU's append_value): through fp32, quantised.
__device__ __forceinline__ void warp_quantise_row(const fc_problem *p, void *cache, int64_t dst_off, const void *src,
                                                  int64_t src_off, int n, float descale, int lane) {
    for (int c = lane; c < n; c += 32) store_new(p, cache, dst_off + c, fc_load(src, p->dtype, src_off + c), descale);
}

// One key row rotated at absolute position pos, as the CPU's fc_cpu_rotate + store_row: every feature
// goes through fp32 and is stored rounded (or quantised) once; pair m uses cos/sin (pos, m) and the
// unfused products
//   x0' = x0*c - x1*s,   x1' = x0*s + x1*c   (each product and sum rounded to fp32, no fma).
__device__ __forceinline__ void warp_rotate_row(const fc_problem *p, int64_t dst_off, int64_t src_off, int pos,
                                                float descale, int lane) {
    int half = p->rotary_dim / 2;
    int64_t trow = (int64_t)pos * p->rotary_sr;
    for (int m = lane; m < half; m += 32) {
        float c = fc_load(p->rotary_cos, p->rotary_dtype, trow + m);
        float s = fc_load(p->rotary_sin, p->rotary_dtype, trow + m);
        int i0 = p->rotary_interleaved ? 2 * m : m;
        int i1 = p->rotary_interleaved ? 2 * m + 1 : m + half;
        float x0 = fc_load(p->k_new.data, p->dtype, src_off + i0);
        float x1 = fc_load(p->k_new.data, p->dtype, src_off + i1);
        store_new(p, p->k.data, dst_off + i0, __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)), descale);
        store_new(p, p->k.data, dst_off + i1, __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c)), descale);
    }
    for (int c = p->rotary_dim + lane; c < p->d; c += 32) // past rotary_dim: through fp32, as the CPU does
        store_new(p, p->k.data, dst_off + c, fc_load(p->k_new.data, p->dtype, src_off + c), descale);
}

// grid: ceil(batch * s_new * h_k / APPEND_WARPS) blocks of APPEND_WARPS warps.
// Warp w handles item (b, t, h) = (w / (s_new*h_k), (w / h_k) % s_new, w % h_k): k_new[b, t, h, 0:d] and
// v_new[b, t, h, 0:d_v] go to cache row j = seqused_k[b] + t of sequence b, KV head h.
__global__ void __launch_bounds__(APPEND_WARPS * 32) append_kernel(fc_problem p) {
    int64_t item = (int64_t)blockIdx.x * APPEND_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (item >= (int64_t)p.batch * p.s_new * p.h_k) return;
    int h = (int)(item % p.h_k);
    int64_t bt = item / p.h_k;
    int t = (int)(bt % p.s_new), b = (int)(bt / p.s_new);

    int bad = 0; // FC_BAD_*: reported at the end
    fc_seqlen s = seqlen_checked(p, b, &bad);
    int j = s.s_cache + t;
    fc_kv_loc loc = fc_kv_locate(&p, &s, b, j);
    loc.outer = page_checked(p, loc.outer, &bad);
    int64_t k_dst = fc_kv_offset(&p.k, loc) + h * p.k.sh;
    int64_t v_dst = fc_kv_offset(&p.v, loc) + h * p.v.sh;
    int64_t k_src = (int64_t)b * p.k_new.sb + (int64_t)t * p.k_new.sr + h * p.k_new.sh;
    int64_t v_src = (int64_t)b * p.v_new.sb + (int64_t)t * p.v_new.sr + h * p.v_new.sh;

    // fp8 cache: k_new / v_new quantised with the descale of (sequence b, KV head h), as the CPU does
    float ks = p.k_descale ? p.k_descale[b * p.k_descale_sb + h * p.k_descale_sh] : 1.0f;
    float vs = p.v_descale ? p.v_descale[b * p.v_descale_sb + h * p.v_descale_sh] : 1.0f;
    bool fp8 = p.kv_dtype != p.dtype;
    if (p.rotary_cos) warp_rotate_row(&p, k_dst, k_src, rotary_pos_checked(p, b, s.pos0 + j), ks, lane);
    else if (fp8) warp_quantise_row(&p, p.k.data, k_dst, p.k_new.data, k_src, p.d, ks, lane);
    else warp_copy_row(p.k.data, k_dst, p.k_new.data, k_src, p.d, p.dtype, lane);
    if (fp8) warp_quantise_row(&p, p.v.data, v_dst, p.v_new.data, v_src, p.d_v, vs, lane);
    else warp_copy_row(p.v.data, v_dst, p.v_new.data, v_src, p.d_v, p.dtype, lane);
    if (bad && lane == 0) report_sequence(p, b, bad);
}

fc_status fc_cuda_append(const fc_problem *p, cudaStream_t stream) {
    if (!p->k_new.data) return FC_OK;
    int64_t items = (int64_t)p->batch * p->s_new * p->h_k;
    if (items <= 0) return FC_OK;
    int64_t blocks = (items + APPEND_WARPS - 1) / APPEND_WARPS;
    if (blocks > 0x7fffffff)
        return fc_fail(FC_ERR_UNSUPPORTED, "k_new", "%lld rows (b x s_new x h_k) are more than one append launch covers",
                       (long long)items);
    append_kernel<<<(unsigned)blocks, APPEND_WARPS * 32, 0, stream>>>(*p);
    FC_CUDA_LAUNCHED("append_kernel");
    return FC_OK;
}
