// fwd_launch.cuh — host side of the forward kernels: tile configs, TMA descriptors, the launch of a config.
// The kernels of each head dim are instantiated in a unit of their own (fwd_d64.cu ... fwd_d256.cu,
// fwd_fp8.cu: fwd_launch_unit), so that make -j compiles them at once; fwd.cu dispatches to them.
#pragma once
#include <cudaTypedefs.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <type_traits>

#include "fwd_kernel.cuh"
#include "fwd_wgmma.cuh"

// Configs. Decode (s_q * group <= 16 packed rows): the mma.sync kernel (fwd_kernel.cuh), KW key warps,
// each with all 16 rows against its part of the CTA's keys through its own pipeline of 32-key blocks,
// 3 stages (53 KB per warp at d 128): one warp per scheduler and ~128 KB of K/V requests in flight per SM.
// KW = 2 (the warps merge in shared memory) when the tiles alone cannot fill the SMs: half the splits
// (b32 x 1k: none, no merge kernel); KW = 1 otherwise (longer CTAs, half the waves: b128 x 1k 186 vs 193 us).
// KV: an fp8 cache's byte (the MMAs' fragments converted from the landed rows in registers), else T.
// fp8 caches with key warps: KW 4 of 2 stages each: a warp's pipeline (16.5 KB at d 128, the fp8 rows alone since
// PERF.md step 135) lets three CTAs of four warps share an SM (168 registers), three warps per scheduler; with one
// per scheduler the kernel was issue-bound at ~57% of the read ceiling (PERF.md steps 54, 56). KW 1: 2 stages too,
// 8 CTAs per SM by its registers (204; 10 by shared memory, which ctas_per_sm counts), so 1024 tiles run in one wave
// (6 per SM with 3 stages and a conversion buffer: 1.3 waves; step 57; b128 takes key warps, launch_decode's
// threshold being 132 x 10). MANY: fp8 key warps where the
// tiles fill the four-warp CTAs' slots twice or more (b128): KW 2, four CTAs an SM, half the waves (b128 x 1k 137 ->
// 125 us; where the tiles are fewer, b32 x 1k and b1 lost 3-12%: PERF.md step 123).
// LO8: tiles of at most 8 packed rows (s_q x group <= 8), whose second row slot a thread skips (fwd_cfg's LO8).
template <typename T, int D, int DV, bool KEY_WARPS, typename KV = T, bool MANY = false, bool LO8 = false> struct decode_cfg {
    static constexpr bool FP8 = sizeof(KV) == 1;
    static constexpr int KW = !KEY_WARPS ? 1 : FP8 && !MANY ? 4 : 2, STAGES = FP8 ? 2 : 3;
    typedef fwd_cfg<T, D, DV, 1, 32, STAGES, 1, KW, KV, LO8> type;
};
static_assert(3 * (decode_cfg<__nv_bfloat16, 128, 128, true, unsigned char>::type::SMEM_BYTES + 1024) <= 227 * 1024,
              "fp8 decode at d 128: three CTAs of four key warps per SM");
static_assert(8 * (decode_cfg<__nv_bfloat16, 128, 128, false, unsigned char>::type::SMEM_BYTES + 1024) <= 227 * 1024,
              "fp8 decode at d 128, one warp per CTA: 8 CTAs per SM (the register limit; 1056 CTAs a wave)");
// Prefill: the wgmma kernel (fwd_wgmma.cuh) at every head dim the dispatch names: 128-row tiles, key
// blocks and Q buffers per head dims (wg_shape). d 96 stores its tiles in d 128's layout (features 96-127
// come as zeros and are never read) and computes 96 (PERF.md step 63); a pair padded to max(d, d_v) runs
// the kernel of that size, its extra features zeros (TMA reads them as out of bounds, cp.async does not
// read them). (The mma.sync prefill this replaced ran d 256 at a third of cuDNN: PERF.md step 41.)
template <typename T, int D, int DV> struct prefill_cfg {
    typedef wg_cfg<T, D, DV> type; // wg_shape holds its tile shape; wg_cfg's asserts reject what it cannot run
};

// The wgmma kernel's configs (persistent, or four or two tiles per CTA: fwd_wgmma.cuh wg_tile_at) and the
// others (one tile per CTA).
template <class C> struct is_wg {
    static constexpr bool value = false;
};
template <typename T, int D, int DV, typename E, int V> struct is_wg<wg_cfg<T, D, DV, E, V>> {
    static constexpr bool value = true;
};

// cuTensorMapEncodeTiled from the driver (no link to libcuda), or NULL.
static inline PFN_cuTensorMapEncodeTiled_v12000 tma_encoder(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn;
    static int looked;
    if (!looked) {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)f;
        cudaGetLastError();
        looked = 1;
    }
    return fn;
}

