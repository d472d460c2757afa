/* flashc.h — the whole public API of flashc: FlashAttention-class attention for LLM inference, in C. */
#ifndef FLASHC_H
#define FLASHC_H

/*
 * flashc computes softmax attention forward passes — prefill and decode — on NVIDIA Hopper GPUs and on
 * the CPU, with one API and one set of semantics for both. This header is the manual.
 *
 * ------------------------------------------------------------------------------------------------
 * Quick start (CPU, one batch of dense bf16 tensors):
 *
 *     fc_attn_args a;
 *     fc_attn_args_init(&a);                       // defaults: CPU, no mask, scale 1/sqrt(d), ...
 *     a.q   = fc_tensor_4d(q,   FC_BF16, b, s_q, h_q, d);
 *     a.k   = fc_tensor_4d(k,   FC_BF16, b, s_k, h_k, d);
 *     a.v   = fc_tensor_4d(v,   FC_BF16, b, s_k, h_k, d_v);
 *     a.out = fc_tensor_4d(out, FC_BF16, b, s_q, h_q, d_v);
 *     a.causal = 1;
 *     size_t ws_bytes;  fc_attn_workspace_size(&a, &ws_bytes);   // 0 on the CPU
 *     fc_status st = fc_attn_fwd(&a, ws, ws_bytes, NULL);
 *     if (st != FC_OK) fprintf(stderr, "%s: %s\n", fc_status_string(st), fc_last_error());
 *
 * ------------------------------------------------------------------------------------------------
 * Semantics (what every backend computes). For query row i (0-based within its sequence) and key j
 * of the same sequence, with off = s_k - s_q (queries aligned to the bottom-right of the key range):
 *
 *   1. x = scale * dot(q_i, k_j)                         scale defaults to 1/sqrt(d)
 *   2. softcap c > 0:  x = c * tanh(x / c)
 *   3. ALiBi slope m:  x -= m * |i + off - j|
 *   4. mask: causal keeps j <= i + off; a window (wl, wr) keeps i + off - wl <= j <= i + off + wr
 *      (-1 = unbounded on that side; causal is the window (-1, 0), or (wl, 0) if wl is given)
 *   5. lse_i = log( sum_j exp(x_j) + [sinks] exp(sink_h) ),  p_j = exp(x_j - lse_i),
 *      out_i = sum_j p_j v_j
 *
 * A row with no visible key and no sink gets out = 0 and lse = -inf, never NaN. A sink adds mass to
 * the denominator only (it is a key whose value vector is zero).
 *
 * Scale and softcap: |softmax_scale| < 2^127 and softcap = 0 (off) or 0 < softcap < 2^127 with
 * |scale| / softcap a normal float, i.e. softcap in [|scale| / FLT_MAX, |scale| / FLT_MIN]; anything
 * else is rejected. Step 2 is computed as c * tanh((scale / c) * dot(q_i, k_j)) in float.
 * Windows: a side at least as long as every sequence's keys (left) or queries (right) is unbounded.
 *
 * NaN and Inf (what torch computes, except that hidden keys never matter):
 *   - Keys a row cannot see (masked, past seqused_k, or of other sequences) are never used for it:
 *     NaN or Inf in their k or v does not reach the row. Rows with no visible key: as above.
 *   - A visible key whose score x_j (after steps 1-3) is NaN or +inf makes the row's out and lse NaN:
 *     NaN in q_i, in a visible k_j, in an ALiBi slope, Inf - Inf in the dot product. A sink that is
 *     NaN or +inf does the same. A score of -inf counts as a masked key (p_j = 0).
 *   - NaN or Inf in the v of a visible key propagates into out (p_j * v_j, even where p_j underflows
 *     to 0); lse is unaffected.
 *   - Dot products that overflow float are +-inf (then the rules above).
 *   CUDA differs in one point: the tensor cores compute P·V over a whole tile of rows and a block of
 *   keys at once, so NaN or Inf in the v of a key that one row of a tile cannot see but another row of
 *   the same tile (128 packed query rows in prefill, 16 in decode) can reaches the first row too
 *   (0 * NaN); keys past a sequence's end are never read. Decode with s_q = 1 and no window is exact.
 * Accumulation: scores, softmax and P·V run in fp32. On the CPU P·V sums each block of 64 keys on its
 * own, and the running sums over blocks are compensated (Kahan-style), so the rounding error of out
 * does not grow with the number of keys (2^20 identical keys give out = v within 64 fp32 roundings).
 * On CUDA the output accumulator is a plain fp32 register sum over key blocks (128 or 32 keys each;
 * split-KV cuts a row's keys into independent parts merged at the end), so its rounding error grows
 * with the number of key blocks per split, about 2^-24 per block: ~0.1-1% at 2^20-2^23 keys unsplit.
 *
 * GQA/MQA: h_q % h_k == 0, and query head h reads KV head h / (h_q / h_k).
 *
 * ------------------------------------------------------------------------------------------------
 * Layouts. Every tensor is an fc_tensor: a pointer, a dtype, a shape and strides IN ELEMENTS (int64).
 * The last dimension of q, k, v, out, k_new, v_new must be contiguous (stride 1); other strides are free
 * (non-negative). Shapes follow the flash_attn package:
 *
 *   q      dense  (b, s_q, h_q, d)             varlen (total_q, h_q, d)  with cu_seqlens_q (b+1) int32
 *   k      dense  (b_k, s_k, h_k, d), b_k >= b  varlen (total_k, h_k, d)  with cu_seqlens_k (b+1) int32
 *          paged  (num_pages, page_size, h_k, d)                          with page_table (b, max_pages)
 *   v      as k, with last dim d_v
 *   out    as q, with last dim d_v; same dtype as q
 *   lse    float32, dense (b, h_q, s_q), varlen (h_q, total_q); natural log; optional
 *
 * A dense cache may hold more sequences than the batch (b_k > b): sequence i uses its row i, or row
 * kv_batch_idx[i] when that is given (any b_k >= 1; with an append, no two sequences may name one row).
 * kv_leftpad (dense caches): sequence i's keys are cache rows kv_leftpad[i] .. seqused_k[i] - 1 (or to
 * s_k without seqused_k): seqused_k still counts from row 0, as flash_attn's cache_seqlens does, and an
 * append goes to rows seqused_k[i] ..; masks and ALiBi count keys from the first one, rotary positions
 * are cache rows (key j at kv_leftpad[i] + j, query row r at kv_leftpad[i] + s_k - s_q + r), as in
 * flash_attn.
 * q and k/v choose their layouts independently (varlen queries over a paged cache is the usual serving
 * case). cu_seqlens are prefix sums starting at 0. seqused_k (b) int32, optional for dense and varlen KV
 * and required for paged KV, says how many keys of each sequence count (the first seqused_k[i]).
 * Page p of the table of sequence i holds keys p*page_size .. (p+1)*page_size - 1; page_size is any
 * value >= 1.
 *
 * Append (decode with new tokens): k_new (b, s_new, h_k, d) and v_new (b, s_new, h_k, d_v) are written
 * into the cache (dense or paged k/v, with seqused_k) at positions seqused_k[i] .. seqused_k[i]+s_new-1,
 * and attention then runs over seqused_k[i] + s_new keys. flashc does not update seqused_k; the caller
 * adds s_new when it is done. With rotary_cos/rotary_sin (max_pos, rotary_dim/2), the first rotary_dim
 * features of k_new are rotated at their absolute positions before they are written, and those of q at
 * theirs: row r of q sits at position s_k - s_q + r (bottom-right alignment). Interleaved rotary rotates
 * the pairs (2m, 2m+1); half-split (GPT-NeoX) rotates the pairs (m, m + rotary_dim/2).
 * Note: flash_attn rotates every query to position seqused_k when neither causal nor a window is set;
 * flashc always uses the absolute positions above.
 *
 * Split-KV: the key range of a row may be cut into num_splits parts computed independently (fp32 partial
 * out and lse each) and merged. num_splits = 0 lets the library choose, 1 disables splitting; any value
 * gives the same result up to float rounding. fc_merge_states exposes the merge step on its own (what
 * context parallelism needs).
 *
 * Dtypes: q, k, v, out, k_new, v_new share one dtype: FC_BF16 or FC_FP16 on every backend, FC_FP32 on
 * the CPU only.
 * FP8 caches: k and v may instead both be FC_E4M3 or FC_E5M2 (q, out, k_new, v_new keep
 * q's dtype; CUDA so far: decode shapes, s_q x h_q / h_k <= 16 packed query rows, with d and d_v
 * multiples of 16; other shapes return FC_ERR_UNSUPPORTED naming k). A cache element e of sequence b, KV head h stands for
 * e * k_descale[b][h] (v_descale for v): scores use those dequantised keys, P·V those values. An append
 * stores fp8(k_new / k_descale[b][h]) (after rotary), rounded to nearest even and saturated at the
 * format's largest finite value (448 for e4m3, 57344 for e5m2; NaN stays NaN).
 * FP8 attention: q, k and v all of one fp8 format, out bf16 or fp16, q_descale (b, h_k) for the query
 * heads of each KV head; no append (CUDA: e4m3, d and d_v multiples of 16, no rotary; other inputs return
 * FC_ERR_UNSUPPORTED naming the argument). Scores use the dequantised q and k; as in
 * FlashAttention-3, P is quantised to e4m3 for the P·V product (each p = exp(x - m) rounded to e4m3, m a
 * running max of the row; on CUDA m may lag the true running max by up to 8 in log2 units, FlashAttention-4's
 * lazy rescale, so p <= 256, where e4m3's relative precision is the same; the softmax denominator sums the
 * unquantised p). On CUDA the FP8 tensor cores sum q·k and P·V at reduced precision (as every Hopper FP8
 * GEMM does: errors up to about 2^-13 of the sum of the terms' magnitudes measured), not in full fp32.
 * Head dims d and d_v: each a multiple of 8 from 8 to 256 (CUDA has kernels for 64, 96, 128, 192, 256
 * and d 192 / d_v 128; other dims run on the next kernel up, the extra features zero, as
 * FlashAttention-3 does). Accumulation is fp32.
 *
 * ------------------------------------------------------------------------------------------------
 * Devices, streams, workspaces. FC_DEVICE_CPU computes on the calling thread plus worker threads
 * (fc_set_num_threads, or the FLASHC_NUM_THREADS environment variable, read once at the first call that
 * needs it; default: all online cores).
 * FC_DEVICE_CUDA takes device pointers (except cu_seqlens etc.: device pointers too) and a cudaStream_t
 * passed as void*; the run step never allocates and never synchronises, so it can be captured in a CUDA
 * graph. Scratch it needs (split partials) comes from a caller-provided workspace of at least
 * fc_attn_workspace_size bytes, 256-byte aligned. The CPU backend needs no workspace (size 0). A prefill
 * without a mask also uses its workspace to spread the last round of tiles over every SM (tens of MB at
 * most: 2 slots per SM of each consumer thread's partial output); given less, that call runs without it
 * (slower by about 1-3%), never wrong and never refused for it.
 * Checks that must read tensor contents (cu_seqlens monotonic, seqused_k and page indices in range,
 * rotary table long enough) are made before the call on the CPU path; on the GPU the kernels make them
 * as they run, stay inside every tensor whatever the contents say, and record what they found for
 * fc_check_errors (below).
 *
 * Threads and lifetimes. Every function may be called from any thread at once; fc_last_error is per
 * thread; fc_set_num_threads changes the CPU worker count for every later call of the process. A CUDA
 * call runs on the calling thread's current device (cudaSetDevice) and on `stream`; it returns once the
 * work is queued, so its tensors and workspace must stay allocated, and the tensors it writes untouched,
 * until the stream has run it (in a CUDA graph: for as long as the graph is replayed, with the pointers
 * it was captured with). Two calls that run at the same time need two workspaces. The library allocates
 * no device memory; it keeps a fixed per-device error record (fc_check_errors) and caches a few device
 * properties and kernel attributes per device.
 *
 * Sizes: at most 2^30 query rows per sequence times h_q / h_k (dense: s_q; varlen: total_q, or
 * max_seqlen_q if larger) and at most 2^30 keys per sequence (dense: s_k; varlen: total_k, or
 * max_seqlen_k if larger; paged: max_pages * page_size), so that every index fits in 32 bits; s_new
 * must not exceed the cache's capacity. Larger sizes are rejected (FC_ERR_INVALID_ARGUMENT).
 *
 * Memory: flashc never computes in place. The views it writes (out and lse; k and v when appending;
 * out and lse of fc_merge_states) must not overlap themselves (no two elements at one address: a zero
 * stride, or strides that make two index tuples meet) nor share any byte with any other argument, read
 * or written. flashc proves this from the views alone: two views are disjoint when their byte ranges
 * are, or when one is the other shifted with the same strides and the shift keeps them apart (k and v
 * interleaved in one cache tensor); views that interleave otherwise are rejected. Read-only views may
 * overlap freely (k and v may be one tensor; broadcast zero strides are fine). Appending into a paged
 * cache, every cache slot written must be used by no other key position of any sequence (no two
 * sequences append into one page, and no sequence reads a slot another one appends to); the CPU path
 * checks it (the page table is in host memory), CUDA does not.
 *
 * Errors: every entry point returns a status. On any status other than FC_OK nothing has been written
 * (no output, no lse, no cache). fc_last_error() then names the argument and why, e.g.
 * "k: shape[2] = 3 (h_k) must divide h_q = 8". Messages are per thread.
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHC_VERSION_MAJOR 0
#define FLASHC_VERSION_MINOR 2
#define FLASHC_VERSION_PATCH 0

/* ---------------------------------------------------------------------------------------------- */
/* Status                                                                                          */

