/* api.c — the public entry points: argument validation, normalization into fc_problem, dispatch. */
#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/* ---------------------------------------------------------------------------------------------- */
/* Status, messages, version                                                                       */

static _Thread_local char last_error[512];

fc_status fc_fail(fc_status status, const char *arg, const char *fmt, ...) {
    int n = snprintf(last_error, sizeof last_error, "%s: ", arg);
    if (n < 0 || n >= (int)sizeof last_error) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

void fc_clear_error(void) { last_error[0] = '\0'; }

const char *fc_last_error(void) { return last_error; }

const char *fc_status_string(fc_status status) {
    switch (status) {
    case FC_OK: return "ok";
    case FC_ERR_INVALID_ARGUMENT: return "invalid argument";
    case FC_ERR_UNSUPPORTED: return "unsupported";
    case FC_ERR_CUDA: return "CUDA error";
    case FC_ERR_OUT_OF_MEMORY: return "out of memory";
    case FC_ERR_NO_DEVICE: return "no CUDA device";
    case FC_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

#define FC_STR2(x) #x
#define FC_STR(x) FC_STR2(x)
const char *fc_version(void) {
    return FC_STR(FLASHC_VERSION_MAJOR) "." FC_STR(FLASHC_VERSION_MINOR) "." FC_STR(FLASHC_VERSION_PATCH);
}

static const char *dtype_name(fc_dtype dt) {
    switch (dt) {
    case FC_BF16: return "bf16";
    case FC_FP16: return "fp16";
    case FC_FP32: return "fp32";
    case FC_E4M3: return "e4m3";
    case FC_E5M2: return "e5m2";
    case FC_INT32: return "int32";
    }
    return "unknown dtype";
}

int fc_cuda_available(void) {
    return fc_cuda_built() && fc_cuda_device_count() > 0 && fc_cuda_capability() == FC_CUDA_CAPABILITY;
}

void fc_attn_args_init(fc_attn_args *a) {
    if (!a) return;
    memset(a, 0, sizeof *a);
    a->device = FC_DEVICE_CPU;
    a->window_left = -1;
    a->window_right = -1;
}

/* ---------------------------------------------------------------------------------------------- */
/* Tensor checks. Each returns FC_OK or fails naming the tensor.                                   */

#define TRY(x) do { fc_status st_ = (x); if (st_ != FC_OK) return st_; } while (0)

static int is_present(const fc_tensor *t) { return t->data != NULL; }

/* Head dims: multiples of 8 from 8 to 256 (CUDA runs them on the next kernel up: 64, 96, 128, 192, 256). */
static int head_dim_supported(int64_t d) { return d >= 8 && d <= 256 && d % 8 == 0; }

/* Largest element offset t can reach, checked against int64 overflow (in bytes too). */
static fc_status check_extent(const fc_tensor *t, const char *name) {
    int64_t max_off = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) return FC_OK; /* empty: touches nothing */
        int64_t term;
        if (__builtin_mul_overflow(t->shape[i] - 1, t->stride[i], &term) ||
            __builtin_add_overflow(max_off, term, &max_off))
            return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "shape x stride overflows int64 offsets");
    }
    int64_t bytes;
    if (__builtin_add_overflow(max_off, 1, &max_off) ||
        __builtin_mul_overflow(max_off, (int64_t)fc_dtype_size(t->dtype), &bytes) ||
        (int64_t)(uintptr_t)t->data > INT64_MAX - bytes)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "byte extent overflows the address space");
    return FC_OK;
}

/* Present, of dtype, ndim, non-negative shapes and strides, aligned, no int64 overflow.
 * contiguous_last: the last dim must have stride 1. align: required byte alignment of data. */
static fc_status check_tensor(const fc_tensor *t, const char *name, int ndim, fc_dtype dtype,
                              int contiguous_last, size_t align) {
    if (!t->data) return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "is required but NULL");
    if (t->ndim != ndim) return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "must have %d dims, has %d", ndim, t->ndim);
    if (t->dtype != dtype)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "dtype %s, expected %s", dtype_name(t->dtype), dtype_name(dtype));
    for (int i = 0; i < ndim; i++) {
        if (t->shape[i] < 0 || t->shape[i] > INT32_MAX)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "shape[%d] = %lld out of range [0, 2^31)", i,
                           (long long)t->shape[i]);
        if (t->stride[i] < 0)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "stride[%d] = %lld is negative", i, (long long)t->stride[i]);
    }
    if (contiguous_last && t->stride[ndim - 1] != 1 && t->shape[ndim - 1] > 1)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "last dim must be contiguous (stride 1), stride is %lld",
                       (long long)t->stride[ndim - 1]);
    if ((uintptr_t)t->data % align != 0)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "data pointer %p is not %zu-byte aligned", t->data, align);
    return check_extent(t, name);
}

static fc_status expect_dim(const fc_tensor *t, const char *name, int i, int64_t want, const char *what) {
    if (t->shape[i] != want)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "shape[%d] = %lld, expected %lld (%s)", i,
                       (long long)t->shape[i], (long long)want, what);
    return FC_OK;
}

/* An int32 index vector or matrix (cu_seqlens, seqused_k, page_table): the last dim contiguous. */
static fc_status check_index(const fc_tensor *t, const char *name, int ndim) {
    return check_tensor(t, name, ndim, FC_INT32, 1, 4);
}

/* Alignment the device needs of q/k/v-like data: the element size on the CPU, 16 bytes on CUDA. */
static size_t data_align(fc_device dev, fc_dtype dt) { return dev == FC_DEVICE_CUDA ? 16 : fc_dtype_size(dt); }

static fc_status check_cuda_strides(const fc_tensor *t, const char *name) {
    int64_t per16 = 16 / (int64_t)fc_dtype_size(t->dtype);
    for (int i = 0; i < t->ndim - 1; i++)
        if (t->stride[i] % per16 != 0)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "stride[%d] = %lld must be a multiple of %lld on CUDA (16 bytes)",
                           i, (long long)t->stride[i], (long long)per16);
    return FC_OK;
}

/* A q/k/v/out-like tensor: dtype of the problem, last dim contiguous, device alignment. */
static fc_status check_data(const fc_tensor *t, const char *name, int ndim, fc_dtype dt, fc_device dev) {
    TRY(check_tensor(t, name, ndim, dt, 1, data_align(dev, dt)));
    return dev == FC_DEVICE_CUDA ? check_cuda_strides(t, name) : FC_OK;
}

static fc_view view_of(const fc_tensor *t) {
    fc_view v = {t->data, 0, 0, 0};
    if (t->ndim == 4) { v.sb = t->stride[0]; v.sr = t->stride[1]; v.sh = t->stride[2]; }
    else if (t->ndim == 3) { v.sr = t->stride[0]; v.sh = t->stride[1]; }
    return v;
}