// A TMA descriptor of x (K, V or Q; elements of eb bytes: p's dtype, or 1 for FP8's e4m3): (dim, heads, rows,
// outer) with element strides (sh, sr, so), in boxes of 128 bytes x box_heads x box_rows x 1 with the 128-byte
// swizzle (fwd_wgmma.cuh's tile layout: a box's rows are its (row, head) pairs in that order, 128 bytes each).
// 0 when TMA cannot take it (strides, alignment, sizes, driver).
static inline int encode_map(CUtensorMap *m, const fc_problem *p, const fc_view *x, int eb, int dim, int heads,
                             int64_t rows, int64_t outer, int64_t so, int box_heads, int box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 enc = tma_encoder();
    if (!enc || rows <= 0 || outer <= 0) return 0;
    int64_t es = eb;
    if (outer == 1) so = x->sr * rows; // one outer index: any stride will do
    cuuint64_t dims[4] = {(cuuint64_t)dim, (cuuint64_t)heads, (cuuint64_t)rows, (cuuint64_t)outer};
    cuuint64_t strides[3] = {(cuuint64_t)(x->sh * es), (cuuint64_t)(x->sr * es), (cuuint64_t)(so * es)};
    for (int i = 0; i < 3; i++)
        if ((int64_t)strides[i] <= 0 || strides[i] % 16 || strides[i] >= (1ull << 40)) return 0;
    if ((uintptr_t)x->data % 16 || rows >= (1ll << 31) || outer >= (1ll << 31)) return 0; // int32 coordinates
    cuuint32_t box[4] = {(cuuint32_t)(128 / eb), (cuuint32_t)box_heads, (cuuint32_t)box_rows, 1}, step[4] = {1, 1, 1, 1};
    CUtensorMapDataType t = eb == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                          : p->dtype == FC_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    return enc(m, t, 4, x->data, dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Every sequence has p's lengths and reads its own cache row from key 0, with no append: no varlen q or k, no seqused,
// no kv_batch_idx or kv_leftpad, no k_new (the walk may then take each sequence's lengths from p: wg_tma's solo).
static inline bool wg_plain_lengths(const fc_problem *p) {
    return !p->cu_seqlens_q && !p->seqused_q && !p->cu_seqlens_k && !p->seqused_k && !p->kv_batch_idx && !p->kv_leftpad &&
           !p->k_new.data;
}

// The wgmma kernel's K/V descriptors (wg_tma): dense (b, s_k), varlen (total_k rows), paged (num_pages
// of page_size rows, when a page is a multiple of BN rows or a divisor of BN of 64 rows or more: each box
// of box_rows keys then lies in one page). Otherwise off: cp.async. (Pages of 16 by 16-row boxes, eight
// per 64 features, measured 14% slower than cp.async on the H100; 64 and 256 +42% and +59%.)
template <class C>
static wg_tma wg_tma_of(const fc_problem *p, int splits) {
    wg_tma tm;
    memset(&tm, 0, sizeof tm);
    int64_t rows = 0, outer = 0, sk = 0, sv = 0;
    int kind = WG_TMA_OFF, box = C::BN;
    switch (p->kv_layout) {
    case FC_KV_DENSE: kind = WG_TMA_DENSE, rows = p->s_k, outer = p->k_batch, sk = p->k.sb, sv = p->v.sb; break;
    case FC_KV_VARLEN: kind = WG_TMA_VARLEN, rows = p->total_k, outer = 1; break;
    default:
        if (p->page_size % 64 == 0 && (p->page_size % C::BN == 0 || C::BN % p->page_size == 0)) {
            kind = WG_TMA_PAGED, rows = p->page_size, outer = p->num_pages, sk = p->k.sb, sv = p->v.sb;
            box = p->page_size < C::BN ? p->page_size : C::BN;
        }
    }
    // The maps' feature extents are p's d and d_v: the boxes past them (a padded head dim) come as zeros.
    if (kind != WG_TMA_OFF && encode_map(&tm.k, p, &p->k, C::EB, p->d, p->h_k, rows, outer, sk, 1, box) &&
        encode_map(&tm.v, p, &p->v, C::EB, p->d_v, p->h_k, rows, outer, sv, 1, box)) {
        tm.kind = kind;
        tm.box_rows = box;
    }
    // Q: a tile's BM packed rows are BM / group query rows x the group's heads, one box per 64 features,
    // when the group divides BM (rows past a dense sequence come as zeros; a varlen tile's rows past its
    // sequence read the next one's, computed and never stored, as cp.async would).
    int group = p->h_q / p->h_k;
    bool q_varlen = p->cu_seqlens_q != NULL;
    if (C::BM % group == 0 &&
        encode_map(&tm.q, p, &p->q, C::EB, p->d, p->h_q, q_varlen ? p->total_q : p->s_q, q_varlen ? 1 : p->batch, p->q.sb,
                   group, C::BM / group))
        tm.q_kind = q_varlen ? WG_TMA_VARLEN : WG_TMA_DENSE;
    // O: a consumer warpgroup's 64 packed rows per box (wg_store_tma), when the group divides 64, and only
    // where every tile's box may be stored whole: dense rows (a varlen box past its sequence would write the
    // next one's rows; rows past seqused_q are not written; a dense box past s_q is outside the map), one split.
    if (C::O_TMA && 64 % group == 0 && !q_varlen && !p->seqused_q && splits == 1 &&
        encode_map(&tm.o, p, &p->out, sizeof(typename C::T), p->d_v, p->h_q, p->s_q, p->batch, p->out.sb, group, 64 / group))
        tm.o_kind = WG_TMA_DENSE;
    // One producer warp (wg_produce) where every copy is a TMA one and no length needs checking: dense K/V of p's
    // s_k keys for every sequence (each key block whole, or the last cut at the map's end) and Q by TMA; the walk then
    // takes each sequence's lengths from p (seqlen_dense).
    tm.solo = !C::FP8 && tm.kind == WG_TMA_DENSE && tm.q_kind == WG_TMA_DENSE && wg_plain_lengths(p);
    return tm;
}

// The masked persistent walk's tiles placed to end at the sequence's last packed row (tm.shift = cut, the rows a
// tile grid from row 0 has past it): the one partial tile is then a sequence's first, which sees the fewest keys,
// instead of its last, which sees them all (d 64's 192-row tiles: 6% of the causal 2k / 4k work). Only where rows
// before 0 are harmless: dense Q by TMA (rows < 0 come as zeros), O by TMA, no rotary (it would index its tables by
// them), and every row seeing a key (s_k >= s_q: every tile has a block, so none takes the register store of a tile
// with none, store_rows). In whole warpgroups' rows (64 packed rows, O's TMA box), so that a box starting before row
// 0 lies wholly before it and is not stored (wg_store_tma; a TMA store at a negative row faults: illegal
// instruction, PERF.md step 175).
static inline int wg_end_shift(const fc_problem *p, const wg_tma &tm, int64_t cut) {
    bool safe = tm.solo && tm.q_kind == WG_TMA_DENSE && tm.o_kind == WG_TMA_DENSE && !p->rotary_cos && p->s_k >= p->s_q;
    return safe ? (int)(cut / 64 * 64) : 0;
}

static inline bool use_decode_cfg(const fc_problem *p) { return (int64_t)p->s_q * (p->h_q / p->h_k) <= 16; }

// CTAs of a config that fit on one SM, by shared memory and threads.
static inline int ctas_per_sm(int smem, int threads) {
    int n = (227 * 1024) / (smem + 1024);
    if (n > 2048 / threads) n = 2048 / threads;
    return n < 1 ? 1 : n;
}

// (query-row tile, KV head, sequence) work items of p at `rows` packed rows per tile.
static inline int64_t tiles_of_problem(const fc_problem *p, int rows) {
    return ((int64_t)p->s_q * (p->h_q / p->h_k) + rows - 1) / rows * p->h_k * p->batch;
}

// What the split planner needs to know of a config.
struct cfg_info {
    int rows, bn, smem, threads, kw; // kw: key warps, each taking a part of a split's blocks
    bool wg;                         // the wgmma kernel (else fwd_kernel's mma.sync)
    int d, dv, tile_rows, qbuf;      // the kernel's head dims, rows per tile, Q buffers (wgmma)
    int plain_splits;                // in: where > 0, plain is filled in for that many splits (fc_cuda_describe)
    bool plain;                      // out: the plain-call kernel (wg_plain) runs p, if the walk is persistent
};

// Q buffers of a config (wg_cfg's; fwd_kernel has one).
template <class C, class = void> struct qbuf_of {
    static constexpr int n = 1;
};
template <class C> struct qbuf_of<C, decltype(void(C::QBUF))> {
    static constexpr int n = C::QBUF;
};

// The facts of the current device the host heuristics use (SMs, L2 bytes), asked of the runtime once per
// device (devices >= 64 ask every time); a fact the runtime cannot tell reads as H100's.
struct device_facts {
    int sms, l2_bytes;
};
static inline int device_attr(cudaDeviceAttr a, int dev, int otherwise) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, a, dev) != cudaSuccess || v <= 0) {
        cudaGetLastError();
        v = otherwise;
    }
    return v;
}
static inline device_facts this_device(void) {
    static device_facts cached[64]; // sms == 0: not asked yet
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        dev = 0;
    }
    device_facts f = {0, 0};
    if (dev >= 0 && dev < 64) {
        f.sms = __atomic_load_n(&cached[dev].sms, __ATOMIC_ACQUIRE);
        if (f.sms) {
            f.l2_bytes = __atomic_load_n(&cached[dev].l2_bytes, __ATOMIC_RELAXED);
            return f;
        }
    }
    f.sms = device_attr(cudaDevAttrMultiProcessorCount, dev, 132);
    f.l2_bytes = device_attr(cudaDevAttrL2CacheSize, dev, 50 << 20);
    if (dev >= 0 && dev < 64) {
        __atomic_store_n(&cached[dev].l2_bytes, f.l2_bytes, __ATOMIC_RELAXED);
        __atomic_store_n(&cached[dev].sms, f.sms, __ATOMIC_RELEASE);
    }
    return f;
}
static inline int sm_count(void) { return this_device().sms; }