typedef enum fc_status {
    FC_OK = 0,
    FC_ERR_INVALID_ARGUMENT = 1, /* a bad pointer, shape, stride, dtype, value; fc_last_error names it */
    FC_ERR_UNSUPPORTED = 2,      /* valid request this build or backend cannot run (e.g. fp32 on CUDA) */
    FC_ERR_CUDA = 3,             /* a CUDA runtime call failed; fc_last_error has cudaGetErrorString */
    FC_ERR_OUT_OF_MEMORY = 4,    /* host allocation failed (CPU backend scratch) */
    FC_ERR_NO_DEVICE = 5,        /* FC_DEVICE_CUDA asked for, but no CUDA backend or no GPU */
    FC_ERR_INTERNAL = 6,         /* a bug in flashc: please report */
} fc_status;

/* A fixed string naming the status ("invalid argument", ...). Never NULL. */
const char *fc_status_string(fc_status status);

/* The message of the last failed call on this thread ("" after success). Never NULL. */
const char *fc_last_error(void);

/* "0.2.0": FLASHC_VERSION_MAJOR.MINOR.PATCH (0.2: fc_attn_args grew at its end, fc_plan, FP8 caches) */
const char *fc_version(void);

/* ---------------------------------------------------------------------------------------------- */
/* Tensors                                                                                         */