/* ---------------------------------------------------------------------------------------------- */
/* Attention: shapes and scalars (no tensor contents read)                                         */

static fc_status check_device(fc_device dev) {
    if (dev != FC_DEVICE_CPU && dev != FC_DEVICE_CUDA)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "device", "%d is neither FC_DEVICE_CPU nor FC_DEVICE_CUDA", (int)dev);
    return FC_OK;
}

/* After validation: a CUDA request needs a CUDA build and a visible GPU. */
static fc_status check_cuda_present(fc_device dev) {
    if (dev != FC_DEVICE_CUDA) return FC_OK;
    if (!fc_cuda_built())
        return fc_fail(FC_ERR_NO_DEVICE, "device", "this flashc was built without CUDA (nvcc not found at build time)");
    if (fc_cuda_device_count() == 0) return fc_fail(FC_ERR_NO_DEVICE, "device", "no CUDA device is visible");
    int cc = fc_cuda_capability();
    if (cc != FC_CUDA_CAPABILITY)
        return fc_fail(FC_ERR_NO_DEVICE, "device",
                       "the current GPU has compute capability %d.%d; flashc's CUDA kernels are built for sm_90a "
                       "(H100, H200) only", cc / 10, cc % 10);
    return FC_OK;
}

/* q and out: dense (b, s_q, h_q, d) or varlen (total_q, h_q, d) with cu_seqlens_q (b+1). */
static fc_status shape_queries(const fc_attn_args *a, fc_problem *p) {
    const fc_tensor *q = &a->q;
    if (!is_present(q)) return fc_fail(FC_ERR_INVALID_ARGUMENT, "q", "is required but NULL");
    int fp8 = q->dtype == FC_E4M3 || q->dtype == FC_E5M2;
    if (fp8) { /* FP8 attention: out in bf16 or fp16 gives the activations' dtype */
        if (a->out.dtype != FC_BF16 && a->out.dtype != FC_FP16)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "out", "dtype %s: with fp8 q, out is bf16 or fp16",
                           dtype_name(a->out.dtype));
    } else if (q->dtype != FC_BF16 && q->dtype != FC_FP16 && q->dtype != FC_FP32) {
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "q", "dtype %s, expected bf16, fp16, fp32, e4m3 or e5m2",
                       dtype_name(q->dtype));
    }
    if (q->dtype == FC_FP32 && a->device == FC_DEVICE_CUDA)
        return fc_fail(FC_ERR_UNSUPPORTED, "q", "fp32 runs on the CPU only; use bf16 or fp16 on CUDA");
    p->q_dtype = q->dtype;
    p->dtype = fp8 ? a->out.dtype : q->dtype;
    int varlen = is_present(&a->cu_seqlens_q);
    TRY(check_data(q, "q", varlen ? 3 : 4, p->q_dtype, a->device));
    int hd = varlen ? 1 : 2; /* index of the head dim */
    p->h_q = (int)q->shape[hd];
    p->d = (int)q->shape[hd + 1];
    if (p->h_q < 1) return fc_fail(FC_ERR_INVALID_ARGUMENT, "q", "has no heads (shape[%d] = 0)", hd);
    if (!head_dim_supported(p->d))
        return fc_fail(FC_ERR_UNSUPPORTED, "q", "head dim %d not supported (a multiple of 8 from 8 to 256)", p->d);
    if (varlen) {
        TRY(check_index(&a->cu_seqlens_q, "cu_seqlens_q", 1));
        if (a->cu_seqlens_q.shape[0] < 1)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "cu_seqlens_q", "needs b+1 >= 1 entries, has 0");
        if (a->max_seqlen_q < 0)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "max_seqlen_q", "= %d is negative", a->max_seqlen_q);
        if (a->device == FC_DEVICE_CUDA && a->max_seqlen_q == 0 && q->shape[0] > 0)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "max_seqlen_q", "is required with varlen q on CUDA");
        p->batch = (int)a->cu_seqlens_q.shape[0] - 1;
        p->total_q = q->shape[0];
        p->s_q = a->max_seqlen_q; /* CPU: refined from the contents */
        p->cu_seqlens_q = (const int32_t *)a->cu_seqlens_q.data;
    } else {
        p->batch = (int)q->shape[0];
        p->s_q = (int)q->shape[1];
        p->total_q = (int64_t)p->batch * p->s_q;
    }
    if (is_present(&a->seqused_q)) {
        TRY(check_index(&a->seqused_q, "seqused_q", 1));
        TRY(expect_dim(&a->seqused_q, "seqused_q", 0, p->batch, "b"));
        p->seqused_q = (const int32_t *)a->seqused_q.data;
    }
    p->q = view_of(q);
    return FC_OK;
}

static fc_status shape_output(const fc_attn_args *a, fc_problem *p) {
    const fc_tensor *o = &a->out, *q = &a->q;
    TRY(check_data(o, "out", q->ndim, p->dtype, a->device));
    for (int i = 0; i < q->ndim - 1; i++) TRY(expect_dim(o, "out", i, q->shape[i], "as q"));
    p->d_v = (int)o->shape[q->ndim - 1];
    p->out = view_of(o);
    if (!is_present(&a->lse)) return FC_OK;
    const fc_tensor *l = &a->lse;
    if (p->cu_seqlens_q) {
        TRY(check_tensor(l, "lse", 2, FC_FP32, 0, 4));
        TRY(expect_dim(l, "lse", 0, p->h_q, "h_q"));
        TRY(expect_dim(l, "lse", 1, p->total_q, "total_q"));
        p->lse_sb = 0; p->lse_sh = l->stride[0]; p->lse_sr = l->stride[1];
    } else {
        TRY(check_tensor(l, "lse", 3, FC_FP32, 0, 4));
        TRY(expect_dim(l, "lse", 0, p->batch, "b"));
        TRY(expect_dim(l, "lse", 1, p->h_q, "h_q"));
        TRY(expect_dim(l, "lse", 2, p->s_q, "s_q"));
        p->lse_sb = l->stride[0]; p->lse_sh = l->stride[1]; p->lse_sr = l->stride[2];
    }
    p->lse = (float *)l->data;
    return FC_OK;
}

/* k_descale / v_descale: float32 (b, h_k), any strides, only with an fp8 cache (h_k: k's heads). */
static fc_status shape_descale(const fc_attn_args *a, fc_problem *p, const fc_tensor *t, const char *name,
                               const float **data, int64_t *sb, int64_t *sh) {
    if (!is_present(t)) return FC_OK;
    if (p->kv_dtype == p->dtype)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "is only for an fp8 (e4m3 / e5m2) k and v; they are %s",
                       dtype_name(p->kv_dtype));
    TRY(check_tensor(t, name, 2, FC_FP32, 0, 4));
    int nd = a->k.ndim;
    TRY(expect_dim(t, name, 0, p->batch, "b"));
    TRY(expect_dim(t, name, 1, a->k.shape[nd - 2], "h_k"));
    *data = (const float *)t->data;
    *sb = t->stride[0];
    *sh = t->stride[1];
    return FC_OK;
}