// cudaFuncSetAttribute(kernel, max dynamic shared memory) once per kernel (config C and VARIANT, which tells
// apart kernels of one config and one type: the wgmma kernel's two walks) and device: the attribute stays
// with the context, and setting it on every call cost host time on each launch.
template <class C, int VARIANT = 0, class K>
static fc_status allow_smem(K kernel, int bytes) {
    static unsigned long long done; // bit d: set on device d (devices >= 64 set it every time)
    int dev = 0;
    FC_CUDA_TRY(cudaGetDevice(&dev));
    unsigned long long bit = dev < 64 ? 1ull << dev : 0;
    if (bit && (__atomic_load_n(&done, __ATOMIC_ACQUIRE) & bit)) return FC_OK;
    FC_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    __atomic_fetch_or(&done, bit, __ATOMIC_RELEASE);
    return FC_OK;
}

// CTAs of the kernel (at `bytes` of shared memory, C::THREADS threads) resident on one SM at once, asked of
// the runtime once (registers count: the wgmma kernel's setmaxnreg budget leaves room for one).
template <class C, int VARIANT = 0, class K>
static fc_status resident_per_sm(K kernel, int bytes, int *n) {
    static int cached; // 0: not asked yet
    int c = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (c == 0) {
        FC_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&c, kernel, C::THREADS, bytes));
        if (c < 1) c = 1;
        __atomic_store_n(&cached, c, __ATOMIC_RELEASE);
    }
    *n = c;
    return FC_OK;
}