typedef enum fc_dtype {
    FC_BF16 = 0,
    FC_FP16 = 1,
    FC_FP32 = 2,
    FC_INT32 = 3,
    FC_E4M3 = 4,              /* FP8 (OCP e4m3fn): K/V caches (see "FP8" above) */
    FC_E5M2 = 5,              /* FP8 (OCP e5m2): K/V caches */
} fc_dtype;

typedef enum fc_device {
    FC_DEVICE_CPU = 0,
    FC_DEVICE_CUDA = 1,
} fc_device;

#define FC_MAX_DIMS 4

/* A strided view. data == NULL means "absent" for optional arguments. Strides are in elements. */
typedef struct fc_tensor {
    void *data;
    fc_dtype dtype;
    int ndim;                     /* 1 .. 4 */
    int64_t shape[FC_MAX_DIMS];
    int64_t stride[FC_MAX_DIMS];
} fc_tensor;

/* Bytes of one element of dtype (2, 2, 4, 4, 1, 1); 0 for an unknown dtype. */
size_t fc_dtype_size(fc_dtype dtype);

/* Contiguous (row-major) views. */
static inline fc_tensor fc_tensor_1d(void *data, fc_dtype dt, int64_t n0) {
    fc_tensor t = {data, dt, 1, {n0, 0, 0, 0}, {1, 0, 0, 0}};
    return t;
}
static inline fc_tensor fc_tensor_2d(void *data, fc_dtype dt, int64_t n0, int64_t n1) {
    fc_tensor t = {data, dt, 2, {n0, n1, 0, 0}, {n1, 1, 0, 0}};
    return t;
}
static inline fc_tensor fc_tensor_3d(void *data, fc_dtype dt, int64_t n0, int64_t n1, int64_t n2) {
    fc_tensor t = {data, dt, 3, {n0, n1, n2, 0}, {n1 * n2, n2, 1, 0}};
    return t;
}
static inline fc_tensor fc_tensor_4d(void *data, fc_dtype dt, int64_t n0, int64_t n1, int64_t n2,
                                     int64_t n3) {
    fc_tensor t = {data, dt, 4, {n0, n1, n2, n3}, {n1 * n2 * n3, n2 * n3, n3, 1}};
    return t;
}