/* k and v: dense, varlen or paged; batch, heads and head dims consistent with q and out. */
static fc_status shape_keys(const fc_attn_args *a, fc_problem *p) {
    const fc_tensor *k = &a->k, *v = &a->v;
    int paged = is_present(&a->page_table), varlen = is_present(&a->cu_seqlens_k);
    if (paged && varlen)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "cu_seqlens_k", "cannot be combined with page_table; give seqused_k");
    p->kv_layout = paged ? FC_KV_PAGED : varlen ? FC_KV_VARLEN : FC_KV_DENSE;
    int nd = varlen ? 3 : 4;
    p->kv_dtype = p->q_dtype != p->dtype ? p->q_dtype /* fp8 q: k and v of its format */
                : is_present(k) && (k->dtype == FC_E4M3 || k->dtype == FC_E5M2) ? k->dtype : p->dtype;
    TRY(check_data(k, "k", nd, p->kv_dtype, a->device));
    TRY(check_data(v, "v", nd, p->kv_dtype, a->device));
    TRY(shape_descale(a, p, &a->k_descale, "k_descale", &p->k_descale, &p->k_descale_sb, &p->k_descale_sh));
    TRY(shape_descale(a, p, &a->q_descale, "q_descale", &p->q_descale, &p->q_descale_sb, &p->q_descale_sh));
    if (p->q_descale && p->q_dtype == p->dtype)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "q_descale", "is only for an fp8 q; q is %s", dtype_name(p->q_dtype));
    TRY(shape_descale(a, p, &a->v_descale, "v_descale", &p->v_descale, &p->v_descale_sb, &p->v_descale_sh));
    for (int i = 0; i < nd - 1; i++) TRY(expect_dim(v, "v", i, k->shape[i], "as k"));
    TRY(expect_dim(k, "k", nd - 1, p->d, "d, as q"));
    TRY(expect_dim(v, "v", nd - 1, p->d_v, "d_v, as out"));
    if (!head_dim_supported(p->d_v))
        return fc_fail(FC_ERR_UNSUPPORTED, "v", "head dim %d not supported (a multiple of 8 from 8 to 256)", p->d_v);
    p->h_k = (int)k->shape[nd - 2];
    if (p->h_k < 1 || p->h_q % p->h_k != 0)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "k", "shape[%d] = %d (h_k) must divide h_q = %d", nd - 2, p->h_k, p->h_q);
    p->k = view_of(k);
    p->v = view_of(v);
    if (paged) {
        TRY(check_index(&a->page_table, "page_table", 2));
        TRY(expect_dim(&a->page_table, "page_table", 0, p->batch, "b"));
        p->num_pages = (int)k->shape[0];
        p->page_size = (int)k->shape[1];
        if (p->page_size < 1) return fc_fail(FC_ERR_INVALID_ARGUMENT, "k", "page_size (shape[1]) must be >= 1");
        fc_fast_div_init((uint32_t)p->page_size, &p->page_div_mul, &p->page_div_shift);
        p->max_pages = (int)a->page_table.shape[1];
        p->page_table = (const int32_t *)a->page_table.data;
        p->page_table_sb = a->page_table.stride[0];
        if (!is_present(&a->seqused_k))
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "seqused_k", "is required with page_table");
        int64_t cap = (int64_t)p->max_pages * p->page_size;
        if (cap > FC_MAX_SEQ)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "page_table", "%d pages of %d keys hold %lld keys per sequence; at most "
                           "2^30 are supported", p->max_pages, p->page_size, (long long)cap);
        p->s_k = (int)cap;
    } else if (varlen) {
        TRY(check_index(&a->cu_seqlens_k, "cu_seqlens_k", 1));
        TRY(expect_dim(&a->cu_seqlens_k, "cu_seqlens_k", 0, (int64_t)p->batch + 1, "b+1, as cu_seqlens_q or q"));
        if (a->max_seqlen_k < 0)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "max_seqlen_k", "= %d is negative", a->max_seqlen_k);
        if (a->device == FC_DEVICE_CUDA && a->max_seqlen_k == 0 && k->shape[0] > 0)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "max_seqlen_k", "is required with varlen k on CUDA");
        p->cu_seqlens_k = (const int32_t *)a->cu_seqlens_k.data;
        p->s_k = a->max_seqlen_k; /* CPU: refined from the contents */
        p->total_k = k->shape[0];
    } else {
        if (!is_present(&a->kv_batch_idx) && k->shape[0] < p->batch) /* a larger cache is fine: row i is sequence i */
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "k", "shape[0] = %lld, expected at least b = %d (sequence i uses "
                           "cache row i)", (long long)k->shape[0], p->batch);
        if (k->shape[0] < 1 && p->batch > 0)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "k", "shape[0] = 0: kv_batch_idx names rows of an empty cache");
        p->s_k = (int)k->shape[1];
        p->k_batch = (int)k->shape[0];
    }
    static const char *const per_seq[2] = {"kv_batch_idx", "kv_leftpad"};
    const fc_tensor *per_seq_t[2] = {&a->kv_batch_idx, &a->kv_leftpad};
    for (int i = 0; i < 2; i++) {
        if (!is_present(per_seq_t[i])) continue;
        if (paged || varlen)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, per_seq[i], "needs a dense cache (k of shape (b_k, s_k, h_k, d)), "
                           "not a %s one", paged ? "paged" : "varlen");
        TRY(check_index(per_seq_t[i], per_seq[i], 1));
        TRY(expect_dim(per_seq_t[i], per_seq[i], 0, p->batch, "b"));
    }
    p->kv_batch_idx = (const int32_t *)a->kv_batch_idx.data;
    p->kv_leftpad = (const int32_t *)a->kv_leftpad.data;
    if (is_present(&a->seqused_k)) {
        TRY(check_index(&a->seqused_k, "seqused_k", 1));
        TRY(expect_dim(&a->seqused_k, "seqused_k", 0, p->batch, "b"));
        p->seqused_k = (const int32_t *)a->seqused_k.data;
    }
    return FC_OK;
}