// Whether p's scores are plain: no ALiBi, sinks, rotary or softcap, a positive scale (what the plain kernel computes).
static inline bool wg_plain_scores(const fc_problem *p) {
    return !(p->alibi || p->sinks || p->rotary_cos || p->softcap > 0.0f || !(p->scale > 0.0f));
}

// Whether the plain kernel (fwd_wgmma.cuh wg_plain) runs p: Q, K, V dense by TMA with no length to check (solo), O by
// TMA, plain scores (no softcap, a positive scale), no ALiBi, sinks or rotary, bf16 / fp16, and a key block in every
// tile (keys, no left window, and a right one, causal, only where every row sees key 0), as every call of the
// prefill table is; and no longer than the config's PLAIN_KEYS (1k by default, where the tiles' edges, the fetch stalls
// it is for, weigh; every length on d 96 and d 128, 8k on d 256: PERF.md steps 193, 194, 198).
// (Only for a C with C::HAS_PLAIN: its callers ask that first.)
template <class C>
static inline bool wg_plain_call(const fc_problem *p, const wg_tma &tm) {
    if (!tm.solo || tm.o_kind != WG_TMA_DENSE || p->s_k > C::PLAIN_KEYS || !wg_plain_scores(p)) return false;
    return p->s_k > 0 && p->window_left < 0 && (p->window_right < 0 || p->s_q <= p->s_k);
}

// The most CTAs, at most slots and at least slots - 7, prime to a head's units (wg_walk_ctas); slots where none is.
static inline int64_t wg_coprime_ctas(int64_t slots, int64_t per_head) {
    for (int64_t x = slots; x > slots - 8 && x > 1; x--) {
        int64_t a = x, b = per_head;
        while (b) { int64_t r = a % b; a = b; b = r; }
        if (a == 1) return x;
    }
    return slots;
}

// The wgmma prefill's walk (fwd_wgmma.cuh wg_tile_at): the persistent one wherever there is no mask. It
// measured faster at up to 2k packed query rows per (sequence, KV head) for d >= 128 (PERF.md step 53d:
// one pipeline fill per SM, not per four tiles), and since at every length and head dim (step 64: the grid
// of four tiles a CTA ends in a partial wave where the CTAs are not a multiple of the SMs, e.g. d 96's 21
// heads: 672 CTAs, 5.1 waves; d 96 4k-16k +17-24%, d 192 8k +20%, d 128 +4-7%, d 64 +2-7%). Past 2k rows
// only where every sequence has the same keys (a dense cache, no seqused_k), so that its static walk stays
// balanced; ragged lengths keep the grid, whose CTAs the hardware hands out as SMs free up.
// Under a mask (step 67) the persistent walk in rounds of W heads where its static pairs stay balanced:
// every sequence as long (dense q and K/V, no seqused), one split, and W ms CTAs (ms: a head's tiles, W = slots /
// ms) within 90% of the slots; else the grid. (Up to 16 tiles a head until PERF.md step 92: past that the grid's
// last wave of long causal CTAs left 11% of d 64's SM cycles idle at 4k, ncu.)
// Without a mask, CTA x takes units x, x + X, ...: a head's unit (x + k X) mod (its units), so where X is a multiple of a
// head's units the same CTAs take every head's last tile. Where that tile leaves a warpgroup without rows that skips
// its blocks (skip_bm: the tile rows of a C::SKIP_EMPTY kernel, else 0; d 64's 192-row tiles at 512, 1k, 2k keys)
// those CTAs run short and the others set the time; X prime to a head's units, a slot or a few below them, gives
// every CTA its share of the short tiles.
// Returns the CTAs of the persistent walk, or 0 for the grid.
static inline int64_t wg_walk_ctas(const fc_problem *p, int64_t m_tiles, int skip_bm, int splits, int64_t slots) {
    bool even = p->kv_layout == FC_KV_DENSE && !p->seqused_k;
    bool even_q = even && !p->cu_seqlens_q && !p->seqused_q; // every sequence as long, queries and keys
    int64_t rows = (int64_t)p->s_q * (p->h_q / p->h_k), units = m_tiles * splits * p->batch * p->h_k;
    if (!wg_masked(*p)) {
        if (!even && rows > 2048) return 0;
        if (units <= slots) return units;
        bool short_last = even_q && m_tiles * skip_bm - rows >= 64;
        return short_last ? wg_coprime_ctas(slots, m_tiles * splits) : slots;
    }
    bool lpt = even_q && splits == 1;
    int64_t w = slots / m_tiles;
    return lpt && w * m_tiles * 10 >= slots * 9 ? w * m_tiles : 0;
}