/* ---------------------------------------------------------------------------------------------- */
/* Attention forward                                                                               */

typedef struct fc_attn_args {
    fc_device device;         /* where every tensor lives and the work runs */

    /* Required. */
    fc_tensor q;              /* (b, s_q, h_q, d) or varlen (total_q, h_q, d) */
    fc_tensor k;              /* (b_k >= b, s_k, h_k, d), varlen (total_k, h_k, d) or paged (pages, page_size, h_k, d) */
    fc_tensor v;              /* like k with last dim d_v */
    fc_tensor out;            /* like q with last dim d_v, q's dtype; written */

    /* Optional outputs. */
    fc_tensor lse;            /* float32 (b, h_q, s_q), varlen (h_q, total_q); written */

    /* Variable-length batches (flash_attn_varlen_func). */
    fc_tensor cu_seqlens_q;   /* int32 (b+1): q is varlen when given */
    fc_tensor cu_seqlens_k;   /* int32 (b+1): k/v are varlen when given */
    int max_seqlen_q;         /* varlen: upper bound of the query lengths (0: computed, CPU only) */
    int max_seqlen_k;         /* varlen: upper bound of the key lengths (0: computed, CPU only) */
    fc_tensor seqused_k;      /* int32 (b): keys used per sequence; required with page_table or k_new */

    /* Paged KV cache. */
    fc_tensor page_table;     /* int32 (b, max_pages): k/v are paged when given */

    /* Append new tokens to the cache before attending (flash_attn_with_kvcache's k and v). */
    fc_tensor k_new;          /* (b, s_new, h_k, d) */
    fc_tensor v_new;          /* (b, s_new, h_k, d_v) */
    fc_tensor rotary_cos;     /* (max_pos, rotary_dim/2), float32 or q's dtype; needs k_new */
    fc_tensor rotary_sin;     /* same shape, dtype and stride[0] as rotary_cos */
    int rotary_interleaved;   /* 1: pairs (2m, 2m+1); 0: pairs (m, m + rotary_dim/2) */

    /* Scores. */
    float softmax_scale;      /* 0: 1/sqrt(d) */
    float softcap;            /* 0: off; else x = softcap * tanh(x / softcap) */
    int causal;               /* 1: keep j <= i + off (sets window_right to 0) */
    int window_left;          /* -1: unbounded */
    int window_right;         /* -1: unbounded */
    fc_tensor alibi_slopes;   /* float32 (h_q) or (b, h_q); optional */
    fc_tensor sinks;          /* float32 (h_q): learnable sink logits; optional */

    /* Work decomposition. */
    int num_splits;           /* 0: chosen by flashc; 1: no split; n <= 128: up to n splits of the key range */

    /* A dense cache indexed and padded per sequence (flash_attn's cache_batch_idx and cache_leftpad).
     * Added in 0.2, at the end: the fields above keep their offsets. */
    fc_tensor kv_batch_idx;   /* int32 (b): dense k/v only: sequence i uses cache row kv_batch_idx[i] (else i) */
    fc_tensor kv_leftpad;     /* int32 (b): dense k/v only: sequence i's keys start at row kv_leftpad[i] */
    fc_tensor seqused_q;      /* int32 (b): sequence i has only its first seqused_q[i] query rows (FA3's
                               * seqused_q): the rest are neither read nor written, and the mask aligns
                               * to seqused_q[i] rows. CUDA does not split the key range then. */

    /* FP8 caches: dequantisation scales, float32 (b, h_k) (any strides: stride 0 broadcasts one value),
     * optional (1 when absent); only with an fp8 k / v (see "FP8" above). */
    fc_tensor k_descale;
    fc_tensor v_descale;
    fc_tensor q_descale;      /* fp8 q: float32 (b, h_k), the scale of the query heads of KV head h */
} fc_attn_args;