/* k_new/v_new and the rotary tables. */
static fc_status shape_append(const fc_attn_args *a, fc_problem *p) {
    int has_k = is_present(&a->k_new), has_v = is_present(&a->v_new);
    int has_cos = is_present(&a->rotary_cos), has_sin = is_present(&a->rotary_sin);
    if (has_cos != has_sin)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, has_cos ? "rotary_sin" : "rotary_cos", "rotary_cos and rotary_sin come together");
    if (has_cos && !has_k)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "rotary_cos", "rotary needs k_new (it rotates the appended keys)");
    if (has_k != has_v)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, has_k ? "v_new" : "k_new", "k_new and v_new come together");
    if (!has_k) return FC_OK;
    if (p->q_dtype != p->dtype)
        return fc_fail(FC_ERR_UNSUPPORTED, "k_new", "appending with fp8 queries is not supported (append with bf16 / "
                       "fp16 queries into an fp8 cache)");
    if (p->kv_layout == FC_KV_VARLEN)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "k_new", "append needs a dense or paged cache, not varlen k");
    if (!p->seqused_k)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "seqused_k", "is required with k_new (where to append)");
    TRY(check_data(&a->k_new, "k_new", 4, p->dtype, a->device));
    TRY(check_data(&a->v_new, "v_new", 4, p->dtype, a->device));
    TRY(expect_dim(&a->k_new, "k_new", 0, p->batch, "b"));
    TRY(expect_dim(&a->k_new, "k_new", 2, p->h_k, "h_k"));
    TRY(expect_dim(&a->k_new, "k_new", 3, p->d, "d"));
    TRY(expect_dim(&a->v_new, "v_new", 0, p->batch, "b"));
    TRY(expect_dim(&a->v_new, "v_new", 1, a->k_new.shape[1], "s_new, as k_new"));
    TRY(expect_dim(&a->v_new, "v_new", 2, p->h_k, "h_k"));
    TRY(expect_dim(&a->v_new, "v_new", 3, p->d_v, "d_v"));
    p->s_new = (int)a->k_new.shape[1];
    p->k_new = view_of(&a->k_new);
    p->v_new = view_of(&a->v_new);
    if (!has_cos) return FC_OK;
    const fc_tensor *c = &a->rotary_cos, *s = &a->rotary_sin;
    fc_dtype rdt = c->dtype == FC_FP32 ? FC_FP32 : p->dtype;
    TRY(check_tensor(c, "rotary_cos", 2, rdt, 1, fc_dtype_size(rdt)));
    TRY(check_tensor(s, "rotary_sin", 2, rdt, 1, fc_dtype_size(rdt)));
    TRY(expect_dim(s, "rotary_sin", 0, c->shape[0], "max_pos, as rotary_cos"));
    TRY(expect_dim(s, "rotary_sin", 1, c->shape[1], "rotary_dim/2, as rotary_cos"));
    if (s->stride[0] != c->stride[0])
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "rotary_sin", "stride[0] = %lld must equal rotary_cos's %lld",
                       (long long)s->stride[0], (long long)c->stride[0]);
    if (c->shape[1] < 1 || 2 * c->shape[1] > p->d)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "rotary_cos", "shape[1] = %lld: rotary_dim = 2*shape[1] must be in [2, d = %d]",
                       (long long)c->shape[1], p->d);
    p->rotary_cos = c->data;
    p->rotary_sin = s->data;
    p->rotary_dtype = rdt;
    p->rotary_sr = c->stride[0];
    p->rotary_dim = (int)(2 * c->shape[1]);
    p->rotary_max_pos = (int)c->shape[0];
    p->rotary_interleaved = a->rotary_interleaved != 0;
    return FC_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Attention: sizes the kernels index in int (no tensor contents read)                             */

/* Upper bounds of one sequence's queries and keys, whatever the index tensors hold: the dense shapes;
 * varlen, the rows of the tensor (or max_seqlen, if larger); paged, max_pages * page_size. */
static int64_t query_bound(const fc_attn_args *a, const fc_problem *p) {
    if (!p->cu_seqlens_q) return p->s_q;
    return p->total_q > a->max_seqlen_q ? p->total_q : a->max_seqlen_q;
}

static int64_t key_bound(const fc_attn_args *a, const fc_problem *p) {
    if (p->kv_layout != FC_KV_VARLEN) return p->s_k;
    return p->total_k > a->max_seqlen_k ? p->total_k : a->max_seqlen_k;
}

/* At most FC_MAX_SEQ packed query rows and keys per sequence (flashc.h: "Sizes"); an append fits the cache. */
static fc_status check_sizes(const fc_attn_args *a, const fc_problem *p) {
    int64_t group = p->h_q / p->h_k, queries = query_bound(a, p), keys = key_bound(a, p);
    if (queries * group > FC_MAX_SEQ) {
        const char *name = p->cu_seqlens_q && a->max_seqlen_q > p->total_q ? "max_seqlen_q" : "q";
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "%lld queries per sequence x %lld query heads per KV head = %lld "
                       "rows; at most 2^30 are supported", (long long)queries, (long long)group,
                       (long long)(queries * group));
    }
    if (keys > FC_MAX_SEQ) {
        const char *name = p->kv_layout == FC_KV_VARLEN && a->max_seqlen_k > p->total_k ? "max_seqlen_k" : "k";
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "%lld keys per sequence; at most 2^30 are supported", (long long)keys);
    }
    if (p->k_new.data && p->s_new > p->s_k)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "k_new", "s_new = %d new keys exceed the cache's capacity of %d", p->s_new,
                       p->s_k);
    return FC_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Attention: scores                                                                               */

static int is_finite(float x) { return x == x && x - x == 0.0f; }

/* scale and softcap: finite, below 2^127 (times log2(e) they stay finite), and with a softcap the folded
 * factor |scale| / softcap a normal float (it neither overflows nor loses bits). */
static fc_status check_scale(const fc_attn_args *a, fc_problem *p) {
    if (!is_finite(a->softmax_scale) || fabsf(a->softmax_scale) >= 0x1p127f)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "softmax_scale", "must be finite with |scale| < 2^127, is %g",
                       (double)a->softmax_scale);
    p->scale = a->softmax_scale != 0.0f ? a->softmax_scale : 1.0f / sqrtf((float)p->d);
    if (!is_finite(a->softcap) || a->softcap < 0.0f || a->softcap >= 0x1p127f)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "softcap", "must be 0 (off) or in (0, 2^127), is %g", (double)a->softcap);
    double folded = fabs((double)p->scale) / a->softcap;
    if (a->softcap > 0.0f && (folded > FLT_MAX || folded < FLT_MIN))
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "softcap", "= %g makes |scale| / softcap = %g, not a normal float: "
                       "softcap must lie in [|scale| / FLT_MAX, |scale| / FLT_MIN] = [%g, %g]", (double)a->softcap, folded,
                       fabs((double)p->scale) / FLT_MAX, fabs((double)p->scale) / FLT_MIN);
    p->softcap = a->softcap;
    return FC_OK;
}