// Query tiles per CTA of the grid walk (masked prefill: fwd_wgmma.cuh wg_tile_at): 4, two snake pairs (one
// pipeline fill per four tiles), or 2 where four leave the last wave of CTAs much emptier, or where the K/V
// that the CTAs running at once read does not stay in L2. The pairs make the CTAs about equally long, so a
// wave's fill is the walk's: d 96's 21 heads ran 672 CTAs in 5.1 waves of 132 (6 rounds, 85%), two tiles a
// CTA 1344 in 10.2 (93%); d 192's 10 heads 2.4 waves (81%), 4.8 (97%). A CTA reads its (sequence, KV head)'s
// keys once per tile, and the X = m_tiles / tiles CTAs of one head share them: at d 256 with four tiles a
// CTA, 132 heads' K/V (66 MB at 512 keys) were live at once, and a causal s512 call read 368 MB from DRAM for
// 201 MB of Q, K and V (ncu; PERF.md step 66). kv_bytes: one (sequence, KV head, split)'s keys.
static inline int wg_grid_tiles(int64_t m_tiles, int64_t others, int64_t slots, double kv_bytes, double l2_bytes) {
    double fill[2];
    for (int i = 0; i < 2; i++) {
        int64_t tiles = 4 >> i, x = (m_tiles + tiles - 1) / tiles, ctas = x * others, rounds = (ctas + slots - 1) / slots;
        fill[i] = (double)ctas / (double)(rounds * slots);
    }
    int64_t x4 = (m_tiles + 3) / 4;
    double live = fmin((double)slots / (double)x4, (double)others) * kv_bytes; // K/V of the heads running at once
    return fill[1] > fill[0] + 0.05 || live > 0.8 * l2_bytes ? 2 : 4;
}

// The divisors of the wgmma kernel's walk (wg_tma; fwd_wgmma.cuh wg_tile_at), all < 2^31 (launch checks
// the units): m_tiles query tiles a (sequence, KV head), splits, h_k, the GQA group, w heads a round.
static inline void wg_walk_divisors(wg_tma *tm, const fc_problem *p, int64_t m_tiles, int splits, int64_t w) {
    tm->ms = fastdiv_of((unsigned)m_tiles);
    tm->units_per_head = fastdiv_of((unsigned)(m_tiles * splits));
    tm->splits = fastdiv_of((unsigned)splits);
    tm->h_k = fastdiv_of((unsigned)p->h_k);
    tm->group = fastdiv_of((unsigned)(p->h_q / p->h_k));
    tm->w = fastdiv_of((unsigned)w);
}

// Whether config C's plain kernel runs p at that many splits (wg_plain_call; false where C has none).
template <class C> static bool plain_kernel_runs(const fc_problem *p, int splits) {
    if constexpr (is_wg<C>::value)
        if constexpr (C::HAS_PLAIN) return wg_plain_call<C>(p, wg_tma_of<C>(p, splits));
    return false;
}