/* Fills *args with the defaults: CPU, all tensors absent, scale 0 (1/sqrt(d)), no softcap, no mask
 * (window -1, -1), num_splits 0, rotary_interleaved 0. */
void fc_attn_args_init(fc_attn_args *args);

/* Bytes of workspace fc_attn_fwd needs for these arguments (validated as by fc_attn_fwd, without
 * reading tensor contents), its fastest path's included (see "Devices, streams, workspaces"). 0 on the CPU. */
fc_status fc_attn_workspace_size(const fc_attn_args *args, size_t *bytes);

/* What fc_attn_fwd would run for args, in words, into buf (n bytes, always NUL-terminated; cut to fit):
 * the backend, the kernel and its tile shape, the splits. E.g. "cuda: wgmma prefill (kernel d 128 / d_v
 * 128): 128-row tiles, 4 per CTA, 128-key blocks, 2 Q buffers; 1 split" or "cuda: mma.sync decode (kernel
 * d 128 / d_v 128): 16-row tiles, 2 key warps, 32-key blocks; 4 splits + merge". For logs and benchmarks:
 * the wording may change between versions. Validates args as fc_attn_fwd does (on the CPU, the contents
 * of cu_seqlens, seqused_k and page tables too: the plan depends on them). */
fc_status fc_attn_describe(const fc_attn_args *args, char *buf, size_t n);