static fc_status shape_scores(const fc_attn_args *a, fc_problem *p) {
    TRY(check_scale(a, p));
    if (a->window_left < -1) return fc_fail(FC_ERR_INVALID_ARGUMENT, "window_left", "= %d must be >= -1", a->window_left);
    if (a->window_right < -1) return fc_fail(FC_ERR_INVALID_ARGUMENT, "window_right", "= %d must be >= -1", a->window_right);
    /* A side that reaches past every key a sequence can have is unbounded: the same mask, and no
     * diagonal +- window in the kernels comes near 2^31. */
    p->window_left = a->window_left >= key_bound(a, p) ? -1 : a->window_left;
    p->window_right = a->causal ? 0 : a->window_right >= query_bound(a, p) ? -1 : a->window_right;
    if (is_present(&a->alibi_slopes)) {
        const fc_tensor *t = &a->alibi_slopes;
        if (t->ndim == 1) {
            TRY(check_tensor(t, "alibi_slopes", 1, FC_FP32, 0, 4));
            TRY(expect_dim(t, "alibi_slopes", 0, p->h_q, "h_q"));
            p->alibi_sb = 0; p->alibi_sh = t->stride[0];
        } else {
            TRY(check_tensor(t, "alibi_slopes", 2, FC_FP32, 0, 4));
            TRY(expect_dim(t, "alibi_slopes", 0, p->batch, "b"));
            TRY(expect_dim(t, "alibi_slopes", 1, p->h_q, "h_q"));
            p->alibi_sb = t->stride[0]; p->alibi_sh = t->stride[1];
        }
        p->alibi = (const float *)t->data;
    }
    if (is_present(&a->sinks)) {
        TRY(check_tensor(&a->sinks, "sinks", 1, FC_FP32, 0, 4));
        TRY(expect_dim(&a->sinks, "sinks", 0, p->h_q, "h_q"));
        p->sinks = (const float *)a->sinks.data;
        p->sinks_sh = a->sinks.stride[0];
    }
    if (a->num_splits < 0 || a->num_splits > FC_MAX_SPLITS)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "num_splits", "= %d must be in [0, %d]", a->num_splits, FC_MAX_SPLITS);
    p->num_splits = a->num_splits;
    return FC_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Written views: no element written twice, no byte shared with another argument (flashc.h: "Memory"). */

/* A tensor's bytes as a strided view: its dims of extent > 1 in bytes, plus the element itself as a
 * dim of extent esize and stride 1. One more dim for a union of two (views_disjoint). */
typedef struct byte_view {
    int n;
    int64_t extent[FC_MAX_DIMS + 2], stride[FC_MAX_DIMS + 2];
} byte_view;

static int is_empty(const fc_tensor *t) {
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return 1;
    return 0;
}

static void add_dim(byte_view *v, int64_t extent, int64_t stride) {
    if (extent < 2) return;
    v->extent[v->n] = extent;
    v->stride[v->n] = stride;
    v->n++;
}

/* Injective (no two elements share a byte): with the dims sorted by stride, each stride exceeds the
 * largest offset the smaller dims reach. Sufficient, and exact for every layout made of slices. */
static int is_injective(byte_view v) {
    for (int i = 1; i < v.n; i++) /* insertion sort by stride */
        for (int j = i; j > 0 && v.stride[j] < v.stride[j - 1]; j--) {
            int64_t e = v.extent[j], st = v.stride[j];
            v.extent[j] = v.extent[j - 1], v.stride[j] = v.stride[j - 1];
            v.extent[j - 1] = e, v.stride[j - 1] = st;
        }
    int64_t reach = 0, span;
    for (int i = 0; i < v.n; i++) {
        if (v.stride[i] <= reach) return 0;
        if (__builtin_mul_overflow(v.extent[i] - 1, v.stride[i], &span) || __builtin_add_overflow(reach, span, &reach))
            return 0;
    }
    return 1;
}

/* Validated tensors only (strides >= 0, byte extent within int64). */
static byte_view bytes_of(const fc_tensor *t) {
    byte_view v = {0};
    int64_t es = (int64_t)fc_dtype_size(t->dtype);
    add_dim(&v, es, 1);
    for (int i = 0; i < t->ndim; i++) /* a dim of extent 1 may have any stride: not multiplied (overflow) */
        if (t->shape[i] > 1) add_dim(&v, t->shape[i], t->stride[i] * es);
    return v;
}

/* [first byte, one past the last byte] of a non-empty validated tensor. */
static void byte_range(const fc_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    int64_t last = 0;
    for (int i = 0; i < t->ndim; i++) last += (t->shape[i] - 1) * t->stride[i];
    *lo = (uintptr_t)t->data;
    *hi = *lo + (uintptr_t)((last + 1) * (int64_t)fc_dtype_size(t->dtype));
}

/* No byte in common: byte ranges apart, or one view the other shifted (same element size and strides)
 * with their union, a dim of extent 2 over the shift, injective (k and v interleaved in one cache). */
static int views_disjoint(const fc_tensor *a, const fc_tensor *b) {
    if (is_empty(a) || is_empty(b)) return 1;
    uintptr_t a0, a1, b0, b1;
    byte_range(a, &a0, &a1);
    byte_range(b, &b0, &b1);
    if (a1 <= b0 || b1 <= a0) return 1;
    if (fc_dtype_size(a->dtype) != fc_dtype_size(b->dtype) || a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->stride[i] != b->stride[i] && (a->shape[i] > 1 || b->shape[i] > 1)) return 0;
    byte_view u = {0};
    int64_t es = (int64_t)fc_dtype_size(a->dtype);
    add_dim(&u, es, 1);
    for (int i = 0; i < a->ndim; i++)
        add_dim(&u, a->shape[i] > b->shape[i] ? a->shape[i] : b->shape[i], a->stride[i] * es);
    add_dim(&u, 2, (int64_t)(a0 > b0 ? a0 - b0 : b0 - a0));
    return is_injective(u);
}

/* The tensors of fc_attn_args, in declaration order (the overlap check and fc_plan_run walk them). */
const char *const fc_attn_tensor_names[FC_ATTN_TENSORS] = {
    "q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "page_table", "k_new", "v_new",
    "rotary_cos", "rotary_sin", "alibi_slopes", "sinks", "kv_batch_idx", "kv_leftpad", "seqused_q", "k_descale",
    "v_descale", "q_descale"};

const fc_tensor *fc_attn_tensor(const fc_attn_args *a, int i) {
    const fc_tensor *t[FC_ATTN_TENSORS] = {&a->q, &a->k, &a->v, &a->out, &a->lse, &a->cu_seqlens_q, &a->cu_seqlens_k,
                                           &a->seqused_k, &a->page_table, &a->k_new, &a->v_new, &a->rotary_cos,
                                           &a->rotary_sin, &a->alibi_slopes, &a->sinks, &a->kv_batch_idx, &a->kv_leftpad,
                                           &a->seqused_q, &a->k_descale, &a->v_descale, &a->q_descale};
    return t[i];
}

typedef struct named {
    const fc_tensor *t;
    const char *name;
} named;