template <class C>
static fc_status launch(const fc_problem *p, fc_split_ws ws, cudaStream_t stream, cfg_info *info) {
    if (info) {
        int plain_splits = info->plain_splits;
        *info = cfg_info{C::BM, C::BN, C::SMEM_BYTES, C::THREADS, pipe_of<C>::kw, is_wg<C>::value, C::D, C::DV,
                         C::BM * live_halves<C>::n / 2, qbuf_of<C>::n, 0, false}; // tile rows: 8 on LO8's 16-row MMA tiles
        info->plain = plain_splits > 0 && plain_kernel_runs<C>(p, plain_splits);
        return FC_OK;
    }
    int group = p->h_q / p->h_k;
    int64_t m_tiles = ((int64_t)p->s_q * group + C::BM - 1) / C::BM;
    int64_t z = (int64_t)p->batch * p->h_k, x_major = m_tiles * ws.splits * p->h_k;
    if (m_tiles == 0 || z == 0) return FC_OK;
    if constexpr (is_wg<C>::value) {
        int64_t units = m_tiles * ws.splits * z;
        if (z > 65535 || ws.splits > 65535 || units > 0x7fffffff) // groups <= units
            return fc_fail(FC_ERR_UNSUPPORTED, "q", "too many work units for the CUDA kernel (%lld tiles x %d splits x %lld)",
                           (long long)m_tiles, ws.splits, (long long)z);
        int per_sm = 1;
        fc_status st = allow_smem<C, 1>(fwd_wgmma_kernel<C, true>, C::SMEM_BYTES);
        if (st == FC_OK) st = resident_per_sm<C, 1>(fwd_wgmma_kernel<C, true>, C::SMEM_BYTES, &per_sm);
        if (st != FC_OK) return st;
        int64_t ctas = wg_walk_ctas(p, m_tiles, C::SKIP_EMPTY ? C::BM : 0, ws.splits, (int64_t)sm_count() * per_sm);
        wg_tma tm = wg_tma_of<C>(p, ws.splits);
        wg_walk_divisors(&tm, p, m_tiles, ws.splits, wg_masked(*p) && ctas > 0 ? ctas / m_tiles : 1);
        if (ctas > 0 && wg_masked(*p)) tm.shift = wg_end_shift(p, tm, m_tiles * C::BM - (int64_t)p->s_q * group);
        // Both walks launched early (PDL, as decode is): fwd_wgmma_kernel waits for the previous kernel first (+1.4%
        // at 512-2k keys: the next call's CTAs are resident when a grid ends; PERF.md step 96).
        if (ctas > 0) { // a grid of at most as many CTAs as fit at once, walking the units (wg_tile_at)
            void (*kernel)(const fc_problem, fc_split_ws, const wg_tma) = fwd_wgmma_kernel<C, true>;
            if constexpr (C::HAS_PLAIN)
                if (wg_plain_call<C>(p, tm)) { // (the same shared memory and threads, so the same CTAs an SM)
                    kernel = fwd_wgmma_kernel<wg_plain<C>, true>;
                    if ((st = allow_smem<wg_plain<C>, 1>(kernel, C::SMEM_BYTES)) != FC_OK) return st;
                }
            FC_CUDA_TRY(fc_launch_pdl(kernel, dim3((unsigned)ctas), dim3(C::THREADS), C::SMEM_BYTES, stream, *p, ws, tm));
            FC_CUDA_LAUNCHED("fwd_wgmma_kernel");
            return FC_OK;
        }
        st = allow_smem<C>(fwd_wgmma_kernel<C, false>, C::SMEM_BYTES);
        if (st == FC_OK) st = resident_per_sm<C>(fwd_wgmma_kernel<C, false>, C::SMEM_BYTES, &per_sm);
        if (st != FC_OK) return st;
        double kv_bytes = (double)p->s_k * (p->d + p->d_v) * C::EB / ws.splits;
        int tiles = wg_grid_tiles(m_tiles, ws.splits * z, (int64_t)sm_count() * per_sm, kv_bytes,
                                  this_device().l2_bytes);
        dim3 grid((unsigned)((m_tiles + tiles - 1) / tiles), (unsigned)ws.splits, (unsigned)z);
        FC_CUDA_TRY(fc_launch_pdl(fwd_wgmma_kernel<C, false>, grid, dim3(C::THREADS), C::SMEM_BYTES, stream, *p, ws,
                                  tm));
        FC_CUDA_LAUNCHED("fwd_wgmma_kernel");
    } else {
        bool fits = C::HEAD_MAJOR ? x_major <= 0x7fffffff && p->batch <= 65535
                                  : m_tiles <= 0x7fffffff && z <= 65535 && ws.splits <= 65535;
        if (!fits)
            return fc_fail(FC_ERR_UNSUPPORTED, "q", "grid too large for the CUDA kernel (%lld tiles x %d splits x %lld)",
                           (long long)m_tiles, ws.splits, (long long)z);
        dim3 grid = C::HEAD_MAJOR ? dim3((unsigned)x_major, (unsigned)p->batch, 1)
                                  : dim3((unsigned)m_tiles, (unsigned)ws.splits, (unsigned)z);
        void (*kernel)(const fc_problem, fc_split_ws) = fwd_kernel<C>;
        fc_status st = allow_smem<C>(kernel, C::SMEM_BYTES);
        if (st != FC_OK) return st;
        if (C::HEAD_MAJOR) // decode: launched early (PDL), fwd_kernel waits for the previous kernel first
            FC_CUDA_TRY(fc_launch_pdl(kernel, grid, dim3(C::THREADS), C::SMEM_BYTES, stream, *p, ws));
        else
            kernel<<<grid, C::THREADS, C::SMEM_BYTES, stream>>>(*p, ws);
        FC_CUDA_LAUNCHED("fwd_kernel");
    }
    return FC_OK;
}

// Kernels of head dims D, DV for p, whose d, d_v are these or (padded) smaller: both kernels zero-fill the
// extra features of Q, K and V and store d_v output features.
template <typename T, int D, int DV, typename KV = T>
static fc_status launch_decode(const fc_problem *p, fc_split_ws ws, cudaStream_t stream, cfg_info *info) {
    typedef typename decode_cfg<T, D, DV, false, KV>::type one;
    typedef typename decode_cfg<T, D, DV, true, KV>::type key_warps;
    int64_t tiles = tiles_of_problem(p, one::BM), sms = sm_count();
    if (tiles >= sms * ctas_per_sm(one::SMEM_BYTES, one::THREADS)) return launch<one>(p, ws, stream, info);
    if constexpr (!std::is_same<T, KV>::value) // fp8 cache: two key warps where four's CTAs would run two waves or more
        if (tiles >= 2 * sms * ctas_per_sm(key_warps::SMEM_BYTES, key_warps::THREADS))
            return launch<typename decode_cfg<T, D, DV, true, KV, true>::type>(p, ws, stream, info);
    if ((int64_t)p->s_q * (p->h_q / p->h_k) <= 8) // key warps on 8-row tiles (LO8; fp8's MANY lost 5-9% on them)
        return launch<typename decode_cfg<T, D, DV, true, KV, false, true>::type>(p, ws, stream, info);
    return launch<key_warps>(p, ws, stream, info);
}