/* Runs attention (and the append, if k_new is given). workspace may be NULL when the size is 0 (or,
 * for a prefill without splits, at the price of the last round's spread).
 * stream: a cudaStream_t for FC_DEVICE_CUDA (NULL = default stream); ignored on the CPU. */
fc_status fc_attn_fwd(const fc_attn_args *args, void *workspace, size_t workspace_bytes, void *stream);

/* ---------------------------------------------------------------------------------------------- */
/* Plans: validate and plan once, run many times (e.g. once per batch step, then once per layer)    */

/* An attention call planned once: the arguments validated, the kernel and split count chosen, the
 * workspace sized. fc_plan_run then runs it with new data pointers (each layer's q, caches and out)
 * for only the cost of re-checking them. On the CPU the split count comes from the lengths held by
 * cu_seqlens / seqused_k at plan time; later runs may change those contents (they are re-checked on
 * every run; any split count gives the same result up to float rounding).
 * A plan is immutable after fc_plan_create: several threads may run it at once (each with its own
 * workspace on CUDA). It holds no device memory and never reads through the planned pointers after
 * fc_plan_create returns. */
typedef struct fc_plan fc_plan;

/* Validates args as fc_attn_fwd does (nothing is run or written) and plans the call into *plan, which
 * fc_plan_destroy frees. *plan is NULL on failure. */
fc_status fc_plan_create(const fc_attn_args *args, fc_plan **plan);

/* Bytes of workspace each fc_plan_run of this plan needs (as fc_attn_workspace_size). */
fc_status fc_plan_workspace_size(const fc_plan *plan, size_t *bytes);

/* fc_attn_fwd(args, ...) with the plan's decisions. args must equal the planned arguments in
 * everything but the data pointers of its tensors: the same tensors present, the same dtypes, shapes
 * and strides, the same scalars (else FC_ERR_INVALID_ARGUMENT naming the first field that differs,
 * e.g. "q: shape[1] = 5 differs from the plan's 4"). Pointers are checked as fc_attn_fwd checks them
 * (alignment, overlap of written views; on the CPU the contents of the index tensors). */