/* Each written view injective and disjoint from every other argument present. */
static fc_status check_written_views(const named *written, int n_written, const named *all, int n_all) {
    for (int w = 0; w < n_written; w++) {
        const fc_tensor *t = written[w].t;
        if (is_empty(t)) continue;
        if (!is_injective(bytes_of(t))) {
            char dims[256];
            int k = 0;
            for (int i = 0; i < t->ndim; i++)
                k += snprintf(dims + k, sizeof dims - (size_t)k, "%s%lld/%lld", i ? ", " : "", (long long)t->shape[i],
                              (long long)t->stride[i]);
            return fc_fail(FC_ERR_INVALID_ARGUMENT, written[w].name, "shape/stride (%s) puts two elements at one address: "
                           "a view flashc writes must not overlap itself", dims);
        }
        for (int i = 0; i < n_all; i++)
            if (all[i].t != t && all[i].t->data && !views_disjoint(t, all[i].t))
                return fc_fail(FC_ERR_INVALID_ARGUMENT, written[w].name, "overlaps %s: a view flashc writes must not share "
                               "memory with another argument", all[i].name);
    }
    return FC_OK;
}

/* out, lse, and the cache (k, v) when appending. */
static fc_status check_written(const fc_attn_args *a, const fc_problem *p) {
    named all[FC_ATTN_TENSORS];
    for (int i = 0; i < FC_ATTN_TENSORS; i++) all[i] = (named){fc_attn_tensor(a, i), fc_attn_tensor_names[i]};
    named written[4];
    int n = 0;
    written[n++] = (named){&a->out, "out"};
    if (a->lse.data) written[n++] = (named){&a->lse, "lse"};
    if (p->k_new.data) {
        written[n++] = (named){&a->k, "k"};
        written[n++] = (named){&a->v, "v"};
    }
    return check_written_views(written, n, all, FC_ATTN_TENSORS);
}

/* ---------------------------------------------------------------------------------------------- */
/* Attention: contents (host memory only — the CPU path)                                           */

/* cu_seqlens: starts at 0, never decreases, ends within `total` rows; returns the longest length. */
static fc_status check_cu_seqlens(const int32_t *cu, int batch, int64_t total, int max_given, const char *name,
                                  const char *max_name, int *max_len) {
    if (cu[0] != 0) return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "[0] = %d, must be 0", cu[0]);
    int longest = 0;
    for (int b = 0; b < batch; b++) {
        if (cu[b + 1] < cu[b])
            return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "decreases at [%d] (%d < %d)", b + 1, cu[b + 1], cu[b]);
        int len = cu[b + 1] - cu[b]; /* 0 <= cu[b] <= cu[b + 1]: no overflow */
        if (len > longest) longest = len;
    }
    if (cu[batch] > total)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "[%d] = %d exceeds the %lld rows of the tensor", batch, cu[batch],
                       (long long)total);
    if (max_given > 0 && longest > max_given)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, max_name, "= %d, but a sequence has %d", max_given, longest);
    *max_len = max_given > 0 ? max_given : longest;
    return FC_OK;
}

/* Keys a sequence can hold before the append: what seqused_k + s_new must not exceed. */
static int64_t kv_capacity(const fc_problem *p, int b) {
    switch (p->kv_layout) {
    case FC_KV_PAGED: return (int64_t)p->max_pages * p->page_size;
    case FC_KV_VARLEN: return p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b];
    default: return p->s_k;
    }
}

fc_status fc_fail_capacity(fc_kv_layout layout, int b, int64_t used, int64_t s_new, int64_t cap, int page_size) {
    if (layout == FC_KV_PAGED)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "page_table",
                       "sequence %d needs %lld keys (seqused_k %lld + %lld new), more than its %lld pages of %d hold", b,
                       (long long)(used + s_new), (long long)used, (long long)s_new, (long long)(cap / page_size), page_size);
    if (s_new)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, "seqused_k", "[%d] = %lld + %lld new keys exceed the %lld keys the layout holds",
                       b, (long long)used, (long long)s_new, (long long)cap);
    return fc_fail(FC_ERR_INVALID_ARGUMENT, "seqused_k", "[%d] = %lld exceeds the %lld keys the layout holds", b,
                   (long long)used, (long long)cap);
}

static fc_status check_seqused(const fc_problem *p) {
    for (int b = 0; b < p->batch; b++) {
        int64_t used = p->seqused_k[b], cap = kv_capacity(p, b);
        if (used < 0) return fc_fail(FC_ERR_INVALID_ARGUMENT, "seqused_k", "[%d] = %lld is negative", b, (long long)used);
        if (used + p->s_new > cap) return fc_fail_capacity(p->kv_layout, b, used, p->s_new, cap, p->page_size);
    }
    return FC_OK;
}

/* seqused_q: within each sequence's query rows (cu_seqlens_q checked before). */
static fc_status check_seqused_q(const fc_problem *p) {
    for (int b = 0; b < p->batch; b++) {
        int64_t used = p->seqused_q[b];
        int64_t rows = p->cu_seqlens_q ? (int64_t)p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b] : p->s_q;
        if (used < 0 || used > rows)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "seqused_q", "[%d] = %lld is outside [0, %lld] (the sequence's query "
                           "rows)", b, (long long)used, (long long)rows);
    }
    return FC_OK;
}

/* kv_batch_idx: rows of the cache, distinct when appending; kv_leftpad: within each sequence's keys. */
static int by_int(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

static fc_status check_kv_index(const fc_problem *p) {
    for (int b = 0; p->kv_batch_idx && b < p->batch; b++)
        if (p->kv_batch_idx[b] < 0 || p->kv_batch_idx[b] >= p->k_batch)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "kv_batch_idx", "[%d] = %d is not a row of the cache [0, %d)", b,
                           p->kv_batch_idx[b], p->k_batch);
    if (p->kv_batch_idx && p->k_new.data && p->batch > 1) { /* two appends into one row would race */
        int32_t *rows = malloc(sizeof(int32_t) * (size_t)p->batch);
        if (!rows) return fc_fail(FC_ERR_OUT_OF_MEMORY, "kv_batch_idx", "cannot allocate %d ints to check it", p->batch);
        memcpy(rows, p->kv_batch_idx, sizeof(int32_t) * (size_t)p->batch);
        qsort(rows, (size_t)p->batch, sizeof(int32_t), by_int);
        int dup = -1;
        for (int i = 1; i < p->batch && dup < 0; i++)
            if (rows[i] == rows[i - 1]) dup = rows[i];
        free(rows);
        if (dup >= 0)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "kv_batch_idx", "names cache row %d for two sequences, and both append "
                           "to it (k_new)", dup);
    }
    for (int b = 0; p->kv_leftpad && b < p->batch; b++) {
        int64_t pad = p->kv_leftpad[b], keys = p->seqused_k ? p->seqused_k[b] : p->s_k;
        if (pad < 0 || pad > keys)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "kv_leftpad", "[%d] = %lld is outside [0, %lld] (the sequence's keys "
                           "counted from row 0)", b, (long long)pad, (long long)keys);
    }
    return FC_OK;
}