// The second prefill config of a head dim (wg_shape V = 1) where its first loses. d 256, 64-key blocks: a
// paged cache (TMA takes its pages only in blocks a page divides or is a multiple of: 64 and 256-key pages
// by cp.async measured 1.8x slower) and short sequences (512 = 6.4 blocks of 80; -3% at 512, causal 1k -3%:
// PERF.md steps 77, 104). d 64, two consumer warpgroups (128-row tiles): masked calls of up to 1k keys, whose
// partial 192-row tiles lost 4-7% to them (PERF.md steps 69, 78). d 128, 176-key blocks: non-causal dense calls past
// 4k keys whose scores are not plain (step 181; plain ones take the 128-key plain kernel, step 201).
template <int D, int DV>
static constexpr bool wg_has_second_config =
    (D == 256 && DV == 256) || (D == 64 && DV == 64) || (D == 192 && DV == 192) || (D == 128 && DV == 128);
template <int D, int DV> static inline bool wg_second_config(const fc_problem *p) {
    // d 256: 64-key blocks where TMA reads pages in them, and for short sequences: non-causal up to 512 keys,
    // masked up to 1k (non-causal 1k +3.6% on 80-key blocks, causal 1k -3.0%; 2k -1.5..-4.5% on 64: PERF.md step 104)
    if (D == 256) return p->kv_layout == FC_KV_PAGED || p->s_k <= (wg_masked(*p) ? 1024 : 512);
    // d 192: 64-key blocks where pages are multiples of 64 keys (TMA, where 112-key blocks take cp.async) and for
    // masked calls up to 512 keys (4.6 blocks of 112: causal 512 0.93x cuDNN on them, the table's d 192 miss)
    if (D == 192) return (p->kv_layout == FC_KV_PAGED && p->page_size % 64 == 0) || (wg_masked(*p) && p->s_k <= 512);
    // d 128: 176-key blocks for non-causal dense calls past 4k keys (8k / 16k +2.0 / +1.9% over the 128-key general
    // kernel; 2k -1.1%, 4k level: a partial last block and one Q buffer, PERF.md step 181; the producer's 24 registers
    // suit only its one-thread TMA walk, wg_tma's solo), but for plain scores, where the 128-key plain kernel leads
    // (8k / 16k +9.7 / +2.6%, step 201)
    if (D == 128)
        return !wg_masked(*p) && p->s_k > 4096 && p->kv_layout == FC_KV_DENSE && wg_plain_lengths(p) &&
               !wg_plain_scores(p);
    return wg_masked(*p) && p->s_k <= 1024; // d 64
}
// The third (wg_shape V = 2), d 64 only: three serial warpgroups for masked calls of 1k-2k keys (those up to 1k take
// the second; causal 2k +1.8%, 4k level: PERF.md step 173) and non-causal ones up to 2k (512 +2.2%, 1k +0.6%: step
// 174; 2k -0.8% then, +1.6% since they skip a warpgroup without rows: step 186).
template <int D, int DV>
static constexpr bool wg_has_third_config = D == 64 && DV == 64;
static inline bool wg_third_config(const fc_problem *p) { return p->s_k <= 2048; }

template <typename T, int D, int DV>
static fc_status launch_dims(const fc_problem *p, fc_split_ws ws, cudaStream_t stream, cfg_info *info) {
    if (use_decode_cfg(p)) return launch_decode<T, D, DV>(p, ws, stream, info);
    if constexpr (wg_has_second_config<D, DV>)
        if (wg_second_config<D, DV>(p)) return launch<wg_cfg<T, D, DV, T, 1>>(p, ws, stream, info);
    if constexpr (wg_has_third_config<D, DV>)
        if (wg_third_config(p)) return launch<wg_cfg<T, D, DV, T, 2>>(p, ws, stream, info);
    return launch<typename prefill_cfg<T, D, DV>::type>(p, ws, stream, info);
}

// The launches of one unit: head dims D, DV of dtype T, the K/V cache in KV (T, or an fp8 byte: decode only).
template <typename T, int D, int DV, typename KV>
fc_status fwd_launch_unit(const fc_problem *p, fc_split_ws ws, cudaStream_t stream, cfg_info *info);

template <typename T, int D, int DV, typename KV>
fc_status fwd_launch_unit(const fc_problem *p, fc_split_ws ws, cudaStream_t stream, cfg_info *info) {
    if constexpr (!std::is_same<T, KV>::value)
        return launch_decode<T, D, DV, KV>(p, ws, stream, info);
    else
        return launch_dims<T, D, DV>(p, ws, stream, info);
}