fc_status fc_plan_run(const fc_plan *plan, const fc_attn_args *args, void *workspace, size_t workspace_bytes,
                      void *stream);

/* Frees a plan (NULL is fine). */
void fc_plan_destroy(fc_plan *plan);

/* ---------------------------------------------------------------------------------------------- */
/* Merging partial attention states                                                                */

/* n partial results over disjoint key sets, each (out_s, lse_s), merge into
 *   lse = log(sum_s exp(lse_s)),  out = sum_s exp(lse_s - lse) * out_s.
 * A partial with lse_s = -inf contributes nothing (its out_s is not read); if all are -inf, out = 0 and
 * lse = -inf. A NaN lse_s makes out and lse NaN, and so does an lse_s of +inf. out and lse must not
 * overlap themselves or the inputs (see Memory above). */
typedef struct fc_merge_args {
    fc_device device;
    fc_tensor out_partial;    /* (n, rows, h, d_v): float32, bf16 or fp16 */
    fc_tensor lse_partial;    /* float32 (n, rows, h) */
    fc_tensor out;            /* (rows, h, d_v): float32, bf16 or fp16 (float32 not on CUDA); written */
    fc_tensor lse;            /* float32 (rows, h); optional; written */
} fc_merge_args;

fc_status fc_merge_states(const fc_merge_args *args, void *stream);

/* ---------------------------------------------------------------------------------------------- */
/* Errors found on the device                                                                      */

/* On CUDA the host never reads device tensors, so the lengths, offsets and page indices they hold
 * (cu_seqlens_q/k, seqused_k, page_table; the key counts, cache capacities and rotary positions they
 * imply) are checked by the kernels. Whatever those tensors hold, no kernel reads or writes outside the
 * tensors of the call: a length is cut to what its layout holds (seqused_k[i] + s_new to the cache's
 * capacity, a cu_seqlens span to the tensor's rows, a sequence to max_seqlen_q / max_seqlen_k; cu_seqlens[0]
 * is read as 0), a page index outside [0, num_pages) is replaced by page 0, a rotary position is cut to
 * the tables. The kernels record the first such error of the device in a device-side error record (a
 * fixed device address, so graph capture and replay keep working). The outputs of the sequences
 * involved are then unspecified (rows a cut leaves to no tile are not written, or get 0 when split),
 * nothing outside out, lse, the workspace and the cache is written, and the CUDA context stays usable.
 * Checking costs the kernels a few integer operations per tile and per key row.
 *
 * fc_check_errors waits for `stream` (a cudaStream_t; NULL = the default stream) on the current CUDA
 * device, then reads and clears that device's record. FC_OK: no error was recorded since the last
 * check. FC_ERR_INVALID_ARGUMENT: fc_last_error names the argument and the first bad value, e.g.
 * "page_table: sequence 0 needs 257 keys (seqused_k 257 + 0 new), more than its 1 pages of 256 hold".
 * Errors of any stream's calls that have completed are seen. A build without CUDA, or a process with
 * no GPU, returns FC_OK (no kernel ran, nothing can have been recorded). Not capturable (it waits). */
fc_status fc_check_errors(void *stream);

/* ---------------------------------------------------------------------------------------------- */
/* Backends                                                                                        */

/* 1 if this build has CUDA kernels and the current CUDA device can run them (compute capability 9.0:
 * H100, H200), else 0. On any other GPU, calls with FC_DEVICE_CUDA fail with FC_ERR_NO_DEVICE naming
 * "device" and the GPU's compute capability. The CUDA runtime is linked into libflashc statically: a
 * machine without the CUDA toolkit or driver loads the library and runs the CPU backend. */
int fc_cuda_available(void);

/* Worker threads of the CPU backend (n >= 1); 0 restores the default. */
fc_status fc_set_num_threads(int n);
int fc_get_num_threads(void);

#ifdef __cplusplus
}
#endif
#endif /* FLASHC_H */