static fc_status check_pages(const fc_problem *p) {
    for (int b = 0; b < p->batch; b++) {
        int64_t keys = (int64_t)p->seqused_k[b] + p->s_new;
        int64_t used_pages = (keys + p->page_size - 1) / p->page_size;
        for (int64_t i = 0; i < used_pages; i++) {
            int32_t page = p->page_table[b * p->page_table_sb + i];
            if (page < 0 || page >= p->num_pages)
                return fc_fail(FC_ERR_INVALID_ARGUMENT, "page_table", "[%d][%lld] = %d is not a page in [0, %d)", b,
                               (long long)i, page, p->num_pages);
        }
    }
    return FC_OK;
}

/* A page entry an append writes into: page `page`, entry i of sequence b's table. */
typedef struct page_write {
    int32_t page;
    int b;
    int64_t i;
} page_write;

static int by_page(const void *x, const void *y) {
    int32_t a = ((const page_write *)x)->page, b = ((const page_write *)y)->page;
    return (a > b) - (a < b);
}

/* Keys of sequence b, appended ones included (after check_seqused: no overflow). */
static int64_t keys_of(const fc_problem *p, int b) { return (int64_t)p->seqused_k[b] + p->s_new; }

/* Rows of entry i of sequence b's table that the sequence reads: [0, *read); that its append writes:
 * [*w0, *w1) (empty when the entry receives no new key). */
static void entry_rows(const fc_problem *p, int b, int64_t i, int64_t *read, int64_t *w0, int64_t *w1) {
    int64_t first = i * p->page_size, keys = keys_of(p, b), used = p->seqused_k[b];
    *read = keys - first < p->page_size ? keys - first : p->page_size;
    *w0 = used - first > 0 ? used - first : 0;
    *w1 = *read;
}

/* Append into a paged cache: every slot the append writes is read at one key position only, its own.
 * Two writers of one page always clash (each reads the rows before its own new ones), so the table's
 * written entries are sorted by page and checked for repeats; then each entry any sequence reads is
 * looked up among them. */
static fc_status check_page_writes(const fc_problem *p) {
    if (p->s_new == 0) return FC_OK;
    int64_t n = 0;
    for (int b = 0; b < p->batch; b++)
        n += (keys_of(p, b) - 1) / p->page_size - p->seqused_k[b] / p->page_size + 1;
    page_write *w = malloc(sizeof *w * (size_t)n);
    if (!w) return fc_fail(FC_ERR_OUT_OF_MEMORY, "page_table", "cannot allocate %lld entries to check the append", (long long)n);
    n = 0;
    for (int b = 0; b < p->batch; b++)
        for (int64_t i = p->seqused_k[b] / p->page_size; i <= (keys_of(p, b) - 1) / p->page_size; i++)
            w[n++] = (page_write){p->page_table[b * p->page_table_sb + i], b, i};
    qsort(w, (size_t)n, sizeof *w, by_page);
    fc_status st = FC_OK;
    for (int64_t k = 1; k < n && st == FC_OK; k++)
        if (w[k].page == w[k - 1].page)
            st = fc_fail(FC_ERR_INVALID_ARGUMENT, "page_table", "page %d receives new keys of sequence %d (entry %lld) and of "
                         "sequence %d (entry %lld): appends must write slots no other key uses", w[k].page, w[k - 1].b,
                         (long long)w[k - 1].i, w[k].b, (long long)w[k].i);
    for (int b = 0; b < p->batch && st == FC_OK; b++) {
        int64_t pages = (keys_of(p, b) + p->page_size - 1) / p->page_size;
        for (int64_t i = 0; i < pages && st == FC_OK; i++) {
            page_write key = {p->page_table[b * p->page_table_sb + i], b, i};
            const page_write *e = bsearch(&key, w, (size_t)n, sizeof *w, by_page);
            if (!e || (e->b == b && e->i == i)) continue;
            int64_t read, w0, w1, unused;
            entry_rows(p, b, i, &read, &unused, &unused);
            entry_rows(p, e->b, e->i, &unused, &w0, &w1);
            if (w0 < read)
                st = fc_fail(FC_ERR_INVALID_ARGUMENT, "page_table", "page %d: sequence %d appends its key %lld into slot %lld, "
                             "which sequence %d reads as its key %lld: appends must write slots no other key uses",
                             key.page, e->b, (long long)(e->i * p->page_size + w0), (long long)w0, b,
                             (long long)(i * p->page_size + w0));
        }
    }
    free(w);
    return st;
}

/* Rotary positions: keys up to s_k - 1; queries from s_k - s_q, which must not be negative. */
static fc_status check_rotary(const fc_problem *p) {
    for (int b = 0; b < p->batch; b++) {
        fc_seqlen s = fc_seqlen_of(p, b);
        if ((int64_t)s.pos0 + s.s_k > p->rotary_max_pos)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "rotary_cos", "has %d positions, sequence %d needs %lld", p->rotary_max_pos,
                           b, (long long)s.pos0 + s.s_k);
        if (s.s_q > (int64_t)s.pos0 + s.s_k)
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "rotary_cos", "sequence %d has more queries (%d) than keys (%d): "
                           "query positions would be negative", b, s.s_q, s.s_k);
    }
    return FC_OK;
}