// FP8 attention (q, k and v e4m3, out T): the wgmma prefill on e4m3 tiles (wg_cfg's E; fwd_wgmma.cuh), kernel
// head dim D = 64, 128 or 256 (smaller dims padded up), at any s_q (a decode shape's tiles mostly rows past the
// sequence: computed, never stored). Its own unit, fwd_fp8q.cu.
template <typename T, int D>
fc_status fwd_launch_fp8q(const fc_problem *p, fc_split_ws ws, cudaStream_t stream, cfg_info *info);

// FP8 attention's second shapes (fwd_wgmma.cuh wg_shape<D, D, true, 1>), for short and masked calls:
// d 64 on two consumer warpgroups for masked calls up to 1k keys (192-row tiles mostly masked: causal 512 +13%,
// 1k +6% on two; PERF.md step 130); d 128 on 128-key blocks (from 192) up to 1k keys, masked up to 2k (a 512-key
// sequence ends in a partial 192-key block: 512 -9%, causal 512 -15%, causal 2k -3% on 192), and over a paged cache
// (pages of 128 or 256 keys, which 192 does not divide, stay on TMA).
template <int D> static inline bool wg_fp8_second_config(const fc_problem *p) {
    if (D == 64) return wg_masked(*p) && p->s_k <= 1024;
    return p->kv_layout == FC_KV_PAGED || p->s_k <= (wg_masked(*p) ? 2048 : 1024); // d 128
}

template <typename T, int D>
fc_status fwd_launch_fp8q(const fc_problem *p, fc_split_ws ws, cudaStream_t stream, cfg_info *info) {
    if constexpr (D != 256)
        if (wg_fp8_second_config<D>(p)) return launch<wg_cfg<T, D, D, __nv_fp8_e4m3, 1>>(p, ws, stream, info);
    return launch<wg_cfg<T, D, D, __nv_fp8_e4m3>>(p, ws, stream, info);
}
#define FC_FP8Q_UNIT(T, D) \
    template fc_status fwd_launch_fp8q<T, D>(const fc_problem *, fc_split_ws, cudaStream_t, cfg_info *)
extern FC_FP8Q_UNIT(__nv_bfloat16, 64);
extern FC_FP8Q_UNIT(__half, 64);
extern FC_FP8Q_UNIT(__nv_bfloat16, 128);
extern FC_FP8Q_UNIT(__half, 128);
extern FC_FP8Q_UNIT(__nv_bfloat16, 256);
extern FC_FP8Q_UNIT(__half, 256);

// Every unit, instantiated in the file named (extern here: no other file compiles a copy of its kernels).
#define FC_FWD_UNIT(T, D, DV, KV) \
    template fc_status fwd_launch_unit<T, D, DV, KV>(const fc_problem *, fc_split_ws, cudaStream_t, cfg_info *)
// fwd_d64.cu
extern FC_FWD_UNIT(__nv_bfloat16, 64, 64, __nv_bfloat16);
extern FC_FWD_UNIT(__half, 64, 64, __half);
// fwd_d96.cu
extern FC_FWD_UNIT(__nv_bfloat16, 96, 96, __nv_bfloat16);
extern FC_FWD_UNIT(__half, 96, 96, __half);
// fwd_d128.cu
extern FC_FWD_UNIT(__nv_bfloat16, 128, 128, __nv_bfloat16);
extern FC_FWD_UNIT(__half, 128, 128, __half);
// fwd_d192.cu
extern FC_FWD_UNIT(__nv_bfloat16, 192, 192, __nv_bfloat16);
extern FC_FWD_UNIT(__half, 192, 192, __half);
extern FC_FWD_UNIT(__nv_bfloat16, 192, 128, __nv_bfloat16);
extern FC_FWD_UNIT(__half, 192, 128, __half);
// fwd_d256.cu
extern FC_FWD_UNIT(__nv_bfloat16, 256, 256, __nv_bfloat16);
extern FC_FWD_UNIT(__half, 256, 256, __half);
// fwd_fp8.cu
extern FC_FWD_UNIT(__nv_bfloat16, 64, 64, unsigned char);
extern FC_FWD_UNIT(__half, 64, 64, unsigned char);
extern FC_FWD_UNIT(__nv_bfloat16, 128, 128, unsigned char);
extern FC_FWD_UNIT(__half, 128, 128, unsigned char);
extern FC_FWD_UNIT(__nv_bfloat16, 256, 256, unsigned char);
extern FC_FWD_UNIT(__half, 256, 256, unsigned char);

#ifdef FC_TRACE
// Each unit's trace table (trace.cuh: one per translation unit), copied by fwd.cu's fc_cuda_trace_fwd_copy.
#define FC_FWD_TRACE_UNIT(name) \
    void fc_trace_copy_##name(unsigned long long (*dst)[4]) { fc_trace_copy(dst); }
void fc_trace_copy_d64(unsigned long long (*)[4]);
void fc_trace_copy_d96(unsigned long long (*)[4]);
void fc_trace_copy_d128(unsigned long long (*)[4]);
void fc_trace_copy_d192(unsigned long long (*)[4]);
void fc_trace_copy_d256(unsigned long long (*)[4]);
void fc_trace_copy_fp8(unsigned long long (*)[4]);
#else
#define FC_FWD_TRACE_UNIT(name)
#endif