static fc_status check_contents(const fc_attn_args *a, fc_problem *p) {
    if (p->cu_seqlens_q)
        TRY(check_cu_seqlens(p->cu_seqlens_q, p->batch, p->total_q, p->s_q, "cu_seqlens_q", "max_seqlen_q", &p->s_q));
    if (p->seqused_q) TRY(check_seqused_q(p));
    if (p->cu_seqlens_k)
        TRY(check_cu_seqlens(p->cu_seqlens_k, p->batch, a->k.shape[0], p->s_k, "cu_seqlens_k", "max_seqlen_k", &p->s_k));
    if (p->seqused_k) TRY(check_seqused(p));
    if (p->kv_batch_idx || p->kv_leftpad) TRY(check_kv_index(p));
    if (p->kv_layout == FC_KV_PAGED) TRY(check_pages(p));
    if (p->kv_layout == FC_KV_PAGED && p->k_new.data) TRY(check_page_writes(p));
    if (p->rotary_cos) TRY(check_rotary(p));
    return FC_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Attention entry points                                                                          */

/* Validate a and fill p. Reads tensor contents only when read_contents (host memory). */
static fc_status make_problem(const fc_attn_args *a, fc_problem *p, int read_contents) {
    if (!a) return fc_fail(FC_ERR_INVALID_ARGUMENT, "args", "is NULL");
    memset(p, 0, sizeof *p);
    TRY(check_device(a->device));
    p->device = a->device;
    TRY(shape_queries(a, p));
    TRY(shape_output(a, p));
    TRY(shape_keys(a, p));
    TRY(shape_append(a, p));
    TRY(check_sizes(a, p));
    TRY(shape_scores(a, p));
    TRY(check_written(a, p));
    TRY(check_cuda_present(p->device));
    return read_contents ? check_contents(a, p) : FC_OK;
}

fc_status fc_attn_workspace_size(const fc_attn_args *args, size_t *bytes) {
    if (!bytes) return fc_fail(FC_ERR_INVALID_ARGUMENT, "bytes", "is NULL");
    fc_problem p;
    TRY(make_problem(args, &p, 0));
    *bytes = 0;
    size_t least = 0;
    if (p.device == FC_DEVICE_CUDA) TRY(fc_cuda_attn_workspace_size(&p, bytes, &least));
    fc_clear_error();
    return FC_OK;
}

fc_status fc_attn_describe(const fc_attn_args *args, char *buf, size_t n) {
    if (!buf || n == 0) return fc_fail(FC_ERR_INVALID_ARGUMENT, "buf", "is NULL or of size 0");
    buf[0] = '\0';
    fc_problem p; /* the CPU's plan reads the lengths: host contents are checked first, as fc_attn_fwd does */
    TRY(make_problem(args, &p, args && args->device == FC_DEVICE_CPU));
    if (p.device == FC_DEVICE_CUDA) TRY(fc_cuda_describe(&p, buf, n));
    else fc_cpu_describe(&p, buf, n);
    fc_clear_error();
    return FC_OK;
}

fc_status fc_attn_problem(const fc_attn_args *args, fc_problem *p) {
    return make_problem(args, p, args && args->device == FC_DEVICE_CPU);
}

fc_status fc_attn_run_problem(const fc_problem *p, void *workspace, size_t workspace_bytes, void *stream) {
    fc_status st;
    if (p->device == FC_DEVICE_CPU) {
        st = fc_cpu_attn_fwd(p);
    } else {
        size_t all = 0, need = 0; /* (past need, the workspace speeds a prefill up: fc_cuda_attn_workspace_size) */
        TRY(fc_cuda_attn_workspace_size(p, &all, &need));
        if (need > 0 && (!workspace || workspace_bytes < need || (uintptr_t)workspace % 256 != 0))
            return fc_fail(FC_ERR_INVALID_ARGUMENT, "workspace", "needs %zu bytes, 256-byte aligned; got %zu at %p", need,
                           workspace_bytes, workspace);
        st = fc_cuda_attn_fwd(p, workspace, workspace_bytes, stream);
    }
    if (st == FC_OK) fc_clear_error();
    return st;
}

fc_status fc_attn_fwd(const fc_attn_args *args, void *workspace, size_t workspace_bytes, void *stream) {
    fc_problem p;
    TRY(fc_attn_problem(args, &p));
    return fc_attn_run_problem(&p, workspace, workspace_bytes, stream);
}

/* ---------------------------------------------------------------------------------------------- */
/* Merge                                                                                            */

static fc_status check_merge_dtype(const fc_tensor *t, const char *name) {
    if (t->data && t->dtype != FC_FP32 && t->dtype != FC_BF16 && t->dtype != FC_FP16)
        return fc_fail(FC_ERR_INVALID_ARGUMENT, name, "dtype %s, expected fp32, bf16 or fp16", dtype_name(t->dtype));
    return FC_OK;
}

static fc_status make_merge_problem(const fc_merge_args *a, fc_merge_problem *m) {
    if (!a) return fc_fail(FC_ERR_INVALID_ARGUMENT, "args", "is NULL");
    memset(m, 0, sizeof *m);
    TRY(check_device(a->device));
    m->device = a->device;
    const fc_tensor *op = &a->out_partial, *lp = &a->lse_partial, *o = &a->out, *l = &a->lse;
    TRY(check_merge_dtype(op, "out_partial"));
    TRY(check_merge_dtype(o, "out"));
    TRY(check_tensor(op, "out_partial", 4, op->dtype, 1, fc_dtype_size(op->dtype)));
    TRY(check_tensor(lp, "lse_partial", 3, FC_FP32, 0, 4));
    TRY(check_tensor(o, "out", 3, o->dtype, 1, fc_dtype_size(o->dtype)));
    if (o->dtype == FC_FP32 && a->device == FC_DEVICE_CUDA)
        return fc_fail(FC_ERR_UNSUPPORTED, "out", "fp32 output of fc_merge_states runs on the CPU only");
    if (op->shape[0] < 1) return fc_fail(FC_ERR_INVALID_ARGUMENT, "out_partial", "needs n >= 1 partial states");
    for (int i = 0; i < 3; i++) TRY(expect_dim(lp, "lse_partial", i, op->shape[i], "(n, rows, h) as out_partial"));
    for (int i = 0; i < 3; i++) TRY(expect_dim(o, "out", i, op->shape[i + 1], "(rows, h, d_v) as out_partial"));
    if (l->data) {
        TRY(check_tensor(l, "lse", 2, FC_FP32, 0, 4));
        TRY(expect_dim(l, "lse", 0, op->shape[1], "rows"));
        TRY(expect_dim(l, "lse", 1, op->shape[2], "h"));
        m->lse = (float *)l->data; m->l_sr = l->stride[0]; m->l_sh = l->stride[1];
    }
    m->n = (int)op->shape[0]; m->rows = (int)op->shape[1]; m->h = (int)op->shape[2]; m->d_v = (int)op->shape[3];
    m->out_partial = op->data; m->partial_dtype = op->dtype;
    m->op_sn = op->stride[0]; m->op_sr = op->stride[1]; m->op_sh = op->stride[2];
    m->lse_partial = (const float *)lp->data; m->lp_sn = lp->stride[0]; m->lp_sr = lp->stride[1]; m->lp_sh = lp->stride[2];
    m->out = o->data; m->out_dtype = o->dtype; m->o_sr = o->stride[0]; m->o_sh = o->stride[1];
    const named all[] = {{op, "out_partial"}, {lp, "lse_partial"}, {o, "out"}, {l, "lse"}};
    const named written[] = {{o, "out"}, {l, "lse"}};
    return check_written_views(written, l->data ? 2 : 1, all, 4);
}

fc_status fc_merge_states(const fc_merge_args *args, void *stream) {
    fc_merge_problem m;
    TRY(make_merge_problem(args, &m));
    TRY(check_cuda_present(m.device));
    fc_status st = m.device == FC_DEVICE_CPU ? fc_cpu_merge(&m) : fc_cuda_merge(&m, stream);
    if (st == FC_OK) fc_clear_error();
    return st;
}
